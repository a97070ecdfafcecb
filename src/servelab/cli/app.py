"""The root command and its subcommands."""

from __future__ import annotations

import typer

from servelab._version import __version__
from servelab.cli import bench, check, engine, plan, runs
from servelab.cli.coexist import coexist
from servelab.cli.eval import eval_command
from servelab.cli.gateway import gateway
from servelab.cli.help import plain_help
from servelab.cli.report import report
from servelab.cli.sweep import sweep

app = typer.Typer(
    name="servelab",
    help="Plan, benchmark, evaluate and protect self-hosted LLM serving.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"servelab {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """servelab: will it fit, how fast, how good, and does it make the voice stutter."""


app.command("check")(check.check)
app.command("plan")(plan.plan)
app.command("bench")(bench.bench)
app.command("compare")(bench.compare)
app.command("eval")(eval_command)
app.command("gateway")(gateway)
app.command("coexist")(coexist)
app.command("report")(report)
app.command("sweep")(sweep)
app.add_typer(engine.app, name="engine")
app.add_typer(runs.app, name="runs")
plain_help(app)  # last: every command registered above writes its help whole at any width
