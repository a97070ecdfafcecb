"""A gateway process with named functions wrapped to time their calls (benchmarks/gateway/stages.py starts it):
argv: the config's JSON, the file to write the timings to on SIGUSR1, then MODULE:QUALNAME per stage (a name the
tree does not have is skipped, so trees of different shapes compare)."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from servelab.gateway import GatewayConfig, client, run, server

TIMINGS: dict[str, list[int]] = {"whole path (first bytes read -> upstream write)": []}
STARTED = {"ns": 0}


def _stamp_first_bytes() -> None:
    received = server.Connection.data_received

    def data_received(self: Any, data: bytes) -> None:
        if data.startswith(b"POST"):
            STARTED["ns"] = time.perf_counter_ns()
        received(self, data)

    server.Connection.data_received = data_received  # type: ignore[method-assign]
    request = client.HttpClient.request

    def upstream_request(self: Any, method: str, path: str, body: bytes | None = None, root: bool = False) -> Any:
        if method == "POST" and STARTED["ns"]:
            TIMINGS["whole path (first bytes read -> upstream write)"].append(time.perf_counter_ns() - STARTED["ns"])
            STARTED["ns"] = 0
        return request(self, method, path, body, root)

    client.HttpClient.request = upstream_request  # type: ignore[method-assign]


def _timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    TIMINGS[name] = []
    if inspect.iscoroutinefunction(function):

        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            result = await function(*args, **kwargs)
            TIMINGS[name].append(time.perf_counter_ns() - start)
            return result

        return timed_async

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter_ns()
        result = function(*args, **kwargs)
        TIMINGS[name].append(time.perf_counter_ns() - start)
        return result

    return timed


def _wrap(spec: str) -> None:
    module, qualname = spec.split(":")
    owner: Any = importlib.import_module(module)
    *path, name = qualname.split(".")
    try:
        for part in path:
            owner = getattr(owner, part)
        setattr(owner, name, _timed(qualname, getattr(owner, name)))
    except AttributeError:
        return


def main() -> None:
    _stamp_first_bytes()
    for spec in sys.argv[3:]:
        _wrap(spec)

    def write(*_: Any) -> None:
        with open(sys.argv[2], "w") as out:
            json.dump(TIMINGS, out)
        os._exit(0)

    signal.signal(signal.SIGUSR1, write)
    run(GatewayConfig.model_validate_json(sys.argv[1]), 1)


if __name__ == "__main__":
    main()
