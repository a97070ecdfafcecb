"""What to send and when, shared by every capability that puts load on an engine: targets, scenarios (prompt and
output lengths, prefixes, prompt files), loads (closed-loop concurrency or an open-loop rate) and the runner that
drives one scenario against one target and hands its records on as they finish."""

from servelab.load.arrivals import Arrivals, ClosedLoop, ColdThenWarm, OpenLoop, arrivals_for
from servelab.load.runner import Load, ScenarioResult, ScenarioRun, Sink, Target, fit_filler, payload, token_counter
from servelab.load.scenarios import Scenario, expand, filler_text, load_scenario, read_prompts, scenario_names
from servelab.load.targets import TargetSpec, described, parse_target, resolve, resolve_all, target_specs

__all__ = [
    "Arrivals",
    "ClosedLoop",
    "ColdThenWarm",
    "Load",
    "OpenLoop",
    "Scenario",
    "ScenarioResult",
    "ScenarioRun",
    "Sink",
    "Target",
    "TargetSpec",
    "arrivals_for",
    "described",
    "expand",
    "filler_text",
    "fit_filler",
    "load_scenario",
    "parse_target",
    "payload",
    "read_prompts",
    "resolve",
    "resolve_all",
    "scenario_names",
    "target_specs",
    "token_counter",
]
