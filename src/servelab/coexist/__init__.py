"""servelab coexist: does a long prefill make the streaming voice stutter?

The same realtime probe runs under each condition in turn (alone, beside LLM decode, beside long LLM prefills,
beside both), the conditions interleaved over repeats so drift does not favour one; the LLM load is the
scenario runner of servelab.load. Every result records the GPU sharing mode, since it changes the answer many
times over."""

from servelab.coexist.audio_stream import SHAPES, AudioFormat
from servelab.coexist.conditions import CONDITIONS, SEED_LAYERS, Condition, parse_condition, with_baselines
from servelab.coexist.goals import Goals, judge, parse_goals
from servelab.coexist.load import LlmLoad
from servelab.coexist.mitigations import Lease, LeaseHolder, Mitigation, mitigated, mitigation_lines
from servelab.coexist.probes import HttpAudioProbe, Probe, WorkerProbe, WorkerSpec
from servelab.coexist.run import CoexistOptions, CoexistResult, parse_sharing, probe_names, run_coexist, stored_result

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
    "judge",
    "mitigated",
    "mitigation_lines",
    "parse_condition",
    "parse_goals",
    "parse_sharing",
    "probe_names",
    "run_coexist",
    "stored_result",
    "with_baselines",
]
