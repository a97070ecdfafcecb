"""Running the gateway: one process, or N worker processes sharing one port (SO_REUSEPORT: the kernel spreads
connections over them) and one state (the host store, or Redis when configured); in a background thread for
tests and benchmarks."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

from servelab.core.errors import UsageError
from servelab.gateway.access import log_to_stderr
from servelab.gateway.app import Gateway
from servelab.gateway.checks import warn_at_start
from servelab.gateway.config import GatewayConfig
from servelab.gateway.endpoints import Router
from servelab.gateway.listener import start_server
from servelab.gateway.messages import ServerHooks, ServerLimits
from servelab.gateway.poll import BusyPoll, PollSettings, auto_poll
from servelab.gateway.slots import connection_cap, raise_open_files
from servelab.gateway.store import Store, host_store_path, reset_host_store
from servelab.gateway.warm import Rehearsal


def limits(config: GatewayConfig) -> ServerLimits:
    """The server's limits; ``max_connections`` capped by this process's open files (:mod:`.slots`)."""
    s = config.server
    return ServerLimits(header_timeout_s=s.header_timeout_s, body_timeout_s=s.body_timeout_s,
                        body_pause_s=s.body_pause_s, keepalive_s=s.keepalive_s, max_header_bytes=s.max_header_bytes,
                        max_headers=s.max_headers, max_body_bytes=config.max_body_bytes,
                        max_connections=connection_cap(s.max_connections), access_log=s.access_log)  # fmt: skip


def poll_settings(config: GatewayConfig) -> PollSettings:
    """The config's polling, its unset figures from :func:`auto_poll` (this host's cores)."""
    s = config.server
    first_ms, linger_us = auto_poll()
    first_ms = first_ms if s.first_byte_poll_ms is None else s.first_byte_poll_ms
    linger_us = linger_us if s.poll_linger_us is None else s.poll_linger_us
    return PollSettings(first_byte_s=first_ms / 1e3, linger_s=linger_us / 1e6 if first_ms else 0.0,
                        max_in_flight=s.poll_max_in_flight, busy_linger_s=s.busy_poll_us / 1e6)  # fmt: skip


async def serve(
    config: GatewayConfig,
    *,
    store: Store | None = None,
    reuse_port: bool = False,
    started: asyncio.Future[tuple[Gateway, int]] | None = None,
) -> None:
    """Serve until cancelled (the open-file limit raised first: the connection cap and the pools follow it)."""
    raise_open_files()
    poll = BusyPoll(asyncio.get_running_loop(), poll_settings(config))
    gateway = Gateway(config, store, poll)
    if poll.enabled and config.server.warm_on_linger:
        poll.on_linger = Rehearsal(limits(config), config.server.max_json_depth, gateway.rehearse)
    await gateway.start()
    try:
        router = Router(gateway)
        hooks = ServerHooks(gate=router.gate, observe=gateway.observe)
        listener = await start_server(router, config.host, config.port, limits(config),
                                      reuse_port=reuse_port, poll=poll, hooks=hooks)  # fmt: skip
        if started is not None:
            started.set_result((gateway, listener.port))
        await listener.serve_forever()
    finally:
        await gateway.stop()


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop

        return uvloop.new_event_loop()
    except ImportError:
        return asyncio.new_event_loop()


@contextlib.contextmanager
def running(config: GatewayConfig, store: Store | None = None) -> Iterator[tuple[str, Gateway]]:
    """The gateway on a background thread (port 0 in the config: any free one); yields its URL and object."""
    loop = _new_loop()
    ready: asyncio.Future[tuple[Gateway, int]] = loop.create_future()
    task = loop.create_task(serve(config, store=store, started=ready))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    got = asyncio.run_coroutine_threadsafe(_wait(ready, task), loop).result(timeout=30)
    try:
        yield f"http://{config.host}:{got[1]}", got[0]
    finally:
        loop.call_soon_threadsafe(task.cancel)
        asyncio.run_coroutine_threadsafe(_settle(task), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


async def _wait(ready: asyncio.Future[Any], task: asyncio.Task[None]) -> Any:
    done, _ = await asyncio.wait({ready, task}, return_when=asyncio.FIRST_COMPLETED)
    if ready not in done:
        task.result()  # raises what stopped it
    return ready.result()


async def _settle(task: asyncio.Task[None]) -> None:
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def default_workers() -> int:
    """One worker per two cores, at most 8: the upstream engine and the load generator keep some."""
    return max(1, min(8, (os.cpu_count() or 2) // 2))


def run(config: GatewayConfig, workers: int = 1) -> None:
    """Serve in the foreground until SIGINT or SIGTERM: the access log and start-up warnings on stderr."""
    log_to_stderr(config.server.log_queue_lines)
    warn_at_start(config)
    if workers <= 1:
        loop = _new_loop()
        try:
            loop.run_until_complete(_until_signal(loop, serve(config)))
        finally:
            loop.close()
        return
    _run_workers(config, workers)


async def _until_signal(loop: asyncio.AbstractEventLoop, work: Any) -> None:
    task = asyncio.ensure_future(work)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _run_workers(config: GatewayConfig, workers: int) -> None:
    if config.port == 0:
        raise UsageError("several workers need a fixed port (port = 0 picks one per process)")
    if config.state.backend == "memory":  # one host: the workers share a file, no Redis needed
        config = config.model_copy(update={"state": config.state.model_copy(update={"backend": "host"})})
    if config.state.backend == "host":
        reset_host_store(host_store_path(config))
    metrics_dir = tempfile.mkdtemp(prefix="servelab-gateway-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_worker, args=(config.model_dump_json(),), daemon=True) for _ in range(workers)]
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        for proc in procs:
            proc.start()
        while not stop.wait(0.5):
            if any(not p.is_alive() for p in procs):
                raise UsageError("a gateway worker exited (is the port taken?)")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.join(timeout=10)
        shutil.rmtree(metrics_dir, ignore_errors=True)
        if config.state.backend == "host":
            with contextlib.suppress(OSError):
                os.unlink(host_store_path(config))


def _worker(config_json: str) -> None:
    config = GatewayConfig.model_validate_json(config_json)
    log_to_stderr(config.server.log_queue_lines)  # a process of its own: its access log too
    loop = _new_loop()
    try:
        loop.run_until_complete(_until_signal(loop, serve(config, reuse_port=True)))
    finally:
        loop.close()
