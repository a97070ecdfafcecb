"""What to send and when, shared by every capability that puts load on an engine: targets, scenarios (prompt and
output lengths, prefixes, prompt files), loads (closed-loop concurrency or an open-loop rate) and the runner that
drives one scenario against one target and hands its records on as they finish."""

from servelab.load.arrivals import Arrivals, ClosedLoop, ColdThenWarm, OpenLoop, arrivals_for
from servelab.load.monitor import ClientMonitor
from servelab.load.runner import (
    Load,
    ScenarioResult,
    ScenarioRun,
    Share,
    Sink,
    Target,
    fit_filler,
    payload,
    token_counter,
)
from servelab.load.scenarios import Scenario, expand, filler_text, load_scenario, read_prompts, scenario_names
from servelab.load.targets import TargetSpec, described, parse_target, resolve, resolve_all, target_specs
from servelab.load.workers import default_workers, run_in_workers

__all__ = [
    "Arrivals",
    "ClientMonitor",
    "ClosedLoop",
    "ColdThenWarm",
    "Load",
    "OpenLoop",
    "Scenario",
    "ScenarioResult",
    "ScenarioRun",
    "Share",
    "Sink",
    "Target",
    "TargetSpec",
    "arrivals_for",
    "default_workers",
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
    "run_in_workers",
    "scenario_names",
    "target_specs",
    "token_counter",
]
