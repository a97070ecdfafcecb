"""servelab plan: will this model fit this GPU, at this context and concurrency, next to other services?"""

from servelab.plan.budget import Plan, PlanRequest, check_engine, compare_with, make_plan
from servelab.plan.calibrate import Comparison, read_reported
from servelab.plan.config import spec_from_config
from servelab.plan.engine_args import ENGINES as ENGINE_FLAGS
from servelab.plan.engine_args import EngineArgs, parse_engine_args
from servelab.plan.fit import Fit
from servelab.plan.gpus import GPUS, gpu, parse_alongside, parse_size, parse_tokens
from servelab.plan.listing import gpus, presets
from servelab.plan.measured import fit_from_runs
from servelab.plan.quant import GIB, QUANTS
from servelab.plan.request import check_same_model, check_side_options, engine_request, with_engine_args
from servelab.plan.resolve import Resolved, preset_names, resolve_model
from servelab.plan.spec import CacheLayer, ModelSpec, UnknownArchitecture
from servelab.plan.speed import SpeedPrediction
from servelab.plan.suggest import DEFAULT_CONTEXT, plan_model
from servelab.plan.vllm_rules import VllmOptions, vllm_layout
from servelab.plan.vllm_runtime import vllm_flag

__all__ = [
    "DEFAULT_CONTEXT",
    "ENGINE_FLAGS",
    "GIB",
    "GPUS",
    "QUANTS",
    "CacheLayer",
    "Comparison",
    "EngineArgs",
    "Fit",
    "ModelSpec",
    "Plan",
    "PlanRequest",
    "Resolved",
    "SpeedPrediction",
    "UnknownArchitecture",
    "VllmOptions",
    "check_engine",
    "check_same_model",
    "check_side_options",
    "compare_with",
    "engine_request",
    "fit_from_runs",
    "gpu",
    "gpus",
    "make_plan",
    "parse_alongside",
    "parse_engine_args",
    "parse_size",
    "parse_tokens",
    "plan_model",
    "preset_names",
    "presets",
    "read_reported",
    "resolve_model",
    "spec_from_config",
    "vllm_flag",
    "vllm_layout",
    "with_engine_args",
]
