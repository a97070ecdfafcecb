"""The offline halves of the H200 bench-at-scale scripts (benchmarks/gpu/): how a folder's runs are named against
vLLM's access log when a step was confirmed with more load processes, and how stored evidence is judged as if the
server ran on another host. Inputs are small files in the shape those runs write (docs/data/h200-scale-*)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

GPU = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"


def _script(name: str) -> ModuleType:
    sys.path.insert(0, str(GPU))  # api_balance.py is imported by its neighbours by name
    try:
        spec = importlib.util.spec_from_file_location(f"gpu_{name}", GPU / f"{name}.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(GPU))


def _access(server: int, port: int, path: str) -> str:
    return f'(ApiServer_{server} pid=1) INFO:     127.0.0.1:{port} - "POST {path} HTTP/1.1" 200 OK'


def _block(spread: list[int], port: int) -> list[str]:
    """One run's generation POSTs (``spread[k]`` on API server k), after the probe each tool sends first."""
    lines = ['(ApiServer_0 pid=1) INFO:     127.0.0.1:1 - "GET /v1/models HTTP/1.1" 200 OK']
    for server, n in enumerate(spread):
        lines += [_access(server, port + i, "/v1/chat/completions") for i in range(n)]
    return lines


def test_a_confirmed_steps_second_run_has_its_own_access_log_block(tmp_path: Path) -> None:
    """CONFIRM=1 runs a client verdict's step twice: the second run's block is named for it, so the runs after it
    keep their own blocks (before, every later run took its predecessor's block)."""
    runs = [("servelab-x1-c64", {"relieved": {"side": "client"}}), ("servelab-x4-c64", {}), ("vllm-c64", None)]
    spreads = [[60, 20, 10, 10], [40, 30, 20, 10], [25, 25, 25, 25], [70, 10, 10, 10]]
    lines: list[str] = []
    for i, spread in enumerate(spreads):
        lines += _block(spread, 1000 * (i + 1))
    (tmp_path / "serve.log").write_text("\n".join(lines) + "\n")
    (tmp_path / "api-servers").write_text("4\n")
    (tmp_path / "step.log").write_text("".join(json.dumps({"name": n}) + "\n" for n, _ in runs))
    for name, verdict in runs:
        if verdict is not None:
            (tmp_path / f"{name}.json").write_text(json.dumps({"bottleneck": verdict}))

    shares = _script("api_balance").busiest_share(tmp_path)

    assert shares == {
        "servelab-x1-c64": 0.6, "servelab-x1-c64 (confirm)": 0.4, "servelab-x4-c64": 0.25, "vllm-c64": 0.7,
    }  # fmt: skip


def test_judged_from_another_host_the_servers_own_cpu_counter_stays() -> None:
    """--remote drops what /proc showed of the server here, but a step that kept the server's own CPU counter
    (vLLM's process_cpu_seconds_total for its one API server) is still judged from it; one that did not keep it
    has no frontend CPU unless --counter lets the /proc figure stand in."""
    verdicts = _script("verdicts")
    on_host = {"frontend_cpu_from": "server", "frontend_processes": 1, "frontend_cpu_max": 1.02,
               "frontend_cpu_mean": 1.02, "frontend_cpu_host_max": 1.03, "frontend_cpu_reported": 1.02,
               "engine_held_share": 0.3}  # fmt: skip
    remote = verdicts.as_remote(on_host, "1", counter=False)
    assert remote["frontend_cpu_max"] == 1.02 and remote["frontend_cpu_from"] == "server"
    assert "frontend_cpu_host_max" not in remote

    older = {"frontend_cpu_from": "host", "frontend_processes": 1, "frontend_cpu_max": 0.97,
             "frontend_cpu_mean": 0.97, "engine_held_share": 0.3}  # fmt: skip
    assert "frontend_cpu_max" not in verdicts.as_remote(older, "1", counter=False)
    assert verdicts.as_remote(older, "1", counter=True)["frontend_cpu_max"] == 0.97
    assert "frontend_cpu_max" not in verdicts.as_remote(older, "4", counter=True)  # several API servers: no counter
