"""Unknown keys in a config or spec file are refused, never ignored: a misspelled key would otherwise leave its
setting at the default without a word. Every reader of a TOML or JSON file servelab defines goes through here, so
the error always names the file, the key and the nearest key it knows."""

from __future__ import annotations

import difflib
import json
import tomllib
import typing
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from servelab.core.errors import UsageError

M = TypeVar("M", bound=BaseModel)
NEAR_MISS = 0.85  # 'max_token', 'promt', 'mesages', 'conversation' are misspellings; 'output', 'id' are not
CUTOFF = 0.75  # difflib's similarity for a suggestion: 'prefil_threshold_tokens' finds 'prefill_threshold_tokens'


class StrictModel(BaseModel):
    """A pydantic model that refuses keys it does not declare (read it with :func:`validate`)."""

    model_config = ConfigDict(extra="forbid")


def nearest(key: str, known: Iterable[str], cutoff: float = CUTOFF) -> str | None:
    """The known key closest to ``key`` (case-insensitive), if any is close enough to be a misspelling of it."""
    table = {k.lower(): k for k in known}
    found = difflib.get_close_matches(key.lower(), list(table), n=1, cutoff=cutoff)
    return table[found[0]] if found else None


def meant(name: str, known: Iterable[str]) -> str:
    """``; did you mean 'int4'?`` when a known name is close to ``name``, else nothing (for a sentence's end)."""
    guess = nearest(name, known)
    return f"; did you mean {guess!r}?" if guess is not None else ""


def unknown_key(where: str, key: str, known: Collection[str], section: str = "") -> UsageError:
    """``where: unknown key 'section.key'; did you mean 'section.known'?``, with every known key as the hint."""
    guess = nearest(key, known)
    said = f"{where}: unknown key {_dotted(section, key)!r}"
    if guess is not None:
        said += f"; did you mean {_dotted(section, guess)!r}?"
    scope = f" in {section!r}" if section else ""
    return UsageError(said, hint=f"the keys{scope}: {', '.join(sorted(known)) or '(none)'}")


def _dotted(section: str, key: str) -> str:
    return f"{section}.{key}" if section else key


def refuse_unknown(data: Mapping[str, Any], known: Collection[str], where: str, section: str = "") -> None:
    """Every key of ``data`` is one of ``known``, else a :class:`UsageError` naming the first one that is not."""
    for key in data:
        if key not in known:
            raise unknown_key(where, str(key), known, section)


def refuse_near_misses(data: Mapping[str, Any], known: Collection[str], where: str) -> None:
    """For records that carry their own metadata (a dataset line's ``id``, a trace's ``model``): a key that is not
    known but close to a known one is a misspelling and refused; any other key is the data's own and left alone."""
    miss = near_miss(data, known)
    if miss is not None:
        raise unknown_key(where, miss[0], known)


def near_miss(data: Mapping[str, Any], known: Collection[str]) -> tuple[str, str] | None:
    """The first key of ``data`` that is not known but reads as a misspelling of a known one, with that one. The
    bar is higher than a suggestion's (NEAR_MISS): a data file's own keys ('output', 'source') are not misspellings."""
    for key in data:
        guess = None if key in known else nearest(str(key), known, NEAR_MISS)
        if guess is not None:
            return str(key), guess
    return None


def validate(model: type[M], data: Any, where: str, hint: str | None = None) -> M:
    """``data`` as ``model``; a key the model does not declare is refused with the nearest one it does (checked
    before any other error, since a misspelled key is the likely cause of the rest), else the first error."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise as_usage_error(exc, model, where, hint) from None


def as_usage_error(exc: ValidationError, model: type[BaseModel], where: str, hint: str | None = None) -> UsageError:
    """A pydantic error as one sentence naming the file and the key."""
    errors = exc.errors()
    extra = [e for e in errors if e["type"] == "extra_forbidden"]
    if extra:
        loc = extra[0]["loc"]
        at = model_at(model, loc[:-1])
        known = list(at.model_fields) if at is not None else []
        section = ".".join(str(p) for p in loc[:-1])
        return unknown_key(where, str(loc[-1]), known, section)
    first = errors[0]
    key = ".".join(str(p) for p in first["loc"])
    return UsageError(f"{where}: {key}: {first['msg']}" if key else f"{where}: {first['msg']}", hint=hint)


def model_at(model: type[BaseModel], loc: Iterable[int | str]) -> type[BaseModel] | None:
    """The model a location inside ``model`` points into (list indices and dict keys passed over)."""
    current = model
    for part in loc:
        field = current.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            continue  # a list index or a dict key: the same model holds below it
        inner = _model_in(field.annotation)
        if inner is None:
            return None
        current = inner
    return current


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def read_table(path: Path) -> dict[str, Any]:
    """A settings file's top table: TOML, or JSON by its ``.json`` suffix; a file that cannot be read or parsed is
    a :class:`UsageError` naming it (every reader of a spec or config file starts here, then :func:`validate`)."""
    kind = "JSON" if path.suffix == ".json" else "TOML"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a text file ({kind} is UTF-8 text)") from None
    try:
        data = json.loads(text) if kind == "JSON" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path} is not valid {kind}: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: the file holds a {type(data).__name__}, not a table of settings")
    return data
