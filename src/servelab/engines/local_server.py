"""The processes of a server on this host: who holds its listening port, and how much CPU each used over a window.

A server's HTTP frontend is the process (or, with vLLM's ``--api-server-count N``, the N processes) holding the
listening socket; the engine core is elsewhere. A frontend process near a full core is the server's ceiling,
whatever the engine could do. Linux /proc only, a loopback target only; elsewhere nothing is read.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

LOOPBACK = ("127.0.0.1", "localhost", "::1", "0.0.0.0")
_LISTEN = "0A"


def local_port(url: str) -> int | None:
    """The port of a loopback URL, else None."""
    parts = urlsplit(url)
    if parts.hostname not in LOOPBACK:
        return None
    return parts.port or (443 if parts.scheme == "https" else 80)


def _listening_inodes(port: int, proc: Path) -> set[str]:
    inodes = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            lines = (proc / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rpartition(":")[2], 16) == port:
                inodes.add(fields[9])
    return inodes


def listening_pids(port: int, proc: Path = Path("/proc")) -> list[int]:
    """Every process holding a socket that listens on ``port`` (the ones this user may look at)."""
    wanted = {f"socket:[{i}]" for i in _listening_inodes(port, proc)}
    if not wanted:
        return []
    pids = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in wanted for fd in (entry / "fd").iterdir()):
                pids.append(int(entry.name))
        except OSError:
            continue
    return sorted(pids)


def cpu_seconds(pid: int, proc: Path = Path("/proc")) -> float | None:
    """User + system CPU time of one process so far, or None once it is gone."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class FrontendCpu:
    """CPU of the processes holding a loopback target's port, sampled (``sample()``, on the client's
    perf_counter_ns clock) so a share can be taken over any window inside the samples."""

    url: str
    pids: list[int] = field(default_factory=list)
    samples: list[tuple[int, dict[int, float]]] = field(default_factory=list)

    def start(self) -> None:
        port = local_port(self.url)
        self.pids = listening_pids(port) if port is not None and Path("/proc/net/tcp").exists() else []
        self.sample()

    def sample(self) -> None:
        if self.pids:
            self.samples.append(
                (time.perf_counter_ns(), {p: c for p in self.pids if (c := cpu_seconds(p)) is not None})
            )

    def shares(self, start_ns: int | None = None, end_ns: int | None = None) -> list[float]:
        """Each process's share of one core between the samples nearest inside [start_ns, end_ns] (all of them by
        default), busiest first; empty when no process was found or the window holds fewer than two samples."""
        inside = [
            s for s in self.samples if (start_ns is None or s[0] >= start_ns) and (end_ns is None or s[0] <= end_ns)
        ]
        if len(inside) < 2:
            return []
        (t0, first), (t1, last) = inside[0], inside[-1]
        wall = (t1 - t0) / 1e9
        return sorted(((last[p] - first[p]) / wall for p in first if p in last), reverse=True)
