"""The `servelab` command line: thin typer commands over library calls."""

from servelab.cli.app import app
from servelab.cli.main import main

__all__ = ["app", "main"]
