"""Session workloads: N sessions whose every turn sends the whole history (the replies the model streamed
included) plus new content, compacted at a limit; presets from the seeds, or the user's own spec."""

from servelab.load.sessions.conversation import Conversation, Prompt
from servelab.load.sessions.figures import hit_share, session_figures, step_labels
from servelab.load.sessions.fit import fit_spec, needed, prompt_limit
from servelab.load.sessions.run import SessionRun, run_sessions
from servelab.load.sessions.scenario import of_spec, parse_think, session_scenario, with_session_options
from servelab.load.sessions.script import SessionScript, TurnScript, session_script
from servelab.load.sessions.spec import PRESETS, SessionSpec, Span, Think, preset, preset_names, read_spec, spec_from
from servelab.load.sessions.trace import Trace, TraceRequest, TraceRun, overlap_blocks, read_trace, trace_scenario

__all__ = [
    "PRESETS",
    "Conversation",
    "Prompt",
    "SessionRun",
    "SessionScript",
    "SessionSpec",
    "Span",
    "Think",
    "Trace",
    "TraceRequest",
    "TraceRun",
    "TurnScript",
    "fit_spec",
    "hit_share",
    "needed",
    "of_spec",
    "overlap_blocks",
    "parse_think",
    "preset",
    "preset_names",
    "prompt_limit",
    "read_spec",
    "read_trace",
    "run_sessions",
    "session_figures",
    "session_scenario",
    "session_script",
    "spec_from",
    "step_labels",
    "trace_scenario",
    "with_session_options",
]
