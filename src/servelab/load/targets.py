"""Which servers a command talks to, with which model and which key: ``--target NAME=URL`` (or ``OPENAI_BASE_URL``
when none is given), ``--model`` and ``--api-key`` for every target or ``NAME=VALUE`` for one (``OPENAI_API_KEY``
where no key is given), resolved against each server's own /v1/models: the model checked (or the first served),
its context limit read."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servelab.core.errors import ServelabError, UsageError
from servelab.core.urls import check_url
from servelab.engines.control import EngineAPI, Served
from servelab.load.runner import Target

ENV_URL, ENV_KEY = "OPENAI_BASE_URL", "OPENAI_API_KEY"
ENV_TARGET = "openai"  # the name of the target OPENAI_BASE_URL gives


@dataclass(frozen=True, slots=True)
class TargetSpec:
    name: str
    url: str
    model: str | None = None  # None: the first model the server lists
    api_key: str | None = None


def parse_target(spec: str) -> tuple[str, str]:
    """``NAME=URL`` → (name, url), with a clear message for anything else."""
    name, sep, url = spec.partition("=")
    if not sep or not name:
        given = "a URL without a name" if "://" in spec else repr(spec)
        raise UsageError(f"--target wants NAME=URL (like local=http://127.0.0.1:8000), got {given}",
                         hint=f"like mine={spec}" if "://" in spec and not sep else None)  # fmt: skip
    return name, check_url(url, f"--target {name}")


def target_specs(
    targets: Sequence[str],
    models: Sequence[str] = (),
    api_keys: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> list[TargetSpec]:
    """The targets with their models and keys. A value ``NAME=VALUE`` whose NAME is a target's goes to that target;
    any other value to every target without one of its own."""
    env = os.environ if env is None else env
    pairs = [parse_target(t) for t in targets]
    if not pairs and env.get(ENV_URL):
        pairs = [(ENV_TARGET, env[ENV_URL])]
        check_url(pairs[0][1], ENV_URL)
    names = [n for n, _ in pairs]
    if len(set(names)) < len(names):
        raise UsageError(f"two targets share a name: {', '.join(sorted({n for n in names if names.count(n) > 1}))}")
    model_for = _per_target("--model", models, names)
    key_for = _per_target("--api-key", api_keys, names)
    default_key = key_for.get(None) or env.get(ENV_KEY) or None
    return [
        TargetSpec(name, url, model_for.get(name, model_for.get(None)), key_for.get(name, default_key))
        for name, url in pairs
    ]


def _per_target(flag: str, values: Sequence[str], names: Sequence[str]) -> dict[str | None, str]:
    out: dict[str | None, str] = {}
    for value in values:
        head, sep, tail = value.partition("=")
        where: str | None = head if sep and head in names else None
        got = tail if where is not None else value
        if not got:
            raise UsageError(f"{flag} {value!r} gives nothing")
        if where in out:
            raise UsageError(
                f"{flag} given twice for {where or 'every target'}", hint=f"{flag} NAME=VALUE gives one target its own"
            )
        out[where] = got
    return out


def resolve(spec: TargetSpec, timeout: float = 10.0) -> Target:
    """The target as its server describes it: the model checked against what it serves (or its first), the
    context limit it states; a clear error for a server that is down, refuses the key or lacks the model."""
    api = EngineAPI(spec.url, api_key=spec.api_key, timeout=timeout)
    served = api.served()
    chosen = served[0] if spec.model is None else _the(served, spec)
    limit = chosen.max_model_len or api.slot_context()  # vLLM states it per model; llama.cpp per slot in /props
    return Target(spec.name, spec.url, chosen.id, spec.api_key, limit)


def _the(served: list[Served], spec: TargetSpec) -> Served:
    found = next((m for m in served if m.id == spec.model), None)
    if found is None:
        listed = ", ".join(m.id for m in served[:10])
        raise ServelabError(f"{spec.name} ({spec.url}) does not serve {spec.model!r}", hint=f"it serves: {listed}")
    return found


def resolve_all(specs: Sequence[TargetSpec]) -> list[Target]:
    return [resolve(s) for s in specs]


def described(target: Target) -> str:
    """``local: SmolLM2-135M at http://... (context 8,192 tokens)``, what a command prints before it starts."""
    limit = f" (context {target.max_model_len:,} tokens)" if target.max_model_len else ""
    keyed = ", with an API key" if target.api_key else ""
    return f"{target.name}: {target.model} at {target.url}{limit}{keyed}"
