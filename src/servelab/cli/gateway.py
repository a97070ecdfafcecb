"""`servelab gateway --config gateway.toml`: the admission-control proxy."""

from __future__ import annotations

from pathlib import Path

import typer

from servelab.cli._common import console
from servelab.gateway import load_config


def gateway(
    config: Path = typer.Option(..., "--config", help="gateway.toml: upstreams, policy, keys, limits."),
    host: str | None = typer.Option(None, "--host", help="Listen address (overrides the config)."),
    port: int | None = typer.Option(None, "--port", min=0, max=65535, help="Listen port (overrides the config)."),
    workers: int | None = typer.Option(
        None,
        "--workers",
        min=1,
        max=256,
        help="Worker processes on one port (default: the config's 'workers', else one per two cores, at most 8).",
    ),
) -> None:
    """An OpenAI-compatible proxy that keeps voice safe: long prefills go external while realtime is active."""
    from servelab.gateway import default_workers, run

    settings = load_config(config)
    updates = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
    settings = settings.model_copy(update=updates)
    count = workers or (settings.workers if "workers" in settings.model_fields_set else default_workers())
    console().print(
        f"servelab gateway on http://{settings.host}:{settings.port} (local {settings.local.url}, {count} worker(s))"
    )
    run(settings, count)
