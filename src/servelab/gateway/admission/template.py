"""The model's own chat template, rendered in process the way Hugging Face's ``apply_chat_template`` renders it
(the renderer vLLM calls): a sandboxed, immutable Jinja environment with ``trim_blocks`` and ``lstrip_blocks``,
loop controls, ``{% generation %}`` blocks, the ``tojson`` filter that does not escape HTML or non-ASCII, and
the globals ``raise_exception`` and ``strftime_now`` (whose outputs are counted at their widest on any date:
:mod:`.clock`; a template that does more with them than print them does not load). A template that raises, that
prints anything but a string, number, boolean or None, or that cannot compile, makes the request uncountable (the
caller then treats it as long): it never falls back to a guess.

A model folder may hold several named templates (:class:`TemplateSet`); the engine picks one per request as
transformers' ``get_chat_template`` does, and so does the count."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from servelab.gateway.admission.affine import compile_bound
from servelab.gateway.admission.clock import Clock, Span, check_printed
from servelab.gateway.admission.errors import Uncountable


class TemplateError(Exception):
    """The template itself cannot be used (it does not compile)."""


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:  # fmt: skip
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str) -> None:
    raise Uncountable(f"the chat template refused the conversation: {message}")


def _no_clock(fmt: Any) -> str:
    """The global ``strftime_now`` is never called: each render hands the template a :class:`Clock` of its own."""
    raise Uncountable("strftime_now was called outside a render")


PLAIN = (str, int, float, bool, type(None))


def _plain(value: Any) -> Any:
    """What an output may print: a string, a number, a boolean, None or nothing. A list, a dict or a method prints
    its Python repr, which differs between the engine's objects and these (key order, extra keys, addresses)."""
    from jinja2 import Undefined

    if isinstance(value, (*PLAIN, Undefined)):
        return value
    raise Uncountable(f"the chat template prints a {type(value).__name__} as text: its repr is not counted")


def _generation_extension() -> type:
    """``{% generation %}…{% endgeneration %}`` (assistant masks in training templates): compiled as transformers
    compiles it, a call block whose body is a caller macro (inside it ``kwargs`` is ``{}`` and ``varargs`` ``()``,
    as the engine's template sees them), rendered as that body."""
    from jinja2 import nodes
    from jinja2.ext import Extension

    class Generation(Extension):
        tags = {"generation"}  # noqa: RUF012 (jinja reads it as a class attribute)

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    return Generation


class ChatTemplate:
    """One compiled template; :meth:`render` gives the prompt text the engine would tokenize."""

    def __init__(self, source: str, special: dict[str, str]) -> None:
        from jinja2 import TemplateSyntaxError
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[_generation_extension(), loopcontrols], finalize=_plain
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise
        env.globals["strftime_now"] = _no_clock
        try:
            self._template = env.from_string(source)
        except TemplateSyntaxError as exc:
            raise TemplateError(f"the chat template does not compile: {exc}") from None
        from jinja2 import nodes

        if not check_printed(nodes, env.parse(source)):
            raise TemplateError("the chat template does more with strftime_now's value than print it")
        self.source = source
        self.developer_role = '"developer"' in source or "'developer'" in source
        self.special = special  # bos_token, eos_token, ...: in the template's context as HF passes them
        self.may_iterate_content = _may_iterate_content(env, source)
        self.variables = _variables(env, source)
        self.affine = None if self.may_iterate_content else compile_bound(env, source)

    def render(self, context: dict[str, Any]) -> str:
        """The template applied to ``context`` (messages, tools, documents, add_generation_prompt, the request's
        chat_template_kwargs), each ``strftime_now`` output at the reference date. Any failure inside the template
        is :class:`Uncountable`."""
        return self.render_spans(context).text

    def render_spans(self, context: dict[str, Any]) -> Rendered:
        """:meth:`render`, with where each ``strftime_now`` output lies and its widest on any date."""
        clock = Clock()
        try:
            text = str(self._template.render(**{**self.special, **context, "strftime_now": clock}))
        except Uncountable:
            raise
        except Exception as exc:  # a template is code: whatever it raises, the count cannot be made
            raise Uncountable(f"the chat template failed on this request: {type(exc).__name__}: {exc}") from None
        return Rendered(*clock.resolve(text))


class Rendered(NamedTuple):
    text: str  # the prompt, each strftime_now output at the reference date
    clock: tuple[Span, ...]  # where those outputs lie, in order


class TemplateSet:
    """A folder's chat templates by name, as transformers holds them (a folder's one template is ``default``).

    Rule (transformers' ``get_chat_template(None, tools)``, which vLLM's ``resolve_chat_template`` calls with the
    request's tools): ``tool_use`` when the request passes tools (a list, even an empty one) and the folder names
    one, else ``default``; a folder with neither makes the request :class:`Uncountable` (vLLM then falls back to a
    template of its own). ``processor``: the template of a legacy chat_template.json, which vLLM prefers (through
    the processor) for a request without tools: such a request is counted with both, the larger kept."""

    def __init__(self, named: dict[str, ChatTemplate], processor: ChatTemplate | None = None) -> None:
        self.named, self.processor = named, processor

    @property
    def default(self) -> ChatTemplate | None:
        return self.named.get("default")

    def pick(self, tools: bool) -> list[ChatTemplate]:
        """The templates the engine may render for a request with (or without) tools."""
        if tools and "tool_use" in self.named:
            return [self.named["tool_use"]]
        if "default" not in self.named:
            raise Uncountable("the folder's chat templates have no default: the engine picks one of its own")
        if tools or self.processor is None:
            return [self.named["default"]]
        return [self.processor, self.named["default"]]


def _variables(env: Any, source: str) -> frozenset[str]:
    """The names the template reads from its context (what a request's template kwargs can reach)."""
    from jinja2 import meta

    return frozenset(meta.find_undeclared_variables(env.parse(source)))


def _may_iterate_content(env: Any, source: str) -> bool:
    """Whether the template might walk a message's content as a list of parts (vLLM's "openai" content format,
    which it picks by such a loop). Broader than vLLM's test on purpose: a loop over anything that mentions
    ``content``, or over a macro's parameter, counts; only a template with neither renders in one format."""
    from jinja2 import nodes

    tree = env.parse(source)
    params = {arg.name for macro in tree.find_all(nodes.Macro) for arg in macro.args}
    for loop in tree.find_all(nodes.For):
        for node in [loop.iter, *loop.iter.find_all(nodes.Node)]:
            if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const) and node.arg.value == "content":
                return True
            if isinstance(node, nodes.Getattr) and node.attr == "content":
                return True
            if isinstance(node, nodes.Name) and (node.name == "content" or node.name in params):
                return True
    return False
