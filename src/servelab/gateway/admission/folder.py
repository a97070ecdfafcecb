"""A Hugging Face model folder read as the engine reads it: the tokenizer, the special-token strings a template is
handed, and every chat template the folder names.

Rule: the count uses the tokenizer the engine builds, or none. vLLM loads ``AutoTokenizer.from_pretrained`` (its
vocabulary is tokenizer.json plus every ``added_tokens_decoder`` entry and every ``*_token`` key of
tokenizer_config.json: each added token splits the text around it). Where ``transformers`` is importable the count
uses that very tokenizer (its Rust backend, for a class that tokenizes only through it: no Python step of its own;
truncation and padding off, as its call leaves them), and the template variables it hands ``apply_chat_template``
(``special_tokens_map``). Without it the count reads tokenizer.json and checks that AutoTokenizer would add nothing
to it (:func:`_check_vocabulary`), and derives the template variables as transformers v5 does
(:func:`special_tokens`); a model's own tokenizer class (whose defaults only transformers knows) is not read that
way. Templates: ``chat_template.jinja`` (``default``) and ``additional_chat_templates/*.jinja`` (by file name);
where neither exists, tokenizer_config.json's ``chat_template`` (one, or a list of named ones); with transformers,
the set must be the one it loads; and a template only a processor reads (processor_config.json, else
chat_template.json). Every one must compile. A folder that fails any of this raises :class:`TemplateError`: the
caller counts with the engine's ``/tokenize`` instead (or refuses to start where the folder was named), never with
another tokenizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from servelab.gateway.admission.template import ChatTemplate, TemplateError, TemplateSet

STANDARD = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
GENERIC = frozenset({"PreTrainedTokenizerFast", "TokenizersBackend"})  # no defaults of a model's own
ENCODING = ("__call__", "_call_one", "encode", "encode_plus", "_encode_plus", "batch_encode_plus",
            "_batch_encode_plus", "tokenize", "prepare_for_model")  # fmt: skip
FLAGS = ("lstrip", "rstrip", "single_word", "normalized", "special")


class Folder(NamedTuple):
    tokenizer: Any  # a tokenizers.Tokenizer, the engine's vocabulary
    templates: TemplateSet | None
    source: str  # "transformers" or "tokenizer.json"


def load(folder: Path, chat_template: str | None = None) -> Folder:
    """The folder's tokenizer and templates, as the engine builds them (see the module's rule); ``chat_template``:
    the engine's ``--chat-template`` (a file, or the template itself), which vLLM renders every request with in
    place of the folder's."""
    if not (folder / "tokenizer.json").is_file():
        raise TemplateError(f"{folder} has no tokenizer.json")
    config = read_json(folder / "tokenizer_config.json")
    sources = template_sources(folder, config)
    engine = _engine_tokenizer(folder)
    if engine is not None:
        tokenizer, special, loaded = engine
        if _named(loaded) != sources:
            raise TemplateError(f"{folder}: its chat templates are not the ones transformers loads")
    else:
        tokenizer, special = _checked_tokenizer(folder, config), special_tokens(folder, config)
    tokenizer.no_truncation()  # transformers' call turns both off unless asked (vLLM's count is not cut short)
    tokenizer.no_padding()
    templates = _compile(folder, sources, special) if chat_template is None else _given(chat_template, special)
    return Folder(tokenizer, templates, "transformers" if engine else "tokenizer.json")


def _given(chat_template: str, special: dict[str, str]) -> TemplateSet:
    """The server's own template, as vLLM's ``load_chat_template`` reads the flag: a file's text, else the string."""
    path = Path(chat_template).expanduser()
    source = path.read_text() if path.is_file() else chat_template
    return TemplateSet({"default": ChatTemplate(source, special)})


def _compile(folder: Path, sources: dict[str, str], special: dict[str, str]) -> TemplateSet | None:
    processor = _processor_template(folder)
    if not sources and processor is None:
        return None
    named = {name: ChatTemplate(source, special) for name, source in sources.items()}
    return TemplateSet(named, ChatTemplate(processor, special) if processor is not None else None)


def _processor_template(folder: Path) -> str | None:
    """A template only a processor reads (vLLM asks the processor first for a request without tools):
    processor_config.json's ``chat_template``, else a legacy chat_template.json's."""
    for name in ("processor_config.json", "chat_template.json"):
        template = read_json(folder / name).get("chat_template")
        if isinstance(template, str):
            return template
        if template is not None:
            raise TemplateError(f"{folder}: {name} holds chat templates of a form not read here")
    return None


def template_sources(folder: Path, config: dict[str, Any]) -> dict[str, str]:
    """Every chat template of the folder by name, as transformers' ``from_pretrained`` reads them."""
    files: dict[str, str] = {}
    if (folder / "chat_template.jinja").is_file():
        files["default"] = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    extra = folder / "additional_chat_templates"
    if extra.is_dir():
        for path in sorted(extra.glob("*.jinja")):
            files[path.name.removesuffix(".jinja")] = path.read_text(encoding="utf-8")
    if files:
        return files
    return _named(config.get("chat_template"))


def _named(template: Any) -> dict[str, str]:
    """transformers' ``tokenizer.chat_template`` (a string, a name-to-template map, or a list of named ones) by name."""
    if isinstance(template, str):
        return {"default": template}
    if isinstance(template, list | tuple):
        template = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
    if isinstance(template, dict):
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in template.items()):
            raise TemplateError("a named chat template is not a string")
        return dict(template)
    return {}


# ---- the engine's tokenizer, through transformers -------------------------------------------------------------
def _engine_tokenizer(folder: Path) -> tuple[Any, dict[str, str], Any] | None:
    """AutoTokenizer's backend, its template variables and its chat templates; None without transformers."""
    try:
        from transformers import AutoTokenizer
        from transformers.tokenization_utils_tokenizers import TokenizersBackend
    except ImportError:
        return None
    try:
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # the engine's own loader refuses it (or needs remote code): not counted here
        raise TemplateError(f"{folder}: transformers cannot load its tokenizer: {type(exc).__name__}") from None
    if not isinstance(tok, TokenizersBackend):
        raise TemplateError(f"{folder}: its tokenizer ({type(tok).__name__}) has no tokenizers backend")
    own = [name for name in ENCODING if getattr(type(tok), name, None) is not getattr(TokenizersBackend, name, None)]
    if own:
        raise TemplateError(f"{folder}: {type(tok).__name__} tokenizes with a step of its own ({own[0]})")
    special = {str(k): str(v) for k, v in tok.special_tokens_map.items() if isinstance(v, str)}
    return tok.backend_tokenizer, special, tok.chat_template


# ---- without transformers: tokenizer.json, checked --------------------------------------------------------------
def _checked_tokenizer(folder: Path, config: dict[str, Any]) -> Any:
    from tokenizers import Tokenizer

    name = config.get("tokenizer_class")
    if name is not None and name not in GENERIC:
        raise TemplateError(f"{folder}: {name} may add tokens of its own; counting it needs transformers")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    _check_vocabulary(folder, tokenizer, config)
    tokenizer.encode_special_tokens = bool(config.get("split_special_tokens", False))  # as transformers sets it
    return tokenizer


def _check_vocabulary(folder: Path, tokenizer: Any, config: dict[str, Any]) -> None:
    """:class:`TemplateError` where AutoTokenizer would add a token to tokenizer.json's: an ``added_tokens_decoder``
    entry tokenizer.json lacks (same id, text and flags), or a special token's text it does not hold as an added
    token matched as written (``normalized`` false)."""
    present = {t.content: (i, t) for i, t in tokenizer.get_added_tokens_decoder().items()}
    for index, entry in (config.get("added_tokens_decoder") or {}).items():
        have = present.get(entry.get("content")) if isinstance(entry, dict) else None
        if have is None or str(have[0]) != str(index) or any(_flag(entry, f) != getattr(have[1], f) for f in FLAGS):
            raise TemplateError(f"{folder}: tokenizer_config.json adds a token tokenizer.json lacks: {entry!r:.80}")
    for text in special_texts(folder, config):
        if text not in present or present[text][1].normalized:
            raise TemplateError(f"{folder}: the special token {text!r:.80} is not one of tokenizer.json's")


def _flag(entry: dict[str, Any], name: str) -> bool:
    return bool(entry.get(name, name == "normalized"))  # AddedToken's defaults: normalized true, others false


def special_texts(folder: Path, config: dict[str, Any]) -> list[str]:
    """Every special token's text the config names (by name, or in the extra/additional lists)."""
    texts = list(special_tokens(folder, config).values())
    for key in ("additional_special_tokens", "extra_special_tokens"):
        value = config.get(key)
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
        texts += [text for item in items if (text := _token_text(item))]
    return texts


def special_tokens(folder: Path, config: dict[str, Any]) -> dict[str, str]:
    """The special-token strings a template is handed, as transformers v5 names them (``from_pretrained`` and
    ``special_tokens_map``): the standard names (a string or an AddedToken object), every other key ending in
    ``_token`` whose value is a string (v5 collects these before it reads AddedToken objects, so an object there is
    not one), and the names of an ``extra_special_tokens`` map. special_tokens_map.json counts too (transformers
    reads it where the config has no ``added_tokens_decoder``); a name two files give different texts is a
    :class:`TemplateError`."""
    named = {k: v for k, v in config.items() if k.endswith("_token") and (k in STANDARD or isinstance(v, str))}
    extra = config.get("extra_special_tokens")
    if isinstance(extra, dict):
        named.update(extra)
    special = {name: text for name, value in named.items() if (text := _token_text(value))}
    mapped = read_json(folder / "special_tokens_map.json")
    for name, value in mapped.items():
        other = _token_text(value) if name.endswith("_token") else None
        if other is not None and special.setdefault(name, other) != other:
            raise TemplateError(f"{folder}: {name} is {special[name]!r} in one file and {other!r} in another")
    return special


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
