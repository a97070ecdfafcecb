"""One structured line per request, when its answer is over: method, path, status, route, reason, failover and
how long it took (a JSON object on the ``servelab.gateway.access`` logger, stderr by default)."""

from __future__ import annotations

import logging
import sys
import time

import orjson

LOG = logging.getLogger("servelab.gateway.access")


def access_line(method: str, path: str, status: int | None, headers: list[tuple[str, str]], seconds: float) -> None:
    if not LOG.isEnabledFor(logging.INFO):
        return
    said = dict(headers)
    reason = said.get("x-servelab-reason")
    line = {"t": round(time.time(), 3), "method": method, "path": path, "status": status,
            "route": said.get("x-servelab-route"), "reason": reason,
            "failed_over": bool(reason and reason.startswith("failover_from_")),
            "tokens": said.get("x-servelab-tokens"), "ms": round(seconds * 1000, 2)}  # fmt: skip
    LOG.info(orjson.dumps(line).decode())


def log_to_stderr() -> None:
    """The access log and the start-up warnings on stderr, unless the embedding program set up logging itself."""
    gateway = logging.getLogger("servelab.gateway")
    if not gateway.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        gateway.addHandler(handler)
        gateway.setLevel(logging.INFO)
