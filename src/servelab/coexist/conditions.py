"""What runs in a coexist condition: which probes (the first one, the voice, always; the others, an avatar or a
second voice, with ``avatar``), and which LLM load (``decode``, ``prefill``).

Names: ``alone``, ``avatar``, ``decode``, ``prefill``, ``both`` (decode + prefill), ``all`` (every probe and both
loads), or parts joined with ``+`` (``avatar+prefill``). ``llm:PARTS`` is the LLM load with no probe at all: the
baseline an LLM figure is compared with, added by itself for every load a condition runs. The seed's layers are
``alone, avatar, decode, prefill, all``. ``NAME/condition`` is the condition with its LLM load sent to the
mitigation NAME (coexist/mitigations.py)."""

from __future__ import annotations

from dataclasses import dataclass

from servelab.core.errors import UsageError

CONDITIONS = ("alone", "decode", "prefill", "both")
SEED_LAYERS = ("alone", "avatar", "decode", "prefill", "all")
_ALIASES = {"alone": "", "both": "decode+prefill", "all": "avatar+decode+prefill"}
_PARTS = ("avatar", "decode", "prefill")
LLM_ONLY = "llm:"


@dataclass(frozen=True, slots=True)
class Condition:
    name: str
    companions: bool  # the probes after the first run too
    decode: bool
    prefill: bool
    probes: bool = True  # False: the LLM load alone (a baseline)
    mitigation: str | None = None  # the LLM load goes to this mitigation's target

    @property
    def llm(self) -> bool:
        return self.decode or self.prefill

    @property
    def baseline(self) -> str | None:
        """The LLM-only condition with this one's load, for a condition with probes and LLM load."""
        if not self.probes or not self.llm:
            return None
        return LLM_ONLY + "+".join(p for p, on in (("decode", self.decode), ("prefill", self.prefill)) if on)


def parse_condition(name: str) -> Condition:
    mitigation, _, text = name.strip().rpartition("/")
    if mitigation and (text.startswith(LLM_ONLY) or not text or text in ("alone", "avatar")):
        raise UsageError(f"condition {name!r}: a mitigation applies to a condition with LLM load")
    probes = not text.startswith(LLM_ONLY)
    body = _ALIASES.get(text.removeprefix(LLM_ONLY), text.removeprefix(LLM_ONLY))
    parts = [p for p in body.split("+") if p]
    unknown = [p for p in parts if p not in _PARTS]
    if unknown or (not probes and ("avatar" in parts or not parts)):
        raise UsageError(
            f"unknown condition {name!r}",
            hint="alone, avatar, decode, prefill, both, all, parts joined with + (avatar+prefill), or llm:decode, "
            "llm:prefill, llm:decode+prefill (the LLM load with no probe)",
        )
    return Condition(name.strip(), "avatar" in parts, "decode" in parts, "prefill" in parts, probes, mitigation or None)


def with_baselines(names: tuple[str, ...]) -> tuple[str, ...]:
    """The conditions, then the LLM-only baselines the ones with LLM load are compared with (once each)."""
    wanted = [b for n in names if (b := parse_condition(n).baseline) is not None]
    return names + tuple(b for b in dict.fromkeys(wanted) if b not in names)
