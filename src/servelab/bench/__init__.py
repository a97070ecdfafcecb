"""servelab bench: speed on the workloads that matter, honestly measured, side by side."""

from servelab.bench.compare import rows_to_dicts, side_by_side
from servelab.bench.run import BenchResult, at_levels, at_rates, resolve_targets, run_bench, search_slo
from servelab.bench.runs import RunComparison, compare_runs
from servelab.bench.sizing import DEFAULT_REQUESTS, HOLD_WAVES, no_verdict, sized, slo_requests
from servelab.bench.slo import SLO, check_turns, parse_slo
from servelab.bench.verdict import bottleneck
from servelab.core.results import Bottleneck, Row, Step
from servelab.load.runner import Load, Target
from servelab.load.scenarios import Scenario, expand, scenario_names
from servelab.load.sessions import trace_scenario, with_session_options

__all__ = [
    "DEFAULT_REQUESTS",
    "HOLD_WAVES",
    "SLO",
    "BenchResult",
    "Bottleneck",
    "Load",
    "Row",
    "RunComparison",
    "Scenario",
    "Step",
    "Target",
    "at_levels",
    "at_rates",
    "bottleneck",
    "check_turns",
    "compare_runs",
    "expand",
    "no_verdict",
    "parse_slo",
    "resolve_targets",
    "rows_to_dicts",
    "run_bench",
    "scenario_names",
    "search_slo",
    "side_by_side",
    "sized",
    "slo_requests",
    "trace_scenario",
    "with_session_options",
]
