"""A hostile repo is graded, never a crash: links anywhere, FIFOs, sockets, devices, sparse and huge files,
deep and wide trees, odd names, unreadable folders, 2 GB into the sandbox's /tmp. Each case is graded (the
fix beside it still resolves, the hostile entry listed as dropped), the eval goes on to the next attempt, and
the host is left as it was: no temp folders or mounts left, no host file read or changed, /tmp no fuller.
Needs bubblewrap; the device case needs root."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from servelab.core.store import RunStore
from servelab.eval.grade import Outcome
from servelab.eval.repair import AgentLimits, Workspace, grade_workdir, load_task, remove_tree, run_repo
from servelab.eval.sandbox import Limits, fresh_copy, pytest_lib
from servelab.load.runner import Target
from tests.fixtures.scripted_agent import serve_agents
from tests.unit.eval.needs_bwrap import require_bwrap

require_bwrap()

TASK = load_task("inventory")
FIX = (TASK.root / "reference" / "inventory" / "core.py").read_text()
INIT = (TASK.repo / "inventory" / "__init__.py").read_text()
SECRET = "SERVELAB-HOST-SECRET-7d1f"


def host_state() -> tuple[list[str], list[str], int]:
    tmp = sorted(p.name for p in Path("/tmp").iterdir() if p.name.startswith("servelab-"))
    mounts = [line for line in Path("/proc/mounts").read_text().splitlines() if "servelab" in line]
    return tmp, mounts, shutil.disk_usage("/tmp").used


@pytest.fixture()
def host(tmp_path: Path) -> Iterator[Path]:
    """A host file the sandbox user may read, and the host's state before and after the test."""
    pytest_lib()  # made once per process: not a leftover of the test
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET)
    tmp_path.chmod(0o755)
    secret.chmod(0o644)
    before = host_state()
    yield secret
    after = host_state()
    assert after[:2] == before[:2], "temp folders or mounts left behind"
    assert after[2] - before[2] < 64 << 20, "the host's /tmp grew"
    assert secret.read_text() == SECRET


def _deep(base: Path, depth: int) -> None:
    fd = os.open(base, os.O_RDONLY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)


def _socket(path: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()


def _many(folder: Path, n: int) -> None:
    folder.mkdir()
    for i in range(n):
        (folder / f"f{i}.txt").touch()


Make = Callable[[Path, Path], None]
CASES: dict[str, tuple[Make, str, str]] = {
    "symlink-to-a-host-file": (lambda pkg, secret: os.symlink(secret, pkg / "secret.txt"), "secret.txt", "symlink"),
    "symlink-to-dev-zero": (lambda pkg, _: os.symlink("/dev/zero", pkg / "zero.txt"), "zero.txt", "symlink"),
    "dangling-symlink": (lambda pkg, _: os.symlink("/nonexistent/x", pkg / "gone.py"), "gone.py", "symlink"),
    "symlinked-folder": (lambda pkg, _: os.symlink("/etc", pkg / "etc"), "etc", "symlink"),
    "fifo": (lambda pkg, _: os.mkfifo(pkg / "pipe.txt"), "pipe.txt", "special file"),
    "unix-socket": (lambda pkg, _: _socket(pkg / "sock.txt"), "sock.txt", "special file"),
    "sparse-1gb-file": (lambda pkg, _: os.truncate(_touch(pkg / "big.txt"), 1 << 30), "big.txt", "larger than"),
    "80mb-file": (lambda pkg, _: (pkg / "huge.txt").write_bytes(b"x" * (80 << 20)), "huge.txt", "larger than"),
    "100k-files": (lambda pkg, _: _many(pkg / "many", 100_000), "many/f", "more than 500 files"),
    "deep-tree": (lambda pkg, _: _deep(pkg, 3000), "d/d/d", "deeper than"),
    "odd-names": (lambda pkg, _: _touch(Path(os.fsdecode(bytes(pkg) + b"/\xff\xfe.py"))), "\\xff", "odd name"),
    "newline-name": (lambda pkg, _: _touch(pkg / "new\nline.py"), "new", "odd name"),
    "unreadable-folder": (lambda pkg, _: os.chmod(_mkdir(pkg / "locked"), 0), "locked", "unreadable"),
}
if os.geteuid() == 0:
    CASES["device"] = (lambda pkg, _: os.mknod(pkg / "null.txt", 0o666 | 0o020000, os.makedev(1, 3)), "null.txt",
                       "special file")  # fmt: skip


def _touch(path: Path) -> Path:
    path.touch()
    return path


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_entry_is_dropped_and_the_fix_still_graded(case: str, host: Path) -> None:
    make, path, reason = CASES[case]
    work = fresh_copy(TASK.repo)
    try:
        (work / "inventory" / "core.py").write_text(FIX)
        make(work / "inventory", host)
        grade = grade_workdir(TASK, work, "bwrap")
    finally:
        remove_tree(work)
    assert not os.path.lexists(work)
    assert grade.error is None and grade.resolved, grade.error
    hits = [d for d in grade.dropped if d["path"].startswith("inventory/" + path) and reason in d["reason"]]
    assert hits, grade.dropped[:5]
    assert SECRET not in json.dumps(grade.to_dict(TASK))


def test_code_under_test_writing_2gb_into_tmp_is_graded(host: Path) -> None:
    fill = ("\nimport os\ntry:\n    with open('/tmp/fill', 'wb') as _f:\n        for _ in range(2048):\n"
            "            _f.write(b'\\0' * (1 << 20))\nexcept OSError:\n    pass\n")  # fmt: skip
    work = fresh_copy(TASK.repo)
    try:
        (work / "inventory" / "core.py").write_text(FIX)
        (work / "inventory" / "__init__.py").write_text(INIT + fill)
        grade = grade_workdir(TASK, work, "bwrap", Limits(timeout_s=120, file_mb=4096, memory_mb=2048))
    finally:
        remove_tree(work)
    assert grade.error is None and grade.resolved, grade.error


def test_the_file_tools_refuse_special_files_without_blocking(tmp_path: Path) -> None:
    work = fresh_copy(TASK.repo)
    try:
        os.mkfifo(work / "pipe")
        os.symlink("/dev/zero", work / "zero")
        os.symlink("/etc/hostname", work / "link")
        tools = Workspace(work, "bwrap", Limits(timeout_s=10))
        assert "not a regular file" in tools.call("read_file", json.dumps({"path": "pipe"}))
        assert tools.call("read_file", json.dumps({"path": "zero"})).startswith("error:")
        assert tools.call("write_file", json.dumps({"path": "link", "content": "x"})).startswith("error:")
        assert tools.call("read_file", json.dumps({"path": "../../etc/passwd"})).startswith("error:")
        assert "def normalize" in tools.call("read_file", json.dumps({"path": "inventory/core.py"}))
    finally:
        remove_tree(work)


HOSTILE_SHELL = (
    "cd inventory && ln -s /etc/passwd a.py; ln -s /dev/zero z.txt; ln -s /nonexistent d.py; mkfifo p.txt; "
    "truncate -s 1G s.txt 2>&1 | tail -1; "
    "python3 -c \"import os\nos.mkdir('many')\nfor i in range(100000):\n    open(f'many/{i}.txt', 'w').close()\" "
    "2>&1 | tail -1; ls many | wc -l; "
    "dd if=/dev/zero of=/tmp/fill bs=1M count=2048 2>&1 | tail -1; dd if=/dev/zero of=/dev/shm/fill bs=1M count=2048 "
    "2>&1 | tail -1; dd if=/dev/zero of=fill.txt bs=1M count=2048 2>&1 | tail -1"
)


def test_a_hostile_agent_costs_only_its_own_attempt(host: Path, tmp_path: Path) -> None:
    done = [("finish", {"summary": "done"})]
    scripts = {
        "hostile": [[("shell", {"command": HOSTILE_SHELL})], [("write_file", {"path": "inventory/core.py",
                                                                              "content": FIX})], done],
        "honest": [[("write_file", {"path": "inventory/core.py", "content": FIX})], done],
    }  # fmt: skip
    limits = AgentLimits(max_steps=6, timeout_s=300, shell=Limits(timeout_s=120, file_mb=4096))
    with serve_agents(scripts) as url:
        result = run_repo(RunStore(tmp_path / "runs.sqlite"), [Target("hostile", url, "hostile"),
                          Target("honest", url, "honest")], TASK, "bwrap", limits=limits)  # fmt: skip
    hostile, honest = result.attempts
    shell_out = hostile.trajectory.messages[3]["content"]
    if os.geteuid() == 0:  # the agent's folder is a tmpfs of 256 MiB and 50,000 inodes
        assert "No space left on device" in shell_out
        assert hostile.grade.harvest["workdir_size_limited"] is True
    assert shell_out.count("(268 MB, 256 MiB) copied") == 2, shell_out  # /tmp and /dev/shm: 256 MiB each inside
    assert hostile.outcome is Outcome.CORRECT, hostile.grade.error
    counts = hostile.grade.harvest["dropped_counts"]  # the list keeps 200 entries; the counts are whole
    assert counts["symlink"] == 3 and counts["special file"] == 1, (counts, shell_out)
    assert honest.outcome is Outcome.CORRECT
    assert result.stored is not None and result.stored.targets["honest"].resolved.k == 1


def test_a_deep_tree_is_removed(tmp_path: Path) -> None:
    root = tmp_path / "deep"
    root.mkdir()
    _deep(root, 3000)
    subprocess.run(["chmod", "000", str(root / "d")], check=True)
    remove_tree(root)
    assert not root.exists()


def test_the_pytest_library_copy_is_removed_when_the_process_ends() -> None:
    code = "from servelab.eval.sandbox import pytest_lib\nprint(pytest_lib())"
    out = subprocess.run([os.sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().startswith("/tmp/servelab-pylib-") and not Path(out.strip()).exists()


def test_a_folder_that_can_be_listed_but_not_entered_is_dropped(host: Path) -> None:
    work = fresh_copy(TASK.repo)
    try:
        (work / "inventory" / "core.py").write_text(FIX)
        (work / "inventory" / "half").mkdir()
        (work / "inventory" / "half" / "x.py").touch()
        (work / "inventory" / "half").chmod(0o444)  # r without x: its names show, their inodes do not
        grade = grade_workdir(TASK, work, "bwrap")
    finally:
        remove_tree(work)
    assert grade.resolved, grade.error
    assert any(d["path"].startswith("inventory/half") for d in grade.dropped), grade.dropped
