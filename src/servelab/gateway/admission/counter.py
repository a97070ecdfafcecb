"""Prompt tokens counted in process with the engine's own tokenizer and chat template, for every field each
endpoint prefills, never below the engine's count.

Invariant (the figure is never below what the engine counts):
- The tokenizer is the one the engine builds, and the template variables are the ones it hands the template
  (:mod:`.folder`); the request's fields reach the template as the engine's request model validates them
  (:mod:`.request`).
- The text counted is a superset of what the engine renders: the chat rendered by every template the engine may
  pick for the request (:class:`TemplateSet`; with and without its tools where ``tool_choice`` is ``"none"``), in
  both of vLLM's content formats (the larger count is taken: whichever the engine picks, it is covered), every field
  the template is handed, the request's ``chat_template_kwargs``; ``response_format`` and ``suffix`` are added on
  top. An engine started with ``--chat-template-content-format openai`` hands every template the parts: the gateway
  is told so (``[local] chat_template_content_format``) and renders that format alone. A ``strftime_now`` output
  is counted at its widest on any date (:mod:`.clock`, :mod:`.regions`).
- A *bound* is used only for a tokenizer whose every token covers at least one UTF-8 byte of the (normalized) text
  (a byte-level BPE: :attr:`TokenCounter.byte_bound`), as bytes plus the special tokens the tokenizer adds; any
  other tokenizer is always counted exactly.
- Special tokens are always counted as added (the engine adds them or not: the larger is kept).
- Every prompt of a batch is counted, and the total is multiplied by ``n`` / ``best_of`` (each may be prefilled).
- What cannot be counted raises :class:`Uncountable` (the request is long)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from servelab.gateway.admission.clock import extra_bytes
from servelab.gateway.admission.continuation import cut, tagged
from servelab.gateway.admission.errors import Uncountable
from servelab.gateway.admission.fields import check_fields, template_kwargs
from servelab.gateway.admission.folder import load
from servelab.gateway.admission.messages import conversation, has_reasoning_content
from servelab.gateway.admission.regions import AddedTokens, clocked_tokens
from servelab.gateway.admission.request import context, continues, tool_variants
from servelab.gateway.admission.template import ChatTemplate, Rendered, TemplateSet

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
MAX_FAN_OUT = 1 << 20


class Count(NamedTuple):
    tokens: int
    method: str  # "bound" (bytes, under bound_max), "exact" (the tokenizer), "ids" (token ids given)


class Choice(NamedTuple):
    """One template the engine may render the chat with, its kwargs and the tools it would hand it."""

    template: ChatTemplate
    kwargs: dict[str, Any]
    tools: list[dict[str, Any]] | None

    def context(self, body: dict[str, Any]) -> dict[str, Any]:
        """What the template is handed besides the messages (built only where it is read)."""
        return context(body, self.kwargs, self.tools)


class TokenCounter:
    """The local engine's tokenizer (``tokenizers``) and chat templates, loaded from its model folder."""

    def __init__(
        self,
        tokenizer: Any,
        templates: ChatTemplate | TemplateSet | None,
        content_format: str = "auto",
        default_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if isinstance(templates, ChatTemplate):
            templates = TemplateSet({"default": templates})
        self.tokenizer, self.templates = tokenizer, templates
        self.parts_always = content_format == "openai"  # the engine's --chat-template-content-format openai
        # the engine's --default-chat-template-kwargs: beneath the request's own (a key of the call refused here)
        self.default_kwargs = template_kwargs(default_kwargs or {}, None)
        self.template = templates.default if templates is not None else None  # the one a request without tools gets
        spec = _spec(tokenizer)  # the tokenizer's JSON, read once
        self.byte_bound = _is_byte_level(spec)
        self.prefix_space = bool(_prefix_space(spec))
        # what the post-processor adds, and a prefix space: tokens a text of no bytes can still make
        self.added = len(tokenizer.encode("", add_special_tokens=True).ids) + self.prefix_space
        self.longest = _longest_token_bytes(tokenizer) if self.byte_bound else 1
        self.plain = self.byte_bound and tokenizer.normalizer is None  # bytes of the text are bytes of what is split
        self.added_tokens = AddedTokens(tokenizer)

    @classmethod
    def from_folder(
        cls,
        folder: Path,
        content_format: str = "auto",
        chat_template: str | None = None,
        default_kwargs: dict[str, Any] | None = None,
    ) -> TokenCounter:
        """From a Hugging Face model folder, as the engine reads it (:func:`.folder.load`), for an engine started
        with ``--chat-template-content-format content_format`` (and ``--chat-template chat_template``, which replaces
        the folder's templates); a folder the engine's tokenizer or templates cannot be read from as the engine reads
        them is a :class:`TemplateError` (the caller falls back to the engine's own count)."""
        loaded = load(folder, chat_template)
        return cls(loaded.tokenizer, loaded.templates, content_format, default_kwargs)

    # ---- the two endpoints -------------------------------------------------------------------------------
    def count(self, path: str, body: dict[str, Any], bound_max: int, long_at: int | None = None) -> Count:
        """The prompt tokens ``body`` puts on the engine at ``path``: a bound when it is at most ``bound_max``, or
        when even the fewest tokens its bytes can make (``bytes / longest token``) are over ``long_at`` (the
        request is long either way: no exact count is spent on it); else the exact count. Times the fan-out. A
        chat's renders are alternatives (the largest counts); the other texts all count."""
        if path == CHAT:
            choices = self._choices(body)
            if (quick := self._affine(body, choices, bound_max, long_at)) is not None:
                return quick
            renders, texts, ids = self._renders(body, choices), _extra_texts(body, ("response_format",)), 0
        else:
            check_fields(False, body, frozenset())
            renders, texts, ids = [], *self._completion(body)
        times = fan_out(body)
        if self.byte_bound:
            text_bytes = max(map(self._bound_render, renders), default=0) + sum(map(self._bound, texts))
            if self._settles(ids, text_bytes, times, bound_max, long_at):
                return Count((ids + text_bytes) * times, "bound")
        exact = ids + max(map(self._exact_render, renders), default=0) + sum(map(self._exact, texts))
        return Count(exact * times, "exact" if renders or texts else "ids")

    def prompt_ids(self, path: str, body: dict[str, Any]) -> list[int]:
        """The token ids of the prompt ``body`` puts on the engine (a chat: its first render, each clock output at
        the reference date; a completions batch: its first prompt), for a recorded trace's block hashes;
        :class:`Uncountable` where the count would be."""
        if path == CHAT:
            return self._ids(self._renders(body, self._choices(body))[0].text)
        check_fields(False, body, frozenset())
        prompt: Any = body.get("prompt")
        first: Any = prompt[0] if isinstance(prompt, list) and prompt and not _is_id(prompt[0]) else prompt
        texts, _ = prompts(first)  # refused when of no known form
        return self._ids(texts[0]) if texts else [int(i) for i in first if _is_id(i)]  # ids, as prompts() found

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer.encode_batch_fast([text], add_special_tokens=True)[0].ids)

    def _choices(self, body: dict[str, Any]) -> list[Choice]:
        """Every template the engine may render this chat with (:meth:`TemplateSet.pick`, for each set of tools it
        may hand it), each with its context; the fields are checked against each template's variables."""
        if self.templates is None:
            check_fields(True, body, frozenset())
            raise Uncountable("the model folder has no chat template")
        choices = []
        for tools in tool_variants(body):
            for template in self.templates.pick(tools is not None):
                given = check_fields(True, body, template.variables)
                defaults = {k: v for k, v in self.default_kwargs.items() if k in template.variables}
                choices.append(Choice(template, {**defaults, **given}, tools))
        return choices

    def _affine(self, body: dict[str, Any], choices: list[Choice], bound_max: int, long_at: int | None) -> Count | None:
        """The byte bound of a chat from each template's affine bound (:mod:`.affine`), no render, where it decides:
        at most ``bound_max``, or long past ``long_at`` by its fewest tokens; else None (render and count)."""
        if not self.plain or self.parts_always or has_reasoning_content(body.get("messages")) or continues(body):
            return None  # a continued message is rendered with its tag (.continuation): no affine bound of that
        rendered = 0
        for choice in choices:
            template = choice.template
            if template.affine is None:
                return None
            messages = conversation(body.get("messages"), False, template.developer_role)
            names = {**template.special, **choice.context(body)} if template.affine.reads_names else {}
            size = template.affine.bytes(messages, names)
            if size is None:
                return None
            rendered = max(rendered, size)
        text_bytes = rendered + self.added + sum(self._bound(t) for t in _extra_texts(body, ("response_format",)))
        times = fan_out(body)
        return Count(text_bytes * times, "bound") if self._settles(0, text_bytes, times, bound_max, long_at) else None

    def _settles(self, ids: int, text_bytes: int, times: int, bound_max: int, long_at: int | None) -> bool:
        """Whether a byte bound decides the request without an exact count: it is at most ``bound_max``, or even
        the fewest tokens its bytes can make (``bytes // longest token``) are over ``long_at``."""
        if (ids + text_bytes) * times <= bound_max:
            return True
        return long_at is not None and (ids + text_bytes // self.longest) * times > long_at

    def _renders(self, body: dict[str, Any], choices: list[Choice]) -> list[Rendered]:
        """The chat rendered by each template it may get, in each content format the engine may choose (one where
        the template never walks a message's parts), and, where an assistant message carries
        ``reasoning_content``, as engines that read it and engines that do not; a continued final message tagged
        and cut as the engine does (:mod:`.continuation`); any one failing is :class:`Uncountable` (the engine may
        render that one)."""
        variants = (False, True) if has_reasoning_content(body.get("messages")) else (False,)
        renders, continued = [], continues(body)
        for choice in choices:
            template, context_ = choice.template, choice.context(body)
            formats = (True,) if self.parts_always else (False, True) if template.may_iterate_content else (False,)
            for openai_format, reasoning_content in itertools.product(formats, variants):
                messages = conversation(body.get("messages"), openai_format, template.developer_role, reasoning_content)
                if not continued:
                    renders.append(template.render_spans({**context_, "messages": messages}))
                    continue
                messages, final = tagged(messages, template.source)
                renders += cut(template.render_spans({**context_, "messages": messages}), final)
        return renders

    def _completion(self, body: dict[str, Any]) -> tuple[list[str], int]:
        texts, ids = prompts(body.get("prompt"))
        return [*texts, *_extra_texts(body, ("suffix",))], ids

    # ---- one text ----------------------------------------------------------------------------------------
    def _bound(self, text: str) -> int:
        normalizer = self.tokenizer.normalizer
        normalized = normalizer.normalize_str(text) if normalizer is not None else text
        return len(normalized.encode("utf-8", "surrogatepass")) + self.added

    def _bound_render(self, rendered: Rendered) -> int:
        """A render's byte bound, each clock output at its widest (a tokenizer without a normalizer only: one
        could widen what the clock prints)."""
        if rendered.clock and not self.plain:
            raise Uncountable("strftime_now's output on another date has no bound with this tokenizer")
        return self._bound(rendered.text) + extra_bytes(rendered.clock, rendered.text)

    def _exact(self, text: str) -> int:
        return len(self.tokenizer.encode_batch_fast([text], add_special_tokens=True)[0].ids)  # no offsets kept

    def _exact_render(self, rendered: Rendered) -> int:
        """A render's exact count; one with clock outputs: exact away from them, bytes near them (:mod:`.regions`)."""
        if not rendered.clock:
            return self._exact(rendered.text)
        if not self.plain:
            raise Uncountable("strftime_now's output on another date has no bound with this tokenizer")
        return clocked_tokens(self.tokenizer, self.added_tokens, rendered.text, rendered.clock, self.prefix_space)


SPLITTERS = frozenset({"Split", "Digits", "Punctuation", "Whitespace", "WhitespaceSplit"})  # cut, never add


def _is_byte_level(spec: dict[str, Any]) -> bool:
    """Every token covers at least one byte of the text: a BPE model behind exactly one ByteLevel pre-tokenizer,
    alone or after pre-tokenizers that only cut the text (a Metaspace, say, writes a 3-byte symbol for a space: not
    byte level), which maps each byte of the text to one symbol."""
    pre = spec.get("pre_tokenizer") or {}
    inner = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    kinds = [p.get("type") if isinstance(p, dict) else None for p in inner]
    byte_level = kinds.count("ByteLevel") == 1 and all(k in SPLITTERS or k == "ByteLevel" for k in kinds)
    return spec.get("model", {}).get("type") == "BPE" and byte_level


def _prefix_space(spec: dict[str, Any]) -> int:
    """The byte a ByteLevel pre-tokenizer adds in front of a text (``add_prefix_space``), else 0."""
    pre = spec.get("pre_tokenizer") or {}
    inner = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    return int(any(isinstance(p, dict) and p.get("type") == "ByteLevel" and p.get("add_prefix_space") for p in inner))


def _spec(tokenizer: Any) -> dict[str, Any]:
    spec = json.loads(tokenizer.to_str())
    return spec if isinstance(spec, dict) else {}


def _longest_token_bytes(tokenizer: Any) -> int:
    """The most UTF-8 bytes one token stands for (a byte-level vocabulary: a symbol a byte; added tokens by their
    text), so ``bytes // this`` is the fewest tokens a text can make."""
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    return max(1, max((len(token) for token in vocab), default=1), _max_added_bytes(tokenizer))


def _max_added_bytes(tokenizer: Any) -> int:
    added = tokenizer.get_added_tokens_decoder().values()
    return max((len(t.content.encode()) for t in added), default=1)


def prompts(prompt: Any) -> tuple[list[str], int]:
    """A completions prompt: a string, strings, token ids or lists of token ids (texts, and ids counted)."""
    if isinstance(prompt, str):
        return [prompt], 0
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return list(prompt), 0
        if all(_is_id(p) for p in prompt):
            return [], len(prompt)
        if all(isinstance(p, list) and p and all(_is_id(i) for i in p) for p in prompt):
            return [], sum(len(p) for p in prompt)
    raise Uncountable("prompt is not a string, strings, token ids or lists of token ids")


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _extra_texts(body: dict[str, Any], keys: tuple[str, ...]) -> list[str]:
    """Fields counted on top where an engine may render them (a larger count is safe)."""
    out = []
    for key in keys:
        value = body.get(key)
        if value is not None:
            out.append(value if isinstance(value, str) else orjson.dumps(value).decode())
    return out


def fan_out(body: dict[str, Any]) -> int:
    """How many times the prompt may be prefilled: the larger of ``n`` and ``best_of`` (read as the engine's
    lax parser reads numbers: 2, 2.0 and "2" alike)."""
    return max(_number(body.get("n")), _number(body.get("best_of")))


def _number(value: Any) -> int:
    if value is None:
        return 1
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise Uncountable(f"n/best_of is not a number: {str(value)[:40]!r}") from None
    if not math.isfinite(number) or number > MAX_FAN_OUT:
        raise Uncountable("n/best_of is too large")
    return max(1, math.ceil(number))
