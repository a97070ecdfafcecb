"""servelab plan: will this model fit this GPU, at this context and concurrency, next to other services?"""

from servelab.plan.budget import Plan, PlanRequest, make_plan
from servelab.plan.config import UnknownArchitecture, spec_from_config
from servelab.plan.gpus import GPUS, gpu, parse_size
from servelab.plan.resolve import preset_names, resolve_model
from servelab.plan.spec import CacheLayer, ModelSpec
from servelab.plan.vllm_rules import VllmOptions, vllm_layout

__all__ = [
    "GPUS",
    "CacheLayer",
    "ModelSpec",
    "Plan",
    "PlanRequest",
    "UnknownArchitecture",
    "VllmOptions",
    "gpu",
    "make_plan",
    "parse_size",
    "preset_names",
    "resolve_model",
    "spec_from_config",
    "vllm_layout",
]
