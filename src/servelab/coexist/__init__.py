"""servelab coexist: does a long prefill make the streaming voice stutter?

The same realtime probe runs under each condition in turn (alone, beside LLM decode, beside long LLM prefills,
beside both), the conditions interleaved over repeats so drift does not favour one; the LLM load is the
scenario runner of servelab.load. Every result records the GPU sharing mode, since it changes the answer many
times over."""

from servelab.coexist.audio_stream import SHAPES, AudioFormat
from servelab.coexist.load import CONDITIONS, LlmLoad
from servelab.coexist.probes import HttpAudioProbe, Probe, WorkerProbe, WorkerSpec
from servelab.coexist.run import CoexistOptions, CoexistResult, parse_sharing, run_coexist, stored_result

__all__ = [
    "CONDITIONS",
    "SHAPES",
    "AudioFormat",
    "CoexistOptions",
    "CoexistResult",
    "HttpAudioProbe",
    "LlmLoad",
    "Probe",
    "WorkerProbe",
    "WorkerSpec",
    "parse_sharing",
    "run_coexist",
    "stored_result",
]
