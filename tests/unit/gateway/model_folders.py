"""Model folders for admission tests: the embedded model's tokenizer files (no weights), changed by the test."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import orjson

from servelab.gateway.admission import CHAT
from servelab.gateway.estimate import Admission


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


LONG_AT, LONG_FIGURE = 8000, 16001  # the attack tests' threshold, and the figure of a request that is long


async def never(body: dict[str, Any]) -> int | None:
    raise AssertionError("counted in process")


def figure(counter: Any, body: dict[str, Any], bound_max: int = 1024) -> Any:
    """The gateway's figure for ``body`` as its handler computes it (the raw bytes parsed by orjson)."""
    raw = json.dumps(body).encode()
    admission = Admission(counter, never, LONG_FIGURE, bound_max, LONG_AT)
    return asyncio.run(admission.figure(CHAT, orjson.loads(raw), raw))


def assert_not_below(figure: Any, truth: int) -> None:
    assert figure.method == "uncounted" or figure.tokens >= truth, (
        f"admitted at {figure.tokens} ({figure.method}) but the engine prefills {truth} tokens"
        + (f"; threshold {LONG_AT}: routed local though long" if figure.tokens <= LONG_AT < truth else "")
    )
