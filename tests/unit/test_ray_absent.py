"""Without Ray: the one-host path is unchanged and never imports it; `--ray` says how to get Ray, or a cluster, in a
sentence (exit 2), never a traceback. Run in a fresh interpreter where importing ``ray`` fails, as on an install
without the extra, against the truth sink (the FAKE SSE server of servelab.testing, not an LLM)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from servelab.testing import free_port

SINK = "from servelab.testing.sse_server import main; main()"

BLOCKED = """
import importlib.abc, json, sys
tried = []
class NoRay(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            tried.append(name)
            raise ImportError(f"No module named {name!r}")
        return None
sys.meta_path.insert(0, NoRay())

from dataclasses import replace
from pathlib import Path
from servelab.bench import Load, run_bench
from servelab.cli import main
from servelab.core.store import RunStore
from servelab.load import Target
from servelab.load.scenarios import load_scenario

url, folder = sys.argv[1], Path(sys.argv[2])
scenario = replace(load_scenario("code-chat"), concurrency=4)
load = Load(requests=12, warmup=1, max_tokens=6, fixed_output="off", workers=2)
result = run_bench(RunStore(folder / "runs.sqlite"), [Target("sink", url, "sink")], [scenario], load)
(step,) = result.stored.steps
one_host = {"records": len(result.records), "ok": all(r.ok for r in result.records),
            "workers": [c.worker for c in step.clients], "tried": list(tried)}
code = main(["bench", "--target", f"sink={url}", "--ray", "auto", "--store", str(folder / "cli.sqlite")])
print(json.dumps({"one_host": one_host, "cli_exit": code, "tried": tried}))
"""


@pytest.fixture()
def sink_url() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SINK, "0", "--sink", "6", "2", "1"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    yield f"http://127.0.0.1:{port}"
    proc.kill()
    proc.wait(timeout=10)


def test_without_ray_the_one_host_path_runs_and_ray_says_how_to_get_it(sink_url: str, tmp_path: Path) -> None:
    got = subprocess.run([sys.executable, "-c", BLOCKED, sink_url, str(tmp_path)], capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert got.returncode == 0, got.stderr[-3000:]
    out = json.loads(got.stdout.strip().splitlines()[-1])
    one_host = out["one_host"]
    assert one_host == {"records": 12, "ok": True, "workers": [0, 1], "tried": []}  # two processes, no Ray asked
    assert out["cli_exit"] == 2 and out["tried"]  # --ray asked for it, and was refused in a sentence:
    assert "--ray needs Ray, which is not installed" in got.stderr
    assert "pip install 'servelab[ray]'" in got.stderr and "Traceback" not in got.stderr


def test_no_cluster_at_the_address_is_said_at_once() -> None:
    pytest.importorskip("ray", reason="with Ray missing, --ray says so first (the test above)")
    from servelab.load.cluster import RayUnavailable, connect

    address = f"127.0.0.1:{free_port()}"
    with pytest.raises(RayUnavailable, match="no Ray cluster reachable") as caught:
        connect(address)
    assert caught.value.hint is not None and "ray start --head" in caught.value.hint
    with pytest.raises(RayUnavailable, match="auto or HOST:PORT"):
        connect("not-an-address")
