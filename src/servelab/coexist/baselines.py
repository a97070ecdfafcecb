"""What a condition is compared with: each probe alone, and each LLM load with no probe (``llm:...``). Within a
run they come from the run itself. A mitigation that is a server of its own (smaller batches, an MPS cap) is a run
of its own, and its own baselines already carry the mitigation's cost (a 32K prefill in 1,024-token steps is slow
with no voice beside it too): ``rebase`` judges such a run against a reference run's baselines instead (the plain
server's), so a mitigation that saves the voice by starving the LLM, or slows the voice even alone, shows it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from servelab.coexist.conditions import LLM_ONLY, parse_condition
from servelab.coexist.goals import Goals, judge
from servelab.core.figures import ratio_interval
from servelab.core.results import ConditionFigures, LlmFigures

if TYPE_CHECKING:
    from servelab.coexist.run import CoexistResult


def llm_baselines(figs: Sequence[ConditionFigures]) -> dict[str, LlmFigures]:
    """The LLM-only conditions' figures, by condition name."""
    return {f.condition: f.llm for f in figs if not f.probe and f.llm is not None and f.condition.startswith(LLM_ONLY)}


def probes_alone(figs: Sequence[ConditionFigures]) -> dict[str, ConditionFigures]:
    return {f.probe: f for f in figs if f.condition == "alone"}  # one probe alone: its name may be ""


def set_shares(figs: Sequence[ConditionFigures], baselines: Mapping[str, LlmFigures]) -> None:
    """Each condition's LLM figures against its load's baseline: the share of the output token rate and of the
    prompt token rate it kept, and the lower of the two as the share (a prefill load's few output tokens hide what
    it lost; a decode load's prompts are small), with the baseline's median TTFT beside it."""
    for f in figs:
        base = parse_condition(f.condition).baseline
        ref = baselines.get(base) if base else None
        if f.llm is None:
            continue
        if ref is None:  # no baseline for this load (here, or in the reference run): no share, not a stale one
            f.llm.output_share = f.llm.prompt_share = f.llm.tok_s_share = f.llm.ttft_p50_alone_ms = None
            continue
        f.llm.output_share = _ratio(f.llm.streamed_tok_s, ref.streamed_tok_s)
        f.llm.prompt_share = _ratio(f.llm.prompt_tok_s, ref.prompt_tok_s)
        shares = [s for s in (f.llm.output_share, f.llm.prompt_share) if s is not None]
        f.llm.tok_s_share = min(shares) if shares else None
        f.llm.tok_s_share_low = f.llm.tok_s_share_high = None
        if f.llm.tok_s_share is not None:
            _interval(f.llm, ref, f.llm.tok_s_share == f.llm.output_share)
        f.llm.ttft_p50_alone_ms = ref.ttft_ms.get("p50")


def _interval(llm: LlmFigures, ref: LlmFigures, output: bool) -> None:
    """The kept share's 95% interval, from the rounds' rates beside the probe and alone (the two bootstrapped
    apart), for the rate the share is of; none from fewer than two rounds on either side."""
    mine, alone = (llm.rounds_tok_s, ref.rounds_tok_s) if output else (llm.rounds_prompt_tok_s, ref.rounds_prompt_tok_s)
    found = ratio_interval(mine, alone)
    if found is not None:
        llm.tok_s_share_low, llm.tok_s_share_high = found.low, found.high


def _ratio(value: float | None, ref: float | None) -> float | None:
    return (value or 0.0) / ref if ref else None


def rebase(result: CoexistResult, reference: CoexistResult, goals: Goals | None = None) -> CoexistResult:
    """``result`` judged against ``reference``'s baselines: each probe's "alone" and each LLM load's ``llm:``
    figures from the reference run (its own stay in the table, judged too). Say which run in ``reference``."""
    figs = [f.model_copy(deep=True) for f in result.conditions]
    ref = reference.conditions
    set_shares(figs, llm_baselines(ref))
    wanted = goals or (Goals(**result.goals) if result.goals else Goals())
    judge(figs, wanted, alone=probes_alone(ref))
    return replace(result, conditions=figs, goals=wanted.as_dict(), reference=reference.run_id)
