"""What a chat template is handed besides the messages, as the engine's request model leaves it (vLLM 0.32's
``ChatCompletionRequest``, read in its ``entrypoints/openai/chat_completion/protocol.py`` and
``entrypoints/generate/base/protocol.py``), not as the client sent it.

Rule: a field the engine's pydantic model validates reaches the template as the model re-serializes it, by the same
coercions (pydantic's own validators, run here on the same types): ``add_generation_prompt`` as a boolean (``1`` is
``True``; ``continue_final_message`` is validated alike but is the renderer's, not the template's: it never reaches
the template, :mod:`.continuation`); ``documents`` as a list of string maps; each tool as
``ChatCompletionToolsParam.model_dump()`` gives it: ``{"type": "function", "function": {"name", "description",
"parameters"[, "strict"][, "defer_loading"]}[, "defer_loading"]}``, extra keys dropped, ``strict``/``defer_loading``
coerced to booleans and left out when null, and a tool's ``defer_loading`` copied into its function when the
function has none (so it prints twice). A value the model would refuse makes the request :class:`Uncountable` (the
engine answers 400: nothing is prefilled, and the figure of a request that is long is never low).

Which tools the template sees is itself a choice the gateway cannot see: vLLM drops them where ``tool_choice`` is
``"none"`` and the server runs with ``--exclude-tools-when-tool-choice-none``; :func:`tool_variants` gives both."""

from __future__ import annotations

from typing import Any, Literal

from servelab.gateway.admission.errors import Uncountable

FLAGS = (("add_generation_prompt", True),)  # handed to the template
CONTINUE = "continue_final_message"  # the renderer's own parameter: never handed to the template (.continuation)
RESERVED = frozenset({"strftime_now", "raise_exception"})  # the renderer's globals: a kwarg may not stand in


def context(body: dict[str, Any], kwargs: dict[str, Any], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    """What the template is handed besides the messages: the request's own fields over its template kwargs (as the
    engine merges them: a field the request sets is never overridden by a kwarg), each as the engine's model
    validated it."""
    if RESERVED & kwargs.keys():
        raise Uncountable("chat_template_kwargs names a global of the renderer (strftime_now, raise_exception)")
    out = {**kwargs, "tools": tools, "documents": _documents(body.get("documents"))}
    for name, default in FLAGS:
        out[name] = _bool(body.get(name, default), name)
    return out


def continues(body: dict[str, Any]) -> bool:
    """Whether the request continues its final message (as the engine's model validates the flag)."""
    return _bool(body.get(CONTINUE, False), CONTINUE)


def tool_variants(body: dict[str, Any]) -> list[list[dict[str, Any]] | None]:
    """The tools the engine may hand the template: as its model dumps them (None where the request has none), and
    also None where ``tool_choice`` is ``"none"`` (a server flag the gateway cannot see drops them then)."""
    tools = dump_tools(body.get("tools"))
    if tools is not None and body.get("tool_choice") == "none":
        return [tools, None]
    return [tools]


def dump_tools(tools: Any) -> list[dict[str, Any]] | None:
    """``[tool.model_dump() for tool in request.tools]`` as vLLM computes it (None where ``tools`` is null or
    absent; an empty list stays a list: the engine passes it, and a template's ``tools is not none`` sees it)."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise Uncountable("tools is not a list")
    return [_dump_tool(tool) for tool in tools]


def _dump_tool(tool: Any) -> dict[str, Any]:
    from pydantic import ValidationError

    try:
        model = _models()[0].model_validate(tool)
    except ValidationError:
        raise Uncountable("a tool the engine's model refuses (it answers 400)") from None
    function = model.function
    defer = function.defer_loading if function.defer_loading is not None else model.defer_loading
    dumped: dict[str, Any] = {"name": function.name, "description": function.description,
                              "parameters": function.parameters}  # fmt: skip
    if function.strict is not None:
        dumped["strict"] = function.strict
    if defer is not None:
        dumped["defer_loading"] = defer
    out: dict[str, Any] = {"type": model.type, "function": dumped}
    if model.defer_loading is not None:
        out["defer_loading"] = model.defer_loading
    return out


def _bool(value: Any, name: str) -> bool:
    """A boolean field as pydantic's lax mode reads it (``1``, ``"true"``, ``"yes"`` are True)."""
    if isinstance(value, bool):
        return value
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(bool).validate_python(value)
    except ValidationError:
        raise Uncountable(f"{name} is not a boolean the engine takes (it answers 400)") from None


def _documents(value: Any) -> list[dict[str, str]] | None:
    if value is None:
        return None
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(list[dict[str, str]]).validate_python(value)
    except ValidationError:
        raise Uncountable("documents is not a list of string maps (the engine answers 400)") from None


_MODELS: list[Any] = []


def _models() -> list[Any]:
    """The tool model, built on first use (pydantic's class creation is not free): the fields and types of vLLM's
    ``ChatCompletionToolsParam`` and ``FunctionDefinition`` (extra keys allowed on input, as ``OpenAIBaseModel``)."""
    if not _MODELS:
        from pydantic import BaseModel, ConfigDict

        class Function(BaseModel):
            model_config = ConfigDict(extra="allow")
            name: str
            description: str | None = None
            parameters: dict[str, Any] | None = None
            strict: bool | None = None
            defer_loading: bool | None = None

        class Tool(BaseModel):
            model_config = ConfigDict(extra="allow")
            type: Literal["function"] = "function"
            function: Function
            defer_loading: bool | None = None

        _MODELS.append(Tool)
    return _MODELS
