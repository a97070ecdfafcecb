"""servelab check: plan, bench, eval and coexist on one target, then one report."""

from servelab.check.full import (
    STEPS,
    CheckOptions,
    CheckOutcome,
    StepResult,
    default_report_path,
    failure_notes,
    report_runs,
    run_check,
    this_gpu,
    validate,
)

__all__ = [
    "STEPS",
    "CheckOptions",
    "CheckOutcome",
    "StepResult",
    "default_report_path",
    "failure_notes",
    "report_runs",
    "run_check",
    "this_gpu",
    "validate",
]
