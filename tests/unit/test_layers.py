"""The import direction, enforced: cli -> check -> report -> sweep -> capabilities -> load -> engines -> core. A
capability never imports another capability, nor anything above it; a layer above reaches a capability (or the
report, or check) only through its package's public names (``from servelab.coexist import X``), never its
modules. Every import counts, those inside functions too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "servelab"
CAPABILITIES = {"bench", "eval", "coexist", "plan", "gateway"}
LIBRARIES = {"core", "engines", "load", "_version"}  # their modules may be imported by anything above them
MAY_IMPORT: dict[str, set[str]] = {
    "core": {"core", "_version"},
    "engines": {"core", "engines", "_version"},
    "load": {"core", "engines", "load", "_version"},
    **{c: LIBRARIES | {c} for c in CAPABILITIES},
    "sweep": LIBRARIES | CAPABILITIES | {"sweep"},  # starts engines and runs bench and plan on each point
    "report": LIBRARIES | CAPABILITIES | {"sweep", "report"},
    "check": LIBRARIES | CAPABILITIES | {"sweep", "report", "check"},
    "cli": LIBRARIES | CAPABILITIES | {"sweep", "report", "check", "cli"},
    "testing": LIBRARIES | {"testing"},  # for tests and benchmarks: nothing in the library imports it
}
PUBLIC_ONLY = CAPABILITIES | {"sweep", "report", "check"}  # reached from outside through the package alone


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) for every servelab import in the file; ``from servelab import x`` gives servelab.x."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("servelab.")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "servelab":
                out += [(node.lineno, f"servelab.{a.name}") for a in node.names]
            elif node.module.startswith("servelab."):
                out.append((node.lineno, node.module))
    return out


def problem(layer: str, module: str) -> str | None:
    """Why ``layer`` may not import ``module`` (None: it may)."""
    parts = module.split(".")
    target = parts[1]
    if target not in MAY_IMPORT[layer]:
        return f"{layer} may not import {target}"
    if target != layer and target in PUBLIC_ONLY and len(parts) > 2:
        return f"reach {target} through its package (from servelab.{target} import ...)"
    return None


def violations() -> list[str]:
    found: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if len(rel.parts) == 1:
            continue  # servelab/__init__.py, _version.py
        found += [f"{rel}:{line} imports {module}: {why}" for line, module in imports(path)
                  if (why := problem(rel.parts[0], module)) is not None]  # fmt: skip
    return found


def test_every_package_has_a_layer() -> None:
    packages = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert packages <= set(MAY_IMPORT), f"no layer for {sorted(packages - set(MAY_IMPORT))}"


def test_imports_go_down_the_layers_only() -> None:
    found = violations()
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("layer", "source", "bad"),
    [
        ("coexist", "from servelab.bench.runner import Target\n", True),
        ("coexist", "from servelab.bench import run_bench\n", True),
        ("check", "from servelab.coexist.probes import WorkerProbe\n", True),
        ("check", "from servelab.coexist import WorkerProbe\n", False),
        ("core", "def f():\n    from servelab.engines.client import api_base\n", True),
        ("report", "import servelab.cli.main\n", True),
        ("eval", "from servelab.load import Target\n", False),
    ],
)
def test_the_check_itself_catches_what_it_should(tmp_path: Path, layer: str, source: str, bad: bool) -> None:
    path = tmp_path / layer / "mod.py"
    path.parent.mkdir()
    path.write_text(source)
    ((_, module),) = imports(path)
    assert (problem(layer, module) is not None) is bad
