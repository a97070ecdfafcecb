"""One grading run: three trees servelab builds, up to three sandboxed processes, two pairs of pipes.

- The package process imports the graded package from a tree that holds the task's repo with the agent's
  harvested files and no test (:mod:`._serve`); the reference process does the same with the task's reference.
  Each sees that tree and the interpreter (the "graded" view of :mod:`servelab.eval.mounts`), nothing else.
- The test process runs the task's tests, visible and hidden, under pytest (:mod:`._grade_runner`), in a tree
  that holds the tests and no package; ``import`` of the package there asks the package process
  (:mod:`._proxy`). It sees that tree, the interpreter and the grading runtime.

The invariant: the expected values (the tests, the reference's answers) never exist in a process that imports
the graded code, and what crosses from it is plain data checked by the receiver (:mod:`._wire`). The programs
run as ``python -c``: no file of servelab's is mounted in any of these sandboxes.
"""

from __future__ import annotations

import ast
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servelab.eval.repair.harvest import Harvest, write_tree
from servelab.eval.repair.task import Task
from servelab.eval.repair.workspace import remove_tree
from servelab.eval.sandbox import Limits, Running, SandboxResult, finish, library, run, seen_as, start

REPORT_BYTES = 4 << 20
REQUEST_TIMEOUT_S = 20.0  # one request to the package's process; past it that link is dead
_HERE = Path(__file__).parent


def program(*modules: str) -> str:
    """One ``python -c`` program from servelab's standard-library-only modules, in order, each without its
    imports of one another (any ``from servelab.eval.repair... import``, however many lines it spans) and its
    ``from __future__`` line. The modules share one namespace there, so two that define the same top-level name
    are refused (one would replace the other's silently)."""
    lines = ["from __future__ import annotations"]
    owners: dict[str, str] = {}
    for name in modules:
        source = (_HERE / f"{name}.py").read_text()
        tree = ast.parse(source)
        for defined in _top_level_names(tree):
            if owners.setdefault(defined, name) != name:
                raise RuntimeError(f"{name} and {owners[defined]} both define {defined}: one program, one namespace")
        dropped = {n for node in tree.body if _inlined(node) for n in range(node.lineno, (node.end_lineno or 0) + 1)}
        lines += [line for i, line in enumerate(source.splitlines(), 1) if i not in dropped]
    return "\n".join(lines) + "\n"


def _inlined(node: ast.stmt) -> bool:
    """An import another module of the program already provides (or ``from __future__``, said once on top)."""
    module = (node.module or "") if isinstance(node, ast.ImportFrom) else None
    return module is not None and (module == "__future__" or module.startswith("servelab.eval.repair"))


def _top_level_names(tree: ast.Module) -> set[str]:
    """The names a module's own statements bind at its top level (functions, classes, assignments)."""
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return out


SERVE = program("_wire", "_shared", "_errors", "_effects", "_serve")
TESTS = program("_wire", "_shared", "_errors", "_effects", "_proxy", "_grade_runner")


@dataclass(frozen=True)
class Trees:
    package: Path  # the task's repo with the agent's files, no tests
    tests: Path  # the task's tests, visible and hidden, no package
    reference: Path | None  # the task's repo with its reference, no tests (when a test asks for it)

    def remove(self) -> None:
        for tree in (self.package, self.tests, self.reference):
            if tree is not None:
                remove_tree(tree)


def package_names(task: Task) -> set[str]:
    """The top-level modules the tests import from the package process: every Python folder or module of the
    repo but its tests, and every editable path's first part."""
    names = {e.split("/")[0].removesuffix(".py") for e in task.editable}
    for path in task.repo.iterdir():
        if path.name == task.tests_dir or path.name.startswith(".") or path.name in task.rules.runner_files:
            continue
        if (path.is_dir() and any(path.rglob("*.py"))) or path.suffix == ".py":
            names.add(path.name.removesuffix(".py"))
    return {n for n in names if n.isidentifier()}


def build_trees(task: Task, taken: Harvest) -> Trees:
    """The three trees, root-owned where servelab is root, readable by the sandbox user."""
    names, editable = package_names(task), {e.rstrip("/") for e in task.editable}
    package = _tree(task.repo, lambda rel: rel in editable or rel == task.tests_dir)
    write_tree(package, taken.files)
    tests = _tree(task.repo, lambda rel: rel != task.tests_dir and rel.removesuffix(".py") in names)
    shutil.copytree(task.root / "hidden", tests, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    if not (tests / "pytest.ini").is_file():
        (tests / "pytest.ini").write_text("[pytest]\n")
    reference = None
    if any("servelab_grading" in p.read_text(errors="replace") for p in tests.rglob("*.py")):
        reference = _tree(task.repo, lambda rel: rel == task.tests_dir)
        shutil.copytree(task.root / "reference", reference, dirs_exist_ok=True)
    for tree in (package, tests, reference):
        for path in [tree, *tree.rglob("*")] if tree else []:
            path.chmod(0o755 if path.is_dir() else 0o644)
    return Trees(package, tests, reference)


def _tree(source: Path, leave_out: Callable[[str], bool]) -> Path:
    """A copy of ``source`` without ``__pycache__`` and the paths (relative, "a/b.py") ``leave_out`` is true for."""
    tree = Path(tempfile.mkdtemp(prefix="servelab-grade-"))

    def ignore(folder: str, entries: list[str]) -> list[str]:
        rel = Path(folder).relative_to(source)
        return [n for n in entries if n == "__pycache__" or leave_out((rel / n).as_posix())]

    shutil.copytree(source, tree, dirs_exist_ok=True, ignore=ignore)
    return tree


@dataclass
class Served:
    """A package process and the test process's ends of its two pipes."""

    running: Running
    ends: tuple[int, int]  # (requests written here, answers read here), as the test process numbers them


def _serve(tree: Path, kind: str, limits: Limits) -> Served:
    requests, answers = os.pipe(), os.pipe()
    try:
        running = start(["python", "-I", "-B", "-c", SERVE, seen_as(tree, kind), str(requests[0]), str(answers[1])],
                        tree, kind=kind, limits=limits, read_only=True, view="graded",
                        pass_fds=(requests[0], answers[1]))  # fmt: skip
    finally:
        os.close(requests[0])
        os.close(answers[1])
    return Served(running, (requests[1], answers[0]))


def run_tests(task: Task, trees: Trees, kind: str, limits: Limits) -> SandboxResult:
    """Start the package (and reference) processes, run the tests against them, stop them; the test process's
    result, its report pipe included. Every pipe and process is gone on the way out, whatever failed."""
    served: list[Served] = []
    basetemp = None if kind == "bwrap" else Path(tempfile.mkdtemp(prefix="servelab-basetemp-"))
    try:
        for tree in (trees.package, trees.reference):
            if tree is not None:
                served.append(_serve(tree, kind, limits))
        root = seen_as(trees.tests, kind)
        reference = served[1].ends if len(served) > 1 else None
        config = {"names": sorted(package_names(task)), "package": served[0].ends, "reference": reference,
                  "timeout_s": REQUEST_TIMEOUT_S, "seed": secrets.randbelow(2**32)}  # fmt: skip
        return run(["python", "-I", "-B", "-c", TESTS, library(kind), root, f"{root}/pytest.ini",
                    f"{root}/{task.tests_dir}", str(basetemp) if basetemp else "/tmp/servelab-basetemp",
                    json.dumps(config)],
                   trees.tests, kind=kind, limits=limits, read_only=True, report_bytes=REPORT_BYTES,
                   view="graded+runtime", pass_fds=[fd for s in served for fd in s.ends])  # fmt: skip
    finally:
        for s in served:
            for fd in s.ends:
                os.close(fd)
            finish(s.running, now=True)
        if basetemp is not None:
            remove_tree(basetemp)
