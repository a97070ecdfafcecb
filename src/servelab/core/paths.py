"""Where servelab keeps its files: ``$SERVELAB_HOME``, else ``~/.servelab``."""

from __future__ import annotations

import os
from pathlib import Path


def servelab_home() -> Path:
    home = os.environ.get("SERVELAB_HOME")
    return Path(home).expanduser() if home else Path.home() / ".servelab"
