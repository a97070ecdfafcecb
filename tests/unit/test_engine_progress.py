"""`engine up` is never silent while the engine starts: a line says what starts and where its log is, the spinner
(or, without a terminal, a line at once and then every PROGRESS_LINE_S) carries the engine's own last log line;
`engine status` shows the llama.cpp server beside vLLM. The engine here is a real process that logs, waits and then
answers /health, started and stopped through the embedded engine's own contract (not vLLM: its start takes minutes)."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest
from rich.console import Console

from servelab.cli import engine as engine_cli
from servelab.cli import main
from servelab.cli._common import using_console
from servelab.engines.embedded import EmbeddedEngine, EngineSettings
from servelab.engines.llamacpp import llamacpp_settings
from servelab.testing.net import free_port

SLOW_SERVER = """
import http.server, sys, time
print("loading the weights of the stand-in", flush=True)
time.sleep(4)
print("serving", flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


class SlowEngine(EmbeddedEngine):
    """A process that logs a phase, takes four seconds, then answers /health: what a slow engine start looks like."""

    label = "stand-in"

    def _check_installed(self) -> None:
        return None

    def ensure_model(self, progress: object = None) -> Path:
        return self.settings.engine_dir

    def _command(self) -> list[str]:
        return [sys.executable, "-c", SLOW_SERVER, str(self.settings.port)]


def test_a_slow_start_says_what_it_is_doing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_cli, "PROGRESS_LINE_S", 0.0)  # a line at every poll: the test need not wait 15 s
    engine = SlowEngine(EngineSettings(port=free_port(), home=tmp_path, log_name="stand-in.log"))
    out = Console(width=120, record=True, file=io.StringIO(), color_system=None)  # not a terminal: a pipe, a log
    try:
        with using_console(out):
            state = engine_cli.start_with_progress(engine)
        text = out.export_text()
    finally:
        engine.down()
    assert state.url == engine.settings.url
    first = text.splitlines()[0]
    assert first.startswith(f"starting the embedded stand-in on {engine.settings.url}")
    assert str(engine.settings.log_path) in " ".join(text.split())
    assert "s: starting stand-in: loading the weights of the stand-in" in text  # the engine's own words


def test_status_shows_llamacpp_beside_vllm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SERVELAB_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["engine", "status"]) == 1  # neither runs
    said = capsys.readouterr().out
    assert "vllm: not running" in said and "llamacpp: not running" in said
    settings = llamacpp_settings()
    settings.engine_dir.mkdir(parents=True)
    state = {"pid": os.getpid(), "url": settings.url, "model": "m", "log": str(settings.log_path), "started_at": 0.0}
    settings.state_path.write_text(json.dumps(state))  # a live pid: this process stands for a running server
    assert main(["engine", "status"]) == 0
    said = capsys.readouterr().out
    assert "vllm: not running" in said and f"llamacpp: running: {settings.url}" in said
    assert main(["engine", "status", "--json"]) == 0
    both = json.loads(capsys.readouterr().out)
    assert both["vllm"] == {"running": False} and both["llamacpp"]["pid"] == os.getpid()
    assert main(["engine", "status", "--engine", "vllm"]) == 1  # one engine asked: as before
