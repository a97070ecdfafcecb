"""servelab gateway: an OpenAI-compatible proxy that keeps a realtime stack safe (long prefills external while
voice streams), on its own HTTP/1.1 server and upstream client, one or N worker processes."""

from servelab.gateway.app import Gateway
from servelab.gateway.config import GatewayConfig, load_config
from servelab.gateway.endpoints import Router
from servelab.gateway.run import default_workers, run, running, serve

__all__ = ["Gateway", "GatewayConfig", "Router", "default_workers", "load_config", "run", "running", "serve"]
