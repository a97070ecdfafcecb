"""A real Ray cluster on loopback for tests and benchmarks: a head and more nodes, each started by `ray start --block`
in a process group of its own, with its own ports, its own CPUs and a resource named after it, in one temp dir of its
own; stopped by ending those process groups (nothing else on the host is touched, unlike `ray stop`).

The nodes import servelab from where this process does (``PYTHONPATH``), so load actors run this checkout. The head
notices a lost node within about 2 s (health checks every 0.5 s, 4 missed), not Ray's default of tens of seconds.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import servelab
from servelab.testing.net import free_port

START_TIMEOUT_S = 300.0  # a node's processes start in seconds on a quiet host; a busy 2-core one takes longer
STARTED = "Ray runtime started"
FAST_HEALTH = {"RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "4",
               "RAY_health_check_initial_delay_ms": "0", "RAY_DISABLE_USAGE_STATS": "1"}  # fmt: skip


@dataclass
class Node:
    name: str  # also a custom resource of 1 on it
    process: subprocess.Popen[str]
    log: Path
    node_id: str | None = None  # as Ray names it, once asked (:meth:`LocalRayCluster.node_ids`)

    def kill(self) -> None:
        """SIGKILL to every process of the node (its raylet, its workers and actors): the node is lost."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)


@dataclass
class LocalRayCluster:
    root: Path
    port: int = 0
    nodes: list[Node] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def add(self, name: str, cpus: int = 1) -> Node:
        """A node (the first is the head) with ``cpus`` CPUs and the resource ``name``; returns once it runs."""
        head = not self.nodes
        if head:
            self.port = free_port()
        log = self.root / f"{name}.log"
        cmd = [_ray(), "start", "--block", "--node-ip-address", "127.0.0.1", "--num-cpus", str(cpus),
               "--resources", f'{{"{name}": 1}}', "--temp-dir", str(self.root / "ray"), "--disable-usage-stats",
               "--object-store-memory", str(80 * 1024 * 1024), *_ports(head)]  # fmt: skip
        cmd += (
            ["--head", "--port", str(self.port), "--include-dashboard", "false"]
            if head
            else ["--address", self.address]
        )
        with log.open("w") as out:
            process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, env=_env(),
                                       start_new_session=True)  # fmt: skip
        node = Node(name, process, log)
        self.nodes.append(node)
        _wait_started(node)
        return node

    def node_ids(self) -> dict[str, str]:
        """Resource name -> Ray's node id, for the nodes alive (asked of the cluster by this process's driver)."""
        ray: Any = importlib.import_module("ray")
        alive = [n for n in ray.nodes() if n.get("Alive")]
        out = {}
        for node in self.nodes:
            found = [n["NodeID"] for n in alive if node.name in n.get("Resources", {})]
            if found:
                node.node_id = out[node.name] = found[0]
        return out

    def stop(self) -> None:
        """Every node's process group ended (SIGTERM, then SIGKILL after 20 s), the temp dir removed."""
        for node in reversed(self.nodes):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for node in self.nodes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGKILL)  # what SIGTERM left (the group outlives its leader)
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(timeout=10)
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def local_ray_cluster(names: tuple[str, ...] = ("head", "second"), cpus: int = 1) -> Iterator[LocalRayCluster]:
    """The nodes started in turn (the first the head), stopped at the end whatever happened."""
    cluster = LocalRayCluster(Path(tempfile.mkdtemp(prefix="slray", dir="/tmp")))  # short: Ray's socket paths
    try:
        for name in names:
            cluster.add(name, cpus)
        yield cluster
    finally:
        cluster.stop()


def _ray() -> str:
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.exists() else shutil.which("ray")
    if found is None:
        raise RuntimeError("the `ray` command is not installed: pip install 'servelab[ray]'")
    return found


def _env() -> dict[str, str]:
    src = str(Path(servelab.__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, **FAST_HEALTH, "PYTHONPATH": path}


def _ports(head: bool) -> list[str]:
    """Every port a node listens on, free ones, so two nodes (and other tests) on one host never collide."""
    named = ["--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
             "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port"]  # fmt: skip
    if head:
        named += ["--ray-client-server-port", "--dashboard-port"]
    out = [x for name in named for x in (name, str(free_port()))]
    return [*out, "--worker-port-list", ",".join(str(free_port()) for _ in range(12))]


def _wait_started(node: Node) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if STARTED in node.log.read_text(errors="replace"):
            return
        if node.process.poll() is not None:
            break
        time.sleep(0.2)
    tail = node.log.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"ray node {node.name} did not start (exit {node.process.poll()}):\n{tail}")


def kill_when(node: Node, ready: threading.Event, timeout_s: float = START_TIMEOUT_S) -> threading.Thread:
    """A thread that kills ``node`` once ``ready`` is set (or at ``timeout_s``)."""

    def run() -> None:
        ready.wait(timeout_s)
        node.kill()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread
