"""Loopback helpers for tests and benchmarks: a free port, an asyncio server on a thread of its own."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any


def free_port() -> int:
    """A loopback port nothing listens on now (the usual race: take it soon)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def loop_in_thread(start: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> Iterator[Any]:
    """Run ``start()`` on a new event loop in a daemon thread; yield what it returned (a server, a port) while the
    loop runs; at the end that is closed (when it has ``close``), every task on the loop cancelled and awaited,
    and the loop closed."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    started: Any = None
    try:
        started = asyncio.run_coroutine_threadsafe(_call(start), loop).result(timeout)
        yield started
    finally:
        asyncio.run_coroutine_threadsafe(_cancel_all(started), loop).result(timeout)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


async def _call(start: Callable[[], Awaitable[Any]]) -> Any:
    return await start()


async def _cancel_all(started: Any) -> None:
    if callable(getattr(started, "close", None)):
        started.close()
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
