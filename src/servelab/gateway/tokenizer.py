"""Finding the local engine's tokenizer and chat template, so the gateway counts prompts in process.

Rule: a folder named in the config must load (else the gateway does not start: a count the user asked for is
never silently replaced); with none named, the folder the engine reports as its model's ``root`` in /v1/models
is used when it is on this host and loads; otherwise the engine's own /tokenize counts (never a guess). A folder
loads off the event loop (with transformers, the engine's own tokenizer takes seconds to build)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import orjson

from servelab.core.errors import UsageError
from servelab.gateway.admission import TokenCounter
from servelab.gateway.client import HttpClient, UpstreamError
from servelab.gateway.config import Upstream


async def load_counter(local: Upstream, client: HttpClient) -> tuple[TokenCounter | None, bool]:
    """The counter, and whether that is settled (False: the engine did not answer /v1/models yet; ask again)."""
    if local.tokenizer:
        try:
            return await _load(Path(local.tokenizer).expanduser(), local), True
        except Exception as exc:  # any failure to load the folder the user named stops the start
            raise UsageError(f"local.tokenizer {local.tokenizer}: cannot load it: {exc}") from None
    answered, root = await _served_root(client)
    if root is None:
        return None, answered
    try:
        return await _load(root, local), True
    except Exception as exc:  # a folder we only guessed at: the engine's /tokenize counts instead
        print(f"servelab gateway: {root} did not load ({exc}); counting with the engine's /tokenize",
              file=sys.stderr)  # fmt: skip
        return None, True


async def _load(folder: Path, local: Upstream) -> TokenCounter:
    """The folder's counter for an engine started with the render flags the config mirrors."""
    return await asyncio.to_thread(TokenCounter.from_folder, folder, local.chat_template_content_format,
                                   local.chat_template, local.default_chat_template_kwargs)  # fmt: skip


async def _served_root(client: HttpClient) -> tuple[bool, Path | None]:
    """Whether the engine answered /v1/models, and the local model folder it serves from when it names one that
    exists here."""
    try:
        status, data = await client.get("/models", timeout=5)
        models = orjson.loads(data).get("data") if status == 200 else None
    except (UpstreamError, TimeoutError, ValueError, AttributeError):
        return False, None
    for model in models if isinstance(models, list) else []:
        root = model.get("root") if isinstance(model, dict) else None
        if isinstance(root, str) and (Path(root) / "tokenizer.json").is_file():
            return True, Path(root)
    return status == 200, None
