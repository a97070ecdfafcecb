"""Run by the sandbox user, inside the sandbox, as ``python3 -I -c <this file> ROOT RULES``: walks the paths a
task declares editable under ROOT without following any link, takes regular files only (checked again on the
open descriptor, opened with O_NOFOLLOW | O_NONBLOCK so a FIFO or a device never blocks or streams), within
the caps, and writes them to stdout as an uncompressed tar. What it leaves out, and why, goes to stderr as
one JSON line. Standard library only: servelab's own interpreter may not be readable by this user."""

from __future__ import annotations

import io
import json
import os
import re
import stat
import sys
import tarfile
from typing import IO, Any

KEPT_DROPS = 200


class Walk:
    def __init__(self, root: str, rules: dict[str, Any], out: IO[bytes]) -> None:
        self.root, self.rules = root, rules
        self.name = re.compile(rules["name_pattern"], re.ASCII)  # the one pattern, servelab's (harvest.NAME)
        self.tar = tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT)  # noqa: SIM115
        self.files = self.bytes = self.entries = 0
        self.dropped: list[dict[str, str]] = []
        self.counts: dict[str, int] = {}
        self.stopped: str | None = None

    def drop(self, rel: str, reason: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if len(self.dropped) < KEPT_DROPS:
            shown = rel.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
            self.dropped.append({"path": shown, "reason": reason})

    def visit(self, rel: str, depth: int) -> None:
        self.entries += 1
        if self.entries > self.rules["max_entries"]:
            self.stopped = f"the walk stopped at {self.rules['max_entries']} entries"
            return
        name = rel.rsplit("/", 1)[-1]
        if name.startswith("."):
            return self.drop(rel, "dotfile")
        if not self.name.fullmatch(name):
            return self.drop(rel, "odd name")
        path = os.path.join(self.root, rel)
        try:
            st = os.lstat(path)
        except OSError as exc:
            return self.drop(rel, f"unreadable: {exc.strerror}")
        if stat.S_ISLNK(st.st_mode):
            return self.drop(rel, "symlink")
        if stat.S_ISDIR(st.st_mode):
            return self.folder(rel, path, depth)
        if not stat.S_ISREG(st.st_mode):
            return self.drop(rel, "special file")
        self.regular(rel, path, st.st_size)

    def folder(self, rel: str, path: str, depth: int) -> None:
        if name_of(rel) == "__pycache__":
            return self.drop(rel, "bytecode cache")
        if depth >= self.rules["max_depth"]:
            return self.drop(rel, f"deeper than {self.rules['max_depth']} folders")
        try:
            names = sorted(os.listdir(path))[: self.rules["max_entries"]]
        except OSError as exc:
            return self.drop(rel, f"unreadable: {exc.strerror}")
        folders = {n for n in names if is_folder(os.path.join(path, n))}
        for child in [n for n in names if n not in folders] + [n for n in names if n in folders]:  # files first
            if self.stopped:
                return
            self.visit(rel + "/" + child, depth + 1)

    def regular(self, rel: str, path: str, size: int) -> None:
        rules = self.rules
        if name_of(rel) in rules["runner_files"]:
            return self.drop(rel, "test-runner configuration")
        if os.path.splitext(rel)[1] not in rules["suffixes"]:
            return self.drop(rel, "not an editable kind of file")
        if size > rules["max_file_bytes"]:
            return self.drop(rel, f"larger than {rules['max_file_bytes']} bytes")
        if self.files >= rules["max_files"]:
            return self.drop(rel, f"more than {rules['max_files']} files")
        if self.bytes + size > rules["max_total_bytes"]:
            return self.drop(rel, f"over {rules['max_total_bytes']} bytes in all")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError as exc:
            return self.drop(rel, f"unreadable: {exc.strerror}")
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return self.drop(rel, "special file")
            data = f.read(rules["max_file_bytes"] + 1)
        if len(data) > rules["max_file_bytes"]:
            return self.drop(rel, f"larger than {rules['max_file_bytes']} bytes")
        info = tarfile.TarInfo(rel)
        info.size, info.mode = len(data), 0o644
        self.tar.addfile(info, io.BytesIO(data))
        self.files, self.bytes = self.files + 1, self.bytes + len(data)


def is_folder(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def name_of(rel: str) -> str:
    return rel.rsplit("/", 1)[-1]


def main() -> None:
    root, rules = sys.argv[1], json.loads(sys.argv[2])
    walk = Walk(root, rules, sys.stdout.buffer)
    for rel in rules["editable"]:
        if walk.stopped:
            break
        if os.path.lexists(os.path.join(root, rel)):
            walk.visit(rel, 0)
    tops = {e.split("/", 1)[0] for e in rules["editable"]} | set(rules.get("original", ()))
    for name in sorted(os.listdir(root))[: rules["max_entries"]]:
        if name not in tops:
            walk.drop(name, "outside the editable paths")
    walk.tar.close()
    sys.stdout.buffer.flush()
    report = {
        "dropped": walk.dropped,
        "counts": walk.counts,
        "stopped": walk.stopped,
        "files": walk.files,
        "bytes": walk.bytes,
    }
    sys.stderr.write("\n" + json.dumps(report) + "\n")


main()
