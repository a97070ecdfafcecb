"""A model folder read as the engine reads it (gateway/admission/folder.py) and a chat's fields as the engine's
request model validates them (request.py): the named templates transformers loads and the one it picks per
request; the vocabulary AutoTokenizer builds (without transformers: tokenizer.json only where AutoTokenizer would
add nothing to it); the special-token variables transformers v5 hands the template; tools, flags and documents as
vLLM's pydantic models re-serialize them. Hypothesis: random tool lists and messages, counted never below vLLM's own
count in process (tests/fixtures/vllm_truth.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servelab.gateway.admission import CHAT, COMPLETIONS, TemplateError, TokenCounter, Uncountable
from servelab.gateway.admission import folder as folder_module
from servelab.gateway.admission.request import context, continues, dump_tools
from tests.fixtures.prompt_strategies import MESSAGE, TEXT
from tests.unit.gateway.model_folders import copy_folder, edit_config

TEMPLATES = Path(__file__).resolve().parents[2] / "fixtures" / "admission_templates"
TOOLS_TEMPLATE = (TEMPLATES / "tools.jinja").read_text()
CHECKS = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large]
LAX = st.one_of(st.none(), st.booleans(), st.sampled_from([0, 1, 2, "true", "yes", "off", "maybe", 1.0, [], {}]))
TOOL = st.fixed_dictionaries(
    {"function": st.fixed_dictionaries(
        {"name": st.one_of(st.text("abcxyz_", min_size=1, max_size=8), st.integers(0, 3))},
        optional={"description": st.one_of(TEXT, st.none()), "strict": LAX, "defer_loading": LAX, "extra": TEXT,
                  "parameters": st.sampled_from([None, {"type": "object"}, []])})},
    optional={"type": st.sampled_from(["function", "other"]), "defer_loading": LAX, "cache_control": TEXT},
)  # fmt: skip


_copy, _edit = copy_folder, edit_config


@pytest.fixture()
def no_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway on a host without transformers: tokenizer.json read, and checked."""
    monkeypatch.setattr(folder_module, "_engine_tokenizer", lambda folder: None)


# ---- templates ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["one file", "config list", "files", "extra files only", "config string"])
def test_the_named_templates_are_the_ones_transformers_loads_and_picks(
    model_folder: Path, tmp_path: Path, layout: str
) -> None:
    from transformers import AutoTokenizer

    folder = _copy(tmp_path, model_folder, "named")
    default = (folder / "chat_template.jinja").read_text()
    if layout in ("config list", "config string", "extra files only"):
        (folder / "chat_template.jinja").unlink()
    if layout == "config list":
        _edit(folder, chat_template=[{"name": "default", "template": default},
                                     {"name": "tool_use", "template": TOOLS_TEMPLATE}])  # fmt: skip
    if layout == "config string":
        _edit(folder, chat_template=default)
    if layout in ("files", "extra files only"):
        (folder / "additional_chat_templates").mkdir()
        (folder / "additional_chat_templates" / "tool_use.jinja").write_text(TOOLS_TEMPLATE)
    loaded = folder_module.load(folder)
    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    assert loaded.templates is not None
    assert {k: t.source for k, t in loaded.templates.named.items()} == folder_module._named(tok.chat_template)
    for tools in (None, [], [{"type": "function", "function": {"name": "f"}}]):
        try:
            expected = tok.get_chat_template(None, tools=tools)
        except ValueError:  # no default: vLLM falls back to a template of its own
            with pytest.raises(Uncountable):
                loaded.templates.pick(tools is not None)
            continue
        assert [t.source for t in loaded.templates.pick(tools is not None)] == [expected]


def test_a_folder_with_a_template_that_does_not_compile_is_not_counted_in_process(
    model_folder: Path, tmp_path: Path
) -> None:
    folder = _copy(tmp_path, model_folder, "broken")
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "tool_use.jinja").write_text("{% for %}")
    with pytest.raises(TemplateError):
        TokenCounter.from_folder(folder)


def test_tool_choice_none_counts_the_render_with_and_without_tools(model_folder: Path, tmp_path: Path) -> None:
    """A server flag the gateway cannot see drops the tools where tool_choice is "none": both are counted."""
    folder = _copy(tmp_path, model_folder, "choice")
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "tool_use.jinja").write_text(TOOLS_TEMPLATE)
    (folder / "chat_template.jinja").write_text("{{ 'x' * 5000 }}{% for m in messages %}{{ m.content }}{% endfor %}")
    counter = TokenCounter.from_folder(folder)
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": [{"function": {"name": "f"}}]}
    with_tools = counter.count(CHAT, body, 0).tokens
    assert counter.count(CHAT, {**body, "tool_choice": "none"}, 0).tokens > with_tools


@pytest.mark.parametrize("file", ["chat_template.json", "processor_config.json"])
def test_a_processors_template_is_counted_for_a_request_without_tools(
    model_folder: Path, tmp_path: Path, file: str
) -> None:
    """vLLM asks the processor first for a request without tools; the processor reads templates the tokenizer does
    not: counted beside the tokenizer's (the larger kept); a form not read here refuses the folder."""
    folder = _copy(tmp_path, model_folder, "processor")
    (folder / file).write_text(json.dumps({"chat_template": "{{ '7' * 3000 }}"}))
    counter = TokenCounter.from_folder(folder)
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
    assert counter.count(CHAT, body, 0).tokens >= 3000
    assert counter.count(CHAT, {**body, "tools": [{"function": {"name": "f"}}]}, 0).tokens < 3000
    (folder / file).write_text(json.dumps({"chat_template": {"default": "x"}}))
    with pytest.raises(TemplateError):
        TokenCounter.from_folder(folder)


# ---- the vocabulary and the template's special tokens ---------------------------------------------------------
@pytest.mark.usefixtures("no_transformers")
@pytest.mark.parametrize(
    "change",
    [
        {"added_tokens_decoder": {"49152": {"content": "ell", "special": False}}},
        {"marker_token": "ell"},
        {"extra_special_tokens": ["<|new|>"]},
        {"tokenizer_class": "Qwen2Tokenizer"},
        {"added_tokens_decoder": {"0": {"content": "<|endoftext|>", "special": True, "lstrip": True}}},
    ],
)
def test_without_transformers_a_vocabulary_autotokenizer_would_change_is_not_counted(
    model_folder: Path, tmp_path: Path, change: dict[str, Any]
) -> None:
    folder = _copy(tmp_path, model_folder, "vocab")
    TokenCounter.from_folder(folder)  # the folder as it is loads
    _edit(folder, **change)
    with pytest.raises(TemplateError):
        TokenCounter.from_folder(folder)


@pytest.mark.parametrize("transformers", [True, False])
@pytest.mark.parametrize("how", ["truncation in tokenizer.json", "split_special_tokens"])
def test_the_count_is_autotokenizers_call(
    model_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, transformers: bool
) -> None:
    """What transformers' call does beyond the backend: no truncation unless asked (tokenizer.json may hold one),
    special tokens split as text where the config says so."""
    from transformers import AutoTokenizer

    folder = _copy(tmp_path, model_folder, "call")
    if how == "split_special_tokens":
        _edit(folder, split_special_tokens=True)
    else:
        spec = json.loads((folder / "tokenizer.json").read_text())
        spec["truncation"] = {"max_length": 16, "strategy": "LongestFirst", "stride": 0, "direction": "Right"}
        (folder / "tokenizer.json").write_text(json.dumps(spec))
    if not transformers:
        monkeypatch.setattr(folder_module, "_engine_tokenizer", lambda folder: None)
    prompt = "<|im_start|>hello world, " * 200
    engine = len(AutoTokenizer.from_pretrained(str(folder), local_files_only=True)(prompt)["input_ids"])
    assert TokenCounter.from_folder(folder).count(COMPLETIONS, {"prompt": prompt}, 0).tokens == engine


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"turn_token": "<|im_end|>"},
        {"turn_token": {"content": "<|im_start|>", "special": True}, "sep_token": "<|im_end|>"},
        {"extra_special_tokens": {"image_token": "<|endoftext|>"}},
        {"add_bos_token": True, "pad_token": None},
    ],
)
def test_the_template_variables_are_transformers_v5s(
    model_folder: Path, tmp_path: Path, change: dict[str, Any]
) -> None:
    """Without transformers, the variables derived from tokenizer_config.json are the ones it passes; with it, its
    own."""
    from transformers import AutoTokenizer

    folder = _copy(tmp_path, model_folder, "special")
    _edit(folder, **change)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    engine = AutoTokenizer.from_pretrained(str(folder), local_files_only=True).special_tokens_map
    assert folder_module.special_tokens(folder, config) == engine
    loaded = folder_module.load(folder)
    assert loaded.templates is not None and loaded.templates.named["default"].special == engine


# ---- request fields as the engine's model leaves them -------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(tools=st.lists(TOOL, max_size=3))
def test_tools_are_dumped_as_vllms_model_dumps_them(tools: list[dict[str, Any]]) -> None:
    pytest.importorskip("vllm")
    from pydantic import ValidationError
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionToolsParam

    try:
        expected = [ChatCompletionToolsParam.model_validate(json.loads(json.dumps(t))).model_dump() for t in tools]
    except ValidationError:
        with pytest.raises(Uncountable):
            dump_tools(tools)
        return
    assert dump_tools(tools) == expected
    assert json.dumps(dump_tools(tools)) == json.dumps(expected)  # key order too: tojson prints it


@settings(max_examples=100, deadline=None)
@given(generation=LAX, final=LAX)
def test_flags_reach_the_template_as_vllm_validated_them(generation: Any, final: Any) -> None:
    pytest.importorskip("vllm")
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    body = {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": generation,
            "continue_final_message": final}  # fmt: skip
    try:
        request = ChatCompletionRequest.model_validate(body)
    except Exception:  # pydantic's or vLLM's own validation error: the engine answers 400, any figure is safe
        return
    seen = context(body, {}, None)
    assert seen["add_generation_prompt"] is request.add_generation_prompt
    assert continues(body) is request.continue_final_message
    assert "continue_final_message" not in seen  # the renderer's own parameter: the template never sees it


# ---- the figure against vLLM's own count ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def tool_folder(model_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Named templates: the model's own as default, the review's tools.jinja (``tool | tojson``) as tool_use."""
    folder = _copy(tmp_path_factory.mktemp("tools"), model_folder, "tools")
    (folder / "additional_chat_templates").mkdir()
    (folder / "additional_chat_templates" / "tool_use.jinja").write_text(TOOLS_TEMPLATE)
    return folder


@settings(max_examples=60, deadline=None, suppress_health_check=CHECKS)
@given(
    tools=st.one_of(st.none(), st.lists(TOOL, max_size=3)),
    messages=st.lists(MESSAGE, min_size=1, max_size=3),
    generation=LAX,
)
def test_random_tools_and_messages_are_never_counted_below_vllm(
    tool_folder: Path, tools: Any, messages: list[Any], generation: Any
) -> None:
    pytest.importorskip("vllm")
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from tests.fixtures.vllm_truth import engine_count

    body: dict[str, Any] = {"model": "m", "messages": messages, "add_generation_prompt": generation}
    if tools is not None:
        body["tools"] = tools
    body = json.loads(json.dumps(body))
    try:
        ChatCompletionRequest.model_validate(json.loads(json.dumps(body)))
    except Exception:  # pydantic's or vLLM's own validation error: the engine answers 400, nothing is prefilled
        return
    try:
        figure = _counter(tool_folder).count(CHAT, body, 0)
    except Uncountable:
        return  # long: never low
    try:
        truth = engine_count(tool_folder, json.loads(json.dumps(body)))
    except Exception as exc:  # the template raised in the engine: refused as well
        if "jinja" not in type(exc).__module__ and not isinstance(exc, ValueError | TypeError):
            raise
        return
    assert figure.tokens >= truth, (figure, truth)


_COUNTERS: dict[Path, TokenCounter] = {}


def _counter(folder: Path) -> TokenCounter:
    if folder not in _COUNTERS:
        _COUNTERS[folder] = TokenCounter.from_folder(folder)
    return _COUNTERS[folder]
