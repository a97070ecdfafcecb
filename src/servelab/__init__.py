"""servelab: plan, benchmark, evaluate and protect self-hosted LLM serving."""

from servelab._version import __version__
from servelab.core.errors import EngineError, ServelabError, StoreError, UsageError
from servelab.core.records import ErrorClass, RequestRecord
from servelab.core.store import RunStore
from servelab.core.summary import Summary, summarize
from servelab.engines.client import ClientOptions, StreamClient
from servelab.engines.embedded import EmbeddedEngine, EngineSettings

__all__ = [
    "ClientOptions",
    "EmbeddedEngine",
    "EngineError",
    "EngineSettings",
    "ErrorClass",
    "RequestRecord",
    "RunStore",
    "ServelabError",
    "StoreError",
    "StreamClient",
    "Summary",
    "UsageError",
    "__version__",
    "summarize",
]
