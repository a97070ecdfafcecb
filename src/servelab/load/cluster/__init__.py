"""A step's load from several hosts, as Ray actors (``--ray``): placed by a placement group that spreads them, each
running the one-host worker loop, their records mapped onto the coordinator's clock. Ray is imported only when a run
asks for it (``pip install 'servelab[ray]'``)."""

from servelab.load.cluster.clock import ClockMap, Exchange, best, mapped, unaligned
from servelab.load.cluster.connect import RayUnavailable, connect, disconnect, require_ray
from servelab.load.cluster.coordinator import actor_count, run_on_ray

__all__ = ["ClockMap", "Exchange", "RayUnavailable", "actor_count", "best", "connect", "disconnect", "mapped",
           "require_ray", "run_on_ray", "unaligned"]  # fmt: skip
