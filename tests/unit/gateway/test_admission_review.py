"""The classes an adversarial review found in the admission, each checked against the engine's own count (vLLM's
conversion and transformers' template in process: tests/fixtures/vllm_truth.py): the figure is never below it, or
the request is uncounted (long). Templates that render what the embedded model's does not (tool results, reasoning,
numbers, a dict's method) are the review's own, on the embedded model's byte-level tokenizer.

Classes: numbers the gateway's parser reads inexactly (integers past 64 bits); keys vLLM sets that a converter left
out (a tool result's ``tool_call_id`` set to null, read by ``is defined``); ``reasoning`` beside
``reasoning_content``; a look-up that resolves to a dict's method; arithmetic in an output; a pre-tokenizer that
writes more bytes than it reads (Metaspace); special tokens named only in special_tokens_map.json; a part whose
type is not a string."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from servelab.gateway.admission import CHAT, TokenCounter
from servelab.gateway.estimate import Admission

TEMPLATES = Path(__file__).resolve().parents[2] / "fixtures" / "admission_templates"
BIG = "1" + "0" * 299  # a 300-digit integer: orjson reads it as the float 1e+299
LONG_AT, LONG_FIGURE = 8000, 16001


def _user(n: int, **extra: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "hi", **extra} for _ in range(n)]


def _assistant(**fields: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", **fields}]


ARGS = "{" + ",".join(f'"k{i}": {BIG}' for i in range(30)) + "}"
SCHEMA = {"type": "object", "properties": {f"k{i}": {"type": "integer", "maximum": int(BIG)} for i in range(30)}}
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "integer past 64 bits in tool-call arguments": ("tools", {"messages": [
        {"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": ARGS}}]}]}),
    "integer past 64 bits in a tool's schema": ("tools", {"messages": _user(1), "tools": [
        {"type": "function", "function": {"name": "f", "parameters": SCHEMA}}]}),
    "tool_call_id null read by is defined": ("defined", {"messages": _user(1) + [
        {"role": "tool", "content": "r", "tool_call_id": None} for _ in range(200)]}),
    "reasoning beside a short reasoning_content": ("reason", {"messages": _assistant(
        reasoning="think " * 9000, reasoning_content="x")}),
    "reasoning_content alone": ("reason", {"messages": _assistant(reasoning_content="think " * 300)}),
    "a dict's method printed": ("attr", {"messages": _user(20)}),
    "arithmetic in an output": ("float", {"messages": _user(40)}),
    "arithmetic alone": ("float2", {"messages": _user(40)}),
    "Metaspace before ByteLevel": ("metaspace", {"messages": [{"role": "user", "content": "a " * 300}]}),
    "bos_token only in special_tokens_map.json": ("stmap", {"messages": [
        {"role": "user", "content": ""} for _ in range(200)]}),
}  # fmt: skip


def _folder(base: Path, tokenizer: Path, name: str) -> Path:
    """A model folder: the embedded model's tokenizer, with the review's template (and its one change)."""
    folder = base / name
    folder.mkdir()
    spec = json.loads((tokenizer / "tokenizer.json").read_text())
    config = json.loads((tokenizer / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    if name == "metaspace":
        spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": False},
            spec["pre_tokenizer"]]}  # fmt: skip
    if name == "stmap":
        bos = config.pop("bos_token", "<|im_start|>")
        (folder / "special_tokens_map.json").write_text(json.dumps({"bos_token": bos, "eos_token": "<|im_end|>"}))
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    source = TEMPLATES / f"{name}.jinja"
    if source.exists():
        shutil.copy(source, folder / "chat_template.jinja")
    else:
        shutil.copy(tokenizer / "chat_template.jinja", folder / "chat_template.jinja")
    return folder


@pytest.fixture(scope="module")
def folders(model_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("review")
    return {name: _folder(base, model_folder, name) for name in {n for n, _ in CASES.values()}}


@pytest.mark.parametrize("case", list(CASES))
def test_the_figure_is_never_below_the_engines_count(case: str, folders: dict[str, Path]) -> None:
    pytest.importorskip("vllm")
    from tests.fixtures.vllm_truth import engine_count

    name, body = CASES[case]
    body = {"model": "m", **body}
    raw = json.dumps(body).encode()
    admission = Admission(TokenCounter.from_folder(folders[name]), _never, LONG_FIGURE, 1024, LONG_AT)
    figure = asyncio.run(admission.figure(CHAT, orjson.loads(raw), raw))
    truth = engine_count(folders[name], json.loads(raw))
    assert figure.method == "uncounted" or figure.tokens >= truth, (case, figure, truth)


async def _never(body: dict[str, Any]) -> int | None:
    raise AssertionError("counted in process")


@pytest.mark.parametrize("kind", [["text"], {"t": 1}, 7, None])
def test_a_part_whose_type_is_not_a_string_is_uncounted_not_a_crash(kind: object, model_folder: Path) -> None:
    body = {"messages": [{"role": "user", "content": [{"type": kind, "text": "x"}]}]}
    raw = json.dumps(body).encode()
    admission = Admission(TokenCounter.from_folder(model_folder), _never, LONG_FIGURE, 1024, LONG_AT)
    assert asyncio.run(admission.figure(CHAT, orjson.loads(raw), raw)).method == "uncounted"


def test_a_part_with_a_uuid_or_a_media_key_is_uncounted(model_folder: Path) -> None:
    admission = Admission(TokenCounter.from_folder(model_folder), _never, LONG_FIGURE, 1024, LONG_AT)
    for part in ({"type": "text", "text": "x", "uuid": "u1"}, {"type": "text", "text": "x", "image_url": {"url": "u"}}):
        body = {"messages": [{"role": "user", "content": [part]}]}
        raw = json.dumps(body).encode()
        assert asyncio.run(admission.figure(CHAT, orjson.loads(raw), raw)).method == "uncounted", part
