"""The agent's folder and its tools. The folder is a size-capped tmpfs of its own where servelab runs as root
(a plain temporary folder elsewhere, said in ``size_limited``); every tool, the file tools included, runs as
the sandbox user inside the sandbox, so no privileged process reads or writes a path the agent controls."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from servelab.eval.sandbox import NOBODY, Limits, SandboxResult, give_to_sandbox, run, seen_as

OUTPUT_LIMIT = 4000  # characters of tool output shown to the model
WRITE_LIMIT = 1 << 20  # bytes one write_file may write
READ = """import os, stat, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
if not stat.S_ISREG(os.fstat(fd).st_mode):
    sys.exit("not a regular file")
sys.stdout.buffer.write(os.read(fd, int(sys.argv[2])))
"""
WRITE = """import os, sys
path = sys.argv[1]
os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
data = sys.stdin.buffer.read()
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
os.write(fd, data) if data else None
os.close(fd)
"""


@contextlib.contextmanager
def agent_folder(source: Path, size_mb: int = 256, inodes: int = 50_000) -> Iterator[tuple[Path, bool]]:
    """A copy of ``source`` (the task's own files) on a tmpfs of ``size_mb`` and ``inodes`` when this process may
    mount one; removed, mount and all, on the way out. Yields the folder and whether it is size-limited."""
    root = Path(tempfile.mkdtemp(prefix="servelab-work-"))
    mounted = _mount_tmpfs(root, size_mb, inodes)
    try:
        shutil.copytree(source, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", ".git"))
        give_to_sandbox(root)
        yield root, mounted
    finally:
        if mounted:
            _unmount(root)
        remove_tree(root)


def _mount_tmpfs(root: Path, size_mb: int, inodes: int) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    root.chmod(0o755)
    opts = f"size={size_mb}m,nr_inodes={inodes},mode=0755,uid={NOBODY},gid={NOBODY},nosuid,nodev"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "servelab-work", str(root)], capture_output=True)
    return done.returncode == 0


def _unmount(root: Path) -> None:
    if subprocess.run(["umount", str(root)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(root)], capture_output=True)


def remove_tree(path: Path) -> None:
    """Remove a folder whatever the code inside left there (links, FIFOs, unwritable or very deep folders):
    never follows a link, never raises."""
    if not os.path.lexists(path):
        return
    with contextlib.suppress(Exception):
        shutil.rmtree(path)
    if os.path.lexists(path):  # too deep for Python's recursion, or folders without write permission
        subprocess.run(["chmod", "-R", "u+rwx", "--", str(path)], capture_output=True)
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], capture_output=True)


class Workspace:
    """The agent's tools, confined to one folder; each one runs in the sandbox as the sandbox user."""

    def __init__(self, root: Path, kind: str, limits: Limits) -> None:
        self.root, self.kind, self.limits = root, kind, limits

    def call(self, name: str, arguments: str) -> str:
        try:
            args = json.loads(arguments or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments are not a JSON object")
            if name == "shell":
                return self.shell(str(args["command"]))
            if name == "read_file":
                return self.read(str(args["path"]))
            if name == "write_file":
                return self.write(str(args["path"]), str(args["content"]))
            return f"error: no tool {name!r}"
        except (KeyError, ValueError, OSError) as exc:
            return f"error: {type(exc).__name__}: {exc}"

    def shell(self, command: str) -> str:
        result = run(["bash", "-c", command], self.root, kind=self.kind, limits=self.limits)
        if result.timed_out:
            return f"timed out after {self.limits.timeout_s:g} s"
        out = (result.stdout + result.stderr)[-OUTPUT_LIMIT:]
        return f"exit code {result.returncode}\n{out}"

    def read(self, relative: str) -> str:
        result = self._tool(READ, relative, str(OUTPUT_LIMIT * 4))
        if not result.ok:
            raise ValueError(f"cannot read {relative!r}: {_last_line(result.stderr)}")
        return result.stdout[:OUTPUT_LIMIT]

    def write(self, relative: str, content: str) -> str:
        data = content.encode("utf-8", errors="surrogatepass")
        if len(data) > WRITE_LIMIT:
            raise ValueError(f"{len(data)} bytes is more than one write may hold ({WRITE_LIMIT})")
        result = self._tool(WRITE, relative, stdin=data)
        if not result.ok:
            raise ValueError(f"cannot write {relative!r}: {_last_line(result.stderr)}")
        return f"wrote {len(content)} characters to {relative}"

    def _tool(self, script: str, relative: str, *args: str, stdin: bytes | None = None) -> SandboxResult:
        path = _inside_path(relative)
        where = f"{seen_as(self.root, self.kind)}/{path}"
        limits = Limits(timeout_s=20, output_bytes=OUTPUT_LIMIT * 4 + 1024, tmp_mb=16)
        return run(["python", "-I", "-c", script, where, *args], self.root, kind=self.kind, limits=limits,
                   stdin=stdin)  # fmt: skip


def _inside_path(relative: str) -> str:
    """A path relative to the repository, with no way out of it by its words (links are the sandbox's affair)."""
    pure = PurePosixPath(relative)
    if pure.is_absolute() or ".." in pure.parts or "\x00" in relative or not pure.parts:
        raise ValueError(f"{relative!r} is outside the repository")
    return str(pure)


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1][:200] if lines else "failed"
