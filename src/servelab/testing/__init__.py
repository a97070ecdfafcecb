"""Helpers for servelab's own tests and benchmarks (and for anyone testing against servelab): loopback ports and
servers on threads of their own. Nothing in servelab's library imports this package."""

from servelab.testing.net import free_port, loop_in_thread

__all__ = ["free_port", "loop_in_thread"]
