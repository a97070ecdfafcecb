"""Helpers for servelab's own tests and benchmarks (and for anyone testing against servelab): loopback ports,
servers on threads of their own, and a scripted in-process transport for the streaming client. Nothing in
servelab's library imports this package."""

from servelab.testing.net import free_port, loop_in_thread
from servelab.testing.scripted import Scripted, ScriptedStream, sse_chat

__all__ = ["Scripted", "ScriptedStream", "free_port", "loop_in_thread", "sse_chat"]
