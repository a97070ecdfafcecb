"""`--help` of every command and group at 80 and 60 columns: every option name whole (rich's panels printed
`--gpu-memory-utilizat…`), no word of a help text broken at a hyphen, no line cut."""

from __future__ import annotations

import re

import click
import pytest
import typer

from servelab.cli import app, main


def commands(group: click.Command, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    found = [(path, group)]
    for name, sub in getattr(group, "commands", {}).items():
        found += commands(sub, (*path, name))
    return found


ALL = commands(typer.main.get_command(app))


def test_every_command_is_walked() -> None:
    names = {" ".join(path) for path, _ in ALL}
    assert {"", "plan", "bench", "check", "coexist", "eval", "gateway", "report", "runs list", "engine up"} <= names


@pytest.mark.parametrize("width", [80, 60])
def test_option_names_are_whole_in_every_help(
    width: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    for path, command in ALL:
        assert main([*path, "--help"]) == 0
        text = capsys.readouterr().out
        assert "…" not in text and text.startswith("Usage: servelab"), path
        for param in command.params:
            for name in (n for n in [*param.opts, *param.secondary_opts] if n.startswith("--")):
                assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), (path, name, text)
        broken = [line for line in text.splitlines() if re.search(r"\w-$", line)]
        assert not broken, (path, broken)
