"""The sandbox contains what model-written code might do: a network call, a write outside its folder, a fork
bomb and a memory bomb. Needs bubblewrap (`make test` installs it); skipped without it outside CI."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servelab.eval.sandbox import Limits, fresh_copy, run
from tests.unit.eval.needs_bwrap import require_bwrap

require_bwrap()


@pytest.fixture()
def work() -> Iterator[Path]:
    path = fresh_copy(files={"hello.txt": "hi\n"})
    yield path
    shutil.rmtree(path, ignore_errors=True)


def python(work: Path, code: str, limits: Limits | None = None):
    (work / "probe.py").write_text(code)
    if os.geteuid() == 0:
        os.chown(work / "probe.py", 65534, 65534)
    return run(["python3", "probe.py"], work, kind="bwrap", limits=limits)


def test_runs_code_in_its_folder_as_an_unprivileged_user(work: Path) -> None:
    got = python(work, "import os\nprint(open('hello.txt').read().strip(), os.getcwd(), os.getuid() != 0)\n"
                       "open('out.txt', 'w').write('done')\n")  # fmt: skip
    assert got.ok and got.sandbox == "bwrap"
    assert got.stdout.split() == ["hi", "/tmp/sandbox", "True"]
    assert (work / "out.txt").read_text() == "done"  # the work folder is the one writable place


def test_no_network_even_to_a_server_on_this_host(work: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted: list[object] = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()
    got = python(
        work,
        f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=3)\n    print('CONNECTED')\n"
        "except OSError as e:\n    print('blocked', type(e).__name__)\n"
        "try:\n    socket.create_connection(('1.1.1.1', 80), timeout=3)\n    print('CONNECTED')\n"
        "except OSError as e:\n    print('blocked', type(e).__name__)\n",
    )
    server.close()
    assert got.ok, got.stderr
    assert "CONNECTED" not in got.stdout and got.stdout.count("blocked") == 2
    assert not accepted  # the host's server never saw a connection


def test_cannot_write_outside_its_folder(work: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    os.chmod(tmp_path, 0o777)  # even where the host would let the sandbox user write
    targets = [str(outside), "/etc/servelab-probe", "/usr/servelab-probe", "/root/servelab-probe"]
    got = python(
        work,
        f"for p in {targets!r}:\n    try:\n        open(p, 'w').write('x')\n        print('WROTE', p)\n"
        "    except OSError as e:\n        print('refused', p, type(e).__name__)\n",
    )
    assert got.ok, got.stderr
    assert "WROTE" not in got.stdout and got.stdout.count("refused") == len(targets)
    assert not outside.exists() and not Path("/etc/servelab-probe").exists()


def test_a_fork_bomb_is_contained_and_killed(work: Path) -> None:
    before = set(_processes_of(65534))
    start = time.monotonic()
    got = python(work, "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
                 Limits(timeout_s=3, processes=32))  # fmt: skip
    assert got.timed_out and not got.ok
    assert time.monotonic() - start < 30
    deadline = time.monotonic() + 10  # the kernel tears the pid namespace down asynchronously
    while set(_processes_of(65534)) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not set(_processes_of(65534)) - before, "processes of the sandbox user survived the kill"


def test_a_memory_bomb_fails_inside_the_limit(work: Path) -> None:
    got = python(work, "x = bytearray(8 * 2**30)\nprint('ALLOCATED')\n", Limits(timeout_s=20, memory_mb=512))
    assert not got.ok and "ALLOCATED" not in got.stdout
    assert "MemoryError" in got.stderr


def test_a_hung_program_is_killed_at_the_timeout(work: Path) -> None:
    got = python(work, "import time\ntime.sleep(60)\n", Limits(timeout_s=1))
    assert got.timed_out and got.returncode is None


def _processes_of(uid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
            except FileNotFoundError:
                continue
    return pids
