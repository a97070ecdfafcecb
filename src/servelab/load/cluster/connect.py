"""Ray, imported only when a run asks for it (``--ray``), and the cluster it names: a clear error, never a
traceback, when Ray is not installed or no cluster answers at the address."""

from __future__ import annotations

import importlib
import os
import socket
from types import ModuleType

from servelab.core.errors import ServelabError

INSTALL_HINT = "pip install 'servelab[ray]' on this host and on every node of the cluster"
START_HINT = (
    "start one with `ray start --head` here (and `ray start --address HEAD:6379` on each other load host), "
    "or give --ray HEAD:6379 of a running cluster"
)


class RayUnavailable(ServelabError):
    """Ray is not installed, or no cluster answered at the address asked."""

    exit_code = 2


def require_ray() -> ModuleType:
    """The ``ray`` module, or an error that says how to install it."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise RayUnavailable(f"--ray needs Ray, which is not installed ({exc})", hint=INSTALL_HINT) from None


def connect(address: str) -> ModuleType:
    """Ray connected to the cluster at ``address`` (``auto``: the one this host belongs to), once per process; the
    same connection is kept for the run's later steps."""
    ray = require_ray()
    if ray.is_initialized():
        return ray
    os.environ.setdefault("RAY_DISABLE_USAGE_STATS", "1")
    probe(address)
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise RayUnavailable(f"no Ray cluster reachable at {address!r}: {_first_line(exc)}", hint=START_HINT) from None
    return ray


PROBE_TIMEOUT_S = 10.0


def probe(address: str) -> None:
    """A HOST:PORT that no process answers is said at once (Ray's own connect retries for minutes)."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise RayUnavailable(f"--ray wants auto or HOST:PORT of a Ray cluster's head, got {address!r}", hint=START_HINT)
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=PROBE_TIMEOUT_S).close()
    except OSError as exc:
        raise RayUnavailable(f"no Ray cluster reachable at {address!r}: {exc}", hint=START_HINT) from None


def disconnect() -> None:
    """Leave the cluster (a later run connects again, to whichever address it names)."""
    try:
        ray = importlib.import_module("ray")
    except ImportError:
        return
    if ray.is_initialized():
        ray.shutdown()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
