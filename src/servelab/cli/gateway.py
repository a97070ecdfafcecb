"""`servelab gateway --config gateway.toml`: the admission-control proxy."""

from __future__ import annotations

from pathlib import Path

import typer

from servelab.cli._common import console
from servelab.gateway.config import load_config


def gateway(
    config: Path = typer.Option(..., "--config", help="gateway.toml: upstreams, policy, keys, limits."),
    host: str | None = typer.Option(None, "--host", help="Listen address (overrides the config)."),
    port: int | None = typer.Option(None, "--port", help="Listen port (overrides the config)."),
) -> None:
    """An OpenAI-compatible proxy that keeps voice safe: long prefills go external while realtime is active."""
    import uvicorn

    from servelab.gateway.app import create_app

    settings = load_config(config)
    app, _ = create_app(settings)
    listen_host, listen_port = host or settings.host, port or settings.port
    console().print(f"servelab gateway on http://{listen_host}:{listen_port} (local {settings.local.url})")
    uvicorn.run(app, host=listen_host, port=listen_port, log_level="info", access_log=False)
