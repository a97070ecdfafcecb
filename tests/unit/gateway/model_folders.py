"""Model folders for admission tests: the embedded model's tokenizer files (no weights), changed by the test."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any


def copy_folder(base: Path, source: Path, name: str) -> Path:
    """``base/name`` holding ``source``'s tokenizer files, its template and config."""
    folder = base / name
    folder.mkdir()
    for file in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "config.json"):
        if (source / file).exists():
            shutil.copy(source / file, folder / file)
    return folder


def edit_config(folder: Path, **changes: Any) -> None:
    """Keys of the folder's tokenizer_config.json set to ``changes``."""
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))
