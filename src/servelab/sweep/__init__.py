"""servelab sweep: engine configurations started, measured and set beside the plan."""

from servelab.sweep.beside import Where, plan_point
from servelab.sweep.failures import classify
from servelab.sweep.grid import Axis, Grid, Point, make_grid, parse_axis, parse_point
from servelab.sweep.launch import ENGINES, Launch, launch_for
from servelab.sweep.measure import Workload
from servelab.sweep.pareto import Candidate, best_under, candidates, pareto_front
from servelab.sweep.run import SweepOptions, run_sweep, stored_options
from servelab.sweep.sessions import SessionsHeld, sessions_held
from servelab.sweep.spec import SweepSpec, read_spec

__all__ = [
    "ENGINES",
    "Axis",
    "Candidate",
    "Grid",
    "Launch",
    "Point",
    "SessionsHeld",
    "SweepOptions",
    "SweepSpec",
    "Where",
    "Workload",
    "best_under",
    "candidates",
    "classify",
    "launch_for",
    "make_grid",
    "pareto_front",
    "parse_axis",
    "parse_point",
    "plan_point",
    "read_spec",
    "run_sweep",
    "sessions_held",
    "stored_options",
]
