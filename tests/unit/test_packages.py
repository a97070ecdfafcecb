"""Every package's ``__init__.py`` only re-exports (a docstring, imports and ``__all__``: the logic lives in named
modules), and its public names are pinned here, so changing a package's API is a deliberate edit of this list."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import servelab

PUBLIC: dict[str, list[str]] = {
    "servelab.bench": ["BenchResult", "Bottleneck", "DEFAULT_REQUESTS", "HOLD_WAVES", "Load", "Row", "RunComparison",
                       "SLO", "Scenario", "Step", "Target", "at_levels", "at_rates", "bottleneck", "check_turns",
                       "compare_runs", "expand", "no_verdict", "parse_slo", "resolve_targets", "rows_to_dicts",
                       "run_bench", "scenario_names", "search_slo", "side_by_side", "sized", "slo_requests",
                       "trace_scenario", "with_session_options"],
    "servelab.check": ["CheckOptions", "CheckOutcome", "STEPS", "StepResult", "default_report_path", "failure_notes",
                       "report_runs", "run_check", "this_gpu", "validate"],
    "servelab.cli": ["app", "main"],
    "servelab.coexist": ["AudioFormat", "CONDITIONS", "CoexistOptions", "CoexistResult", "Condition", "Goals",
                         "HttpAudioProbe", "Lease", "LeaseHolder", "LlmLoad", "Mitigation", "Probe", "SEED_LAYERS",
                         "SHAPES", "WorkerProbe", "WorkerSpec", "condition_figure", "condition_gpu", "duration_text",
                         "expected", "gpu_summary",
                         "judge", "kept_text", "mitigated", "mitigation_lines",
                         "parse_condition", "parse_goals", "parse_sharing", "probe_names", "rebase", "run_coexist",
                         "stored_result", "with_baselines"],
    "servelab.core": [],
    "servelab.core.results": ["Accuracy", "AnyResult", "BenchRun", "Bottleneck", "Cell", "Channel", "CheckRun",
                              "CheckStep", "ClientLoad", "CoexistRun", "ConditionFigures", "EngineMetrics", "EvalRun",
                              "Facts", "Goodput", "Limit", "ListenerFigures", "LlmFigures", "Paired", "PairedTest",
                              "PlanFigures", "PlanRun", "Relieved", "Repeats", "Replay", "Reply", "RepoRun",
                              "RepoTarget", "Resolved", "Row", "RunResult", "Scalar", "SessionFigures",
                              "SessionOutcome", "SloSearch", "Status", "Step", "SweepRun", "TargetEval", "TurnFigures",
                              "VERSIONS", "load_result", "save_result"],
    "servelab.engines": [],
    "servelab.eval": ["AgentLimits", "EvalOptions", "EvalResult", "Item", "RepoResult", "builtin_suites",
                      "builtin_tasks", "load_items", "load_task", "regrade", "run_eval", "run_repo", "sandbox_kind"],
    "servelab.eval.repair": ["AgentLimits", "Attempt", "Harvest", "HarvestRules", "Policy", "RepoGrade", "RepoResult",
                             "TOOLS", "Task", "Trajectory", "Workspace", "agent_folder", "builtin_tasks",
                             "chat_policy", "grade_workdir", "harvest", "load_task", "remove_tree", "run_agent",
                             "run_repo", "self_check", "summarize_repo", "tasks_root"],
    "servelab.eval.suites": [],
    "servelab.gateway": ["Gateway", "GatewayConfig", "Router", "default_workers", "load_config", "run", "running",
                         "serve"],
    "servelab.gateway.admission": ["CHAT", "COMPLETIONS", "ChatTemplate", "Count", "TemplateError", "TemplateSet",
                                   "TokenCounter", "Uncountable"],
    "servelab.gateway.store": ["ADMIN_LEASE", "FLAGS", "LEASE_ID", "FlagView", "HostStore", "LeaseView", "Limits",
                               "MemoryStore", "RedisStore", "Settings", "Snapshot", "Store", "StoreState",
                               "StoreUnavailable", "TooManyLeases", "host_store_path", "make_store",
                               "reset_host_store", "settings"],
    "servelab.load": ["Arrivals", "ClientMonitor", "ClosedLoop", "ColdThenWarm", "Load", "OpenLoop", "Scenario",
                      "ScenarioResult", "ScenarioRun", "Share", "Sink", "Target", "TargetSpec", "arrivals_for",
                      "default_workers", "described", "expand", "filler_text", "fit_filler", "load_scenario",
                      "parse_target", "payload", "read_prompts", "resolve", "resolve_all", "run_in_workers",
                      "scenario_names", "target_specs", "token_counter"],
    "servelab.load.cluster": ["ClockMap", "Exchange", "RayUnavailable", "actor_count", "best", "connect",
                              "disconnect", "mapped", "require_ray", "run_on_ray", "unaligned"],
    "servelab.load.sessions": ["Conversation", "PRESETS", "Prompt", "SessionRun", "SessionScript", "SessionSpec",
                               "Span", "Think", "Trace", "TraceRequest", "TraceRun", "TurnScript", "fit_spec",
                               "hit_share", "needed", "of_spec", "overlap_blocks", "parse_think", "preset",
                               "preset_names", "prompt_limit", "read_spec", "read_trace", "run_sessions",
                               "session_figures", "session_scenario", "session_script", "spec_from", "step_labels",
                               "trace_scenario", "with_session_options"],
    "servelab.plan": ["CacheLayer", "Comparison", "DEFAULT_CONTEXT", "ENGINE_FLAGS", "EngineArgs", "Fit", "GIB", "GPUS",
                      "ModelSpec", "Plan", "PlanRequest", "QUANTS", "Resolved", "SpeedPrediction",
                      "UnknownArchitecture", "VllmOptions", "check_engine", "check_same_model", "check_side_options",
                      "compare_with", "engine_request", "fit_from_runs", "gpu", "gpus", "make_plan", "parse_alongside",
                      "parse_engine_args", "parse_size", "parse_tokens", "plan_model", "preset_names", "presets",
                      "read_reported", "resolve_model", "spec_from_config", "vllm_flag", "vllm_layout",
                      "with_engine_args"],
    "servelab.report": ["Report", "build_report", "build_sections", "compare_table", "plot_intervals", "print_section",
                        "print_summary", "report_runs", "report_text", "rich_table", "section", "section_tables",
                        "summary_table", "write_report"],
    "servelab.sweep": ["ENGINES", "Axis", "Candidate", "Grid", "Launch", "Point", "SessionsHeld", "SweepOptions",
                       "SweepSpec", "Where", "Workload", "best_under", "candidates", "classify", "launch_for",
                       "make_grid", "pareto_front", "parse_axis", "parse_point", "plan_point", "read_spec", "run_sweep",
                       "sessions_held", "stored_options"],
    "servelab.testing": ["CacheSim", "FakeServer", "MODES", "Scripted", "ScriptedStream", "SimEngine", "SinkShape",
                         "free_port", "loop_in_thread", "serve", "serve_cache_sim", "serve_sim", "sse_chat"],
}  # fmt: skip

PACKAGES = sorted(m.name for m in pkgutil.walk_packages(servelab.__path__, "servelab.") if m.ispkg)


def test_every_package_is_pinned() -> None:
    assert sorted(PUBLIC) == PACKAGES


@pytest.mark.parametrize("name", PACKAGES)
def test_the_public_names_are_pinned_and_resolve(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(getattr(module, "__all__", []))
    assert sorted(exported) == sorted(PUBLIC[name]) and len(set(exported)) == len(exported)
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not have: {missing}"


@pytest.mark.parametrize("name", PACKAGES)
def test_an_init_only_reexports(name: str) -> None:
    path = Path(importlib.import_module(name).__file__ or "")
    tree = ast.parse(path.read_text())
    for index, node in enumerate(tree.body):
        docstring = index == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        reexport = isinstance(node, ast.ImportFrom | ast.Import)
        listing = isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["__all__"]
        assert docstring or reexport or listing, f"{path}:{node.lineno}: logic in an __init__.py"
