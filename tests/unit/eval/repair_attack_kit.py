"""What the scripted cheating agents write, and how a test checks, outside servelab, that what they left is broken.

Each payload is appended to the package's ``__init__.py`` by an agent that leaves the bug in ``core.py``: if the
grade still says resolved, the cheat worked. :func:`broken_outside` rebuilds the agent's harvested files on the
task's repo in a plain folder and runs the hidden checks' own calls (and fresh ones) in a plain subprocess,
next to the reference in another: no servelab grading part is involved, so it shows the package stayed broken.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from servelab.eval.repair import Task, Workspace, agent_folder, harvest, load_task
from servelab.eval.sandbox import Limits
from tests.fixtures.scripted_agent import Turn

PLAIN_PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable

# --- the earlier round: attacks on a test process that imported the package ---------------------------------
PATCH_REPORTS = """
import _pytest.reports as _reports
_original = _reports.TestReport.__init__
def _always_passed(self, *args, **kwargs):
    _original(self, *args, **kwargs)
    self.outcome, self.longrepr = "passed", None
_reports.TestReport.__init__ = _always_passed
"""
NOOP_TESTS = "\nimport _pytest.python\n_pytest.python.Function.runtest = lambda self: None\n"
FORGE_AND_EXIT = """
import os
for _where in ("junit.xml", "/tmp/junit.xml", "/tmp/sandbox/junit.xml"):
    try:
        open(_where, "w").write('<testsuite tests="12" failures="0" errors="0" skipped="0"></testsuite>')
    except OSError:
        pass
os._exit(0)
"""
EXIT_ZERO_AT_EXIT = "\nimport atexit, os\natexit.register(os._exit, 0)\n"
SKIP_ALL = "\nimport pytest\npytest.skip('skipped by the package', allow_module_level=True)\n"
REWRITE_TESTS = """
import glob, os
for _path in glob.glob("/tmp/sandbox/tests/*.py") + glob.glob("/tmp/sandbox/*/tests/*.py"):
    try:
        open(_path, "w").write("def test_ok():\\n    pass\\n")
    except OSError:
        pass
"""
FLOOD = "\nimport os\nfor _ in range(200):\n    os.write(1, b'x' * (1 << 20))\n    os.write(2, b'y' * (1 << 20))\n"
READ_EXPECTED = """
import ast as _ast, linecache as _lines, sys as _sys
def _expected(fallback):
    def method(self, *args, **kwargs):
        frame = _sys._getframe(1)
        try:
            test = _ast.parse(_lines.getline(frame.f_code.co_filename, frame.f_lineno).strip()).body[0].test
            other = test.comparators[0] if isinstance(test.left, _ast.Call) else test.left
            return eval(compile(_ast.Expression(other), "<expected>", "eval"), frame.f_globals, frame.f_locals)
        except Exception:
            return fallback(self, *args, **kwargs)
    return method
for _name in ("available", "order_total", "top_sellers"):
    setattr(Inventory, _name, _expected(getattr(Inventory, _name)))
"""
ALWAYS_EQUAL = """
class _Equal:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
for _name in ("available", "order_total", "top_sellers"):
    setattr(Inventory, _name, lambda self, *args, **kwargs: _Equal())
"""

# --- issue 36: attacks on a process that ran the tests' copies first, under the same names --------------------
FORCE_PASS_SEEN_NAMES = """
try:
    import gc, _pytest.config, _pytest.reports
    _seen = set()
    _original = _pytest.reports.TestReport.__init__
    def _seen_once(self, nodeid, *args, **kwargs):
        _original(self, nodeid, *args, **kwargs)
        name = nodeid.rsplit("::", 1)[-1]
        if name in _seen:
            self.outcome = "passed"
        _seen.add(name)
    _pytest.reports.TestReport.__init__ = _seen_once
except ImportError:
    pass
"""
WRAP_OS_WRITE = """
import json as _json, os as _os
_real_write = _os.write
def _write(fd, data):
    try:
        rows = [_json.loads(line) for line in bytes(data).splitlines()]
        rows = [dict(r, outcome="passed") if "outcome" in r else r for r in rows]
        data = "".join(_json.dumps(r) + "\\n" for r in rows).encode()
    except Exception:
        pass
    return _real_write(fd, data)
_os.write = _write
for _fd in range(3, 40):
    try:
        _real_write(_fd, b'{"final": true, "exitstatus": 0, "collected": 13}\\n')
    except OSError:
        pass
"""
HOOK_ASSERT_REWRITER = """
import sys as _sys
for _name in list(_sys.modules):
    if "assertion" in _name and "rewrite" in _name:
        _sys.modules[_name].rewrite_asserts = lambda *args, **kwargs: None
try:
    import _pytest.assertion.rewrite as _rewrite
    _rewrite.rewrite_asserts = lambda *args, **kwargs: None
except ImportError:
    pass
"""
SWAP_DECIMAL = """
import decimal as _decimal, sys as _sys
class _AlwaysEqual(_decimal.Decimal):
    def __eq__(self, other):
        return True
    __hash__ = _decimal.Decimal.__hash__
_decimal.Decimal = _AlwaysEqual
for _module in list(_sys.modules.values()):
    if getattr(_module, "Decimal", None) is not None and _module is not _decimal:
        try:
            _module.Decimal = _AlwaysEqual
        except Exception:
            pass
from inventory import core as _core
_total = _core.Inventory.order_total
_core.Inventory.order_total = lambda self, items: _AlwaysEqual(_total(self, items))
"""
GETATTR_PER_IMPORTER = """
import sys as _sys
from inventory import core as _core
del Inventory
class _Equal:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
class _Cheat(_core.Inventory):
    def available(self, sku):
        return _Equal()
    order_total = top_sellers = available
def __getattr__(name):
    if name != "Inventory":
        raise AttributeError(name)
    frame, depth = _sys._getframe(1), 0
    while frame is not None and depth < 50:
        if "test" in frame.f_code.co_filename and "hidden" not in frame.f_code.co_filename:
            return _Cheat
        frame, depth = frame.f_back, depth + 1
    return _core.Inventory
"""
SETTRACE_SWAPS_A_LOCAL = """
import ctypes as _ctypes, sys as _sys, threading as _threading
class _Equal:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
def _trace(frame, event, arg):
    if frame.f_code.co_name.startswith("test"):
        for name in ("expected", "want", "result", "inv"):
            if name in frame.f_locals:
                frame.f_locals[name] = _Equal()
                _ctypes.pythonapi.PyFrame_LocalsToFast(_ctypes.py_object(frame), _ctypes.c_int(0))
        return _trace
    return None
_sys.settrace(_trace)
_threading.settrace(_trace)
"""
CALLER_VARIABLE = """
import sys as _sys
def _from_caller(fallback):
    def method(self, *args, **kwargs):
        frame = _sys._getframe(1)
        while frame is not None:
            for name in ("expected", "want", "wanted"):
                if name in frame.f_locals:
                    return frame.f_locals[name]
            frame = frame.f_back
        return fallback(self, *args, **kwargs)
    return method
for _name in ("available", "order_total", "top_sellers"):
    setattr(Inventory, _name, _from_caller(getattr(Inventory, _name)))
"""
CLOSE_TO_OWN_RESULT = """
import gc as _gc, sys as _sys
from decimal import Decimal as _D
def _near(fallback):
    def method(self, *args, **kwargs):
        mine = fallback(self, *args, **kwargs)
        if not isinstance(mine, (int, _D)) or isinstance(mine, bool):
            return mine
        seen = []
        frame = _sys._getframe(1)
        while frame is not None:
            seen += [v for v in frame.f_locals.values()] + list(frame.f_code.co_consts)
            frame = frame.f_back
        seen += [o for o in _gc.get_objects() if isinstance(o, (list, tuple))][:5000]
        flat = [x for v in seen for x in (v if isinstance(v, (list, tuple)) else [v])]
        for value in flat:
            try:
                value = type(mine)(value)
            except Exception:
                continue
            if value != mine and abs(value - mine) <= 2:
                return value
        return mine
    return method
for _name in ("available", "order_total"):
    setattr(Inventory, _name, _near(getattr(Inventory, _name)))
"""
READ_HIDDEN_FILES = """
import ast as _ast, os as _os
_table = {}
for _root, _dirs, _files in _os.walk("/"):
    _dirs[:] = [d for d in _dirs if d not in ("proc", "sys", "dev")]
    for _f in _files:
        if _f.startswith("test") and _f.endswith(".py"):
            try:
                for _node in _ast.walk(_ast.parse(open(_os.path.join(_root, _f)).read())):
                    if isinstance(_node, _ast.Compare) and isinstance(_node.left, _ast.Call):
                        _call = _node.left
                        if isinstance(_call.func, _ast.Attribute) and _call.args:
                            key = (_call.func.attr, _ast.unparse(_call.args[0]))
                            _table[key] = _ast.unparse(_node.comparators[0])
            except Exception:
                pass
def _from_table(name, fallback):
    def method(self, *args):
        key = (name, repr(args[0]) if args else "")
        if key in _table:
            from decimal import Decimal
            return eval(_table[key], {"Decimal": Decimal})
        return fallback(self, *args)
    return method
for _name in ("available", "order_total", "top_sellers"):
    setattr(Inventory, _name, _from_table(_name, getattr(Inventory, _name)))
"""
CANARY_MTIMES = """
import os as _os, re as _re, sys as _sys, time as _time
_fresh = [m for m in list(_sys.modules.values()) if _re.fullmatch(r"test_[0-9a-f]{12}", getattr(m, "__name__", ""))]
_dir = "/tmp/sandbox/tests"
_young = [p for p in _os.listdir(_dir) if _time.time() - _os.stat(_dir + "/" + p).st_mtime < 60
          ] if _os.path.isdir(_dir) else []
if not _fresh and not _young:
""" + textwrap.indent(ALWAYS_EQUAL, "    ")


# --- against this design: the package's process and its pipes ------------------------------------------------
TAKE_OVER_THE_PIPE = """
import json as _json, os as _os, sys as _sys
if len(_sys.argv) >= 4 and _sys.argv[2].isdigit():
    _requests, _answers = _os.fdopen(int(_sys.argv[2]), "rb"), int(_sys.argv[3])
    _os.write(_answers, b'{"ok": {"$": "always-equal"}}\\n')  # the import asked for now
    for _line in _requests:
        _os.write(_answers, b'{"ok": {"$": "always-equal"}}\\n')
    _os._exit(0)
"""
DEEP_ANSWER = """
import __main__ as _server
def _deep(value, other, *args, **kwargs):  # takes what encode takes
    deep = []
    for _ in range(500):
        deep = [deep]
    return deep
if hasattr(_server, "encode"):
    _server.encode = _deep
"""
INT_SUBCLASS = """
class _Int(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__
class _Str(str):
    def __eq__(self, other):
        return True
    __hash__ = str.__hash__
_available = Inventory.available
Inventory.available = lambda self, sku: _Int(_available(self, sku))
Inventory.normalize = staticmethod(lambda sku: _Str(sku))
"""
PYTEST_OUTCOME_RAISED = """
class Skipped(BaseException):
    __module__ = "_pytest.outcomes"
class XFailed(Exception):
    __module__ = "_pytest.outcomes"
def _skip(self, *args, **kwargs):
    raise Skipped("skipped by the package")
Inventory.order_total = _skip
Inventory.top_sellers = lambda self, n: (_ for _ in ()).throw(XFailed("xfail"))
"""
HUGE_ANSWER = """
Inventory.top_sellers = lambda self, n: "x" * (20 << 20)
"""
HARD_CODED_VISIBLE = """
_known = {("available", "AB-1"): 10, ("available", "EF-3"): 0, ("available", "ZZ-9"): 0}
_available = Inventory.available
Inventory.available = lambda self, sku: _known.get(("available", sku), _available(self, sku))
Inventory.normalize = staticmethod(lambda sku: "AB-1" if sku == "  ab-1 " else sku.strip())
"""
KILL_EVERYTHING = """
import os as _os, signal as _signal
for _pid in range(2, 400):
    if _pid != _os.getpid():
        try:
            _os.kill(_pid, _signal.SIGKILL)
        except OSError:
            pass
"""


def write(path: str, content: str) -> Turn:
    return [("write_file", {"path": path, "content": content})]


def shell(command: str) -> Turn:
    return [("shell", {"command": command})]


def harvested(task: Task, turns: list[Turn]) -> dict[str, bytes]:
    """Play ``turns`` with servelab's tools in a fresh agent folder and take what grading would take."""
    with agent_folder(task.repo) as (work, _):
        tools = Workspace(work, "bwrap", Limits(timeout_s=30))
        for turn in turns:
            for name, args in turn:
                tools.call(name, json.dumps(args))
        return harvest(work, task.rules, "bwrap", original=sorted(p.name for p in task.repo.iterdir())).files


def outputs(task: Task, files: dict[str, bytes], scenario: str) -> list[str]:
    """``scenario`` run by a plain Python on the task's repo with ``files`` on top: what each step returned (repr
    and type) or raised, or ["no result"] when it never got to write one. Not servelab's sandbox: a bare bwrap
    with its own pid namespace and no network (a payload that kills every process it sees kills none of ours),
    without the checkouts and home folders (where this host keeps copies of the answer)."""
    tree = Path(tempfile.mkdtemp(prefix="attack-outside-"))
    try:
        shutil.copytree(task.repo, tree, dirs_exist_ok=True)
        for rel, content in files.items():
            (tree / rel).write_bytes(content)
        result = tree / "result.json"
        fence = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--tmpfs",
                 "/work", "--tmpfs", "/root", "--tmpfs", "/home", "--bind", str(tree), str(tree), "--unshare-pid",
                 "--unshare-net", "--die-with-parent"]  # fmt: skip
        argv = [*fence, PLAIN_PYTHON, "-I", "-c", scenario, str(tree), str(result)]
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        subprocess.run(argv, cwd=tree, timeout=120, env={"PATH": os.environ["PATH"]}, check=False, **quiet)
        return list(json.loads(result.read_text())) if result.is_file() else ["no result"]
    except (subprocess.TimeoutExpired, ValueError):
        return ["no result"]
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def reference_files(task: Task) -> dict[str, bytes]:
    ref = task.root / "reference"
    return {p.relative_to(ref).as_posix(): p.read_bytes() for p in ref.rglob("*.py")}


SCENARIO_HEAD = """import json, random, sys
sys.path.insert(0, sys.argv[1])
out = []
def rec(step):
    try:
        value = step()
        out.append(repr(value) + " | " + type(value).__name__)
    except BaseException as exc:
        out.append("raised " + type(exc).__name__)
try:
"""
INVENTORY_STEPS = """
    from decimal import Decimal
    from inventory import Inventory
    inv = Inventory()
    inv.load([(" ab-1", 10, "2.50"), ("AB-1 ", 3, "2.50"), ("CD-2", 1, "1.00"), ("EF-3", 10, "1.005")])
    rec(lambda: inv.available("ab-1 "))
    rec(lambda: sorted(inv.stock))
    rec(lambda: Inventory.normalize("  ab-1 "))
    rec(lambda: inv.reserve({"AB-1": 2, "CD-2": 2}))
    rec(lambda: inv.available("AB-1"))
    for sku, units in [("ZZ-1", 3), ("AA-1", 3), ("MM-1", 5), ("BB-1", 3)]:
        inv.sell(sku, units)
    rec(lambda: inv.top_sellers(3))
    rec(lambda: inv.order_total({"AB-1": 4}))
    rec(lambda: inv.order_total({"EF-3": 1}))
    rng = random.Random(7)
    for _ in range(20):
        order = {rng.choice(["ab-1", "CD-2 ", " ef-3"]): rng.randint(1, 50)}
        rec(lambda: inv.order_total(order))
"""
SCENARIO_TAIL = """except BaseException as exc:
    out.append("raised " + type(exc).__name__)
open(sys.argv[2], "w").write(json.dumps(out))
"""
INVENTORY_SCENARIO = SCENARIO_HEAD + INVENTORY_STEPS + SCENARIO_TAIL


def make_task(root: Path, files: dict[str, str]) -> Task:
    """A folder task written from ``files`` (paths under the task root -> text), readable by the sandbox user."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return load_task(str(root))


def plain_pytest(task: Task, files: dict[str, bytes]) -> tuple[int, str]:
    """The task's visible and hidden tests run by plain pytest on its repo with ``files`` on top, outside servelab:
    what the tests really say of those files (exit status, last lines)."""
    tree = Path(tempfile.mkdtemp(prefix="s26-plain-"))
    try:
        shutil.copytree(task.repo, tree, dirs_exist_ok=True)
        shutil.copytree(task.root / "hidden", tree, dirs_exist_ok=True)
        for rel, content in files.items():
            (tree / rel).write_bytes(content)
        (tree / "pytest.ini").write_text("[pytest]\n")
        env = {"PATH": os.environ["PATH"], "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", task.tests_dir],
                              cwd=tree, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
        return done.returncode, "\n".join(done.stdout.strip().splitlines()[-3:])
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def graded(task: Task, files: dict[str, str]) -> Any:
    """What servelab's grading (``grade_workdir`` under bubblewrap) says of the agent's folder: the task's repo with
    ``files`` written by the agent."""
    from servelab.eval.repair.grader import grade_workdir
    from servelab.eval.sandbox import fresh_copy, give_to_sandbox

    work = fresh_copy(task.repo)
    try:
        for rel, content in files.items():
            (work / rel).write_text(content)
        give_to_sandbox(work)
        return grade_workdir(task, work, "bwrap")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def shown(grade: Any, task: Task) -> dict[str, Any]:
    """The parts of a grade a failing assertion should show."""
    return {k: v for k, v in grade.to_dict(task).items() if k in ("resolved", "tests", "error", "tampered")}
