"""Helpers for servelab's own tests and benchmarks (and for anyone testing against servelab): loopback ports,
servers on threads of their own, a fake OpenAI-style SSE server (faults, known timings, a sink), a prefix-cache
truth fixture and a scripted in-process transport for the streaming client. Nothing in servelab's library imports
this package."""

from servelab.testing.cache_sim import CacheSim, serve_cache_sim
from servelab.testing.engine_sim import SimEngine, serve_sim
from servelab.testing.net import free_port, loop_in_thread
from servelab.testing.scripted import Scripted, ScriptedStream, sse_chat
from servelab.testing.sse_server import MODES, FakeServer, SinkShape, serve

__all__ = ["MODES", "CacheSim", "FakeServer", "Scripted", "ScriptedStream", "SimEngine", "SinkShape", "free_port",
           "loop_in_thread", "serve", "serve_cache_sim", "serve_sim", "sse_chat"]  # fmt: skip
