"""servelab coexist: does a long prefill make the streaming voice stutter?

The realtime probes (a voice, and an avatar or a second voice beside it) run under each condition in turn (alone,
with the avatar, beside LLM decode, beside long LLM prefills, all of it), the conditions rotated over repeats so
drift does not favour one; the LLM load is the scenario runner of servelab.load, also run with no probe so each
condition says what share of its throughput the LLM kept. Mitigations (a gateway holding its realtime lease, an
engine with smaller batches) are the same conditions with the LLM load sent elsewhere; every condition is judged
against the goals. Every result records the GPU sharing mode, since it changes the answer many times over."""

from servelab.coexist.audio_stream import SHAPES, AudioFormat
from servelab.coexist.baselines import rebase
from servelab.coexist.conditions import CONDITIONS, SEED_LAYERS, Condition, parse_condition, with_baselines
from servelab.coexist.duration import duration_text
from servelab.coexist.goals import Goals, judge, kept_text, parse_goals
from servelab.coexist.gpu_share import condition_gpu, gpu_summary
from servelab.coexist.load import LlmLoad
from servelab.coexist.mitigations import Lease, LeaseHolder, Mitigation, mitigated, mitigation_lines
from servelab.coexist.probes import HttpAudioProbe, Probe, WorkerProbe, WorkerSpec
from servelab.coexist.run import (
    CoexistOptions,
    CoexistResult,
    expected,
    parse_sharing,
    probe_names,
    run_coexist,
    stored_result,
)
from servelab.coexist.summary import condition_figure

__all__ = [
    "CONDITIONS",
    "SEED_LAYERS",
    "SHAPES",
    "AudioFormat",
    "CoexistOptions",
    "CoexistResult",
    "Condition",
    "Goals",
    "HttpAudioProbe",
    "Lease",
    "LeaseHolder",
    "LlmLoad",
    "Mitigation",
    "Probe",
    "WorkerProbe",
    "WorkerSpec",
    "condition_figure",
    "condition_gpu",
    "duration_text",
    "expected",
    "gpu_summary",
    "judge",
    "kept_text",
    "mitigated",
    "mitigation_lines",
    "parse_condition",
    "parse_goals",
    "parse_sharing",
    "probe_names",
    "rebase",
    "run_coexist",
    "stored_result",
    "with_baselines",
]
