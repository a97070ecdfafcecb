"""The command line answers bad input with a message and an exit code, never a traceback."""

from pathlib import Path

import pytest

from servelab.cli import main
from servelab.core.records import RequestRecord
from servelab.core.store import RunStore


@pytest.mark.parametrize(
    ("argv", "code", "text"),
    [
        (["plan"], 2, "Missing argument"),
        (["no-such-command"], 2, "No such command"),
        (["report", "nope", "--store", "STORE"], 1, "no run 'nope'"),
        (["coexist", "--sharing", "mps:lots"], 2, "--sharing is"),
        (["coexist", "--conditions", "alone,loud"], 2, "unknown condition"),
        (["coexist", "--conditions", "alone,decode", "--store", "STORE"], 2, "need --target"),
        (["coexist", "--probe", "http"], 2, "needs --tts-url"),
        (["coexist", "--lookahead", "1,x"], 2, "--lookahead"),
        (["coexist", "--reference", "nope", "--store", "STORE"], 1, "no run 'nope'"),
        (["gateway", "--config", "STORE"], 2, "cannot read"),
        (["eval", "--suite", "nope", "--target", "x=http://h"], 2, "no eval suite 'nope'"),
        (["eval", "--suite", "quick"], 2, "needs at least one --target"),
        (["eval", "--needle-lengths", "ten", "--target", "x=http://h"], 2, "--needle-lengths"),
        (["bench", "--target", "x=http://h", "--slo-over", "speed", "--slo", "ttft=1s"], 2, "--slo-over"),
        (["bench", "--target", "x=http://h", "--sweep", "1,2", "--rate-sweep", "1"], 2, "not both"),
        (["bench", "--target", "x=http://h", "--slo", "ttft=1s", "--confirm"], 2, "--confirm tests"),
        (["runs", "show", "nope", "--store", "STORE"], 1, "no run 'nope'"),
        # infinity passes click's float ranges: each float option is checked (was an internal error at --rate inf)
        (["bench", "--target", "x=http://h", "--rate", "inf"], 2, "--rate wants a finite number"),
        (["bench", "--target", "x=http://h", "--duration", "1e999"], 2, "--duration wants a finite number"),
        (["bench", "--target", "x=http://h", "--duration", "-5"], 2, "--duration wants seconds above 0"),
        (["bench", "--target", "x=http://h", "--rate-sweep", "1,inf"], 2, "finite rates"),
        (["eval", "--target", "x=http://h", "--timeout", "inf"], 2, "--timeout wants a finite number"),
        (["coexist", "--settle", "inf"], 2, "--settle wants a finite number"),
        (["coexist", "--lookahead", "1,inf"], 2, "finite numbers"),
        (["engine", "up", "--timeout", "inf"], 2, "--timeout wants a finite number"),
    ],
)
def test_bad_input(argv: list[str], code: int, text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [str(tmp_path / "s.sqlite") if a == "STORE" else a for a in argv]
    assert main(argv) == code
    captured = capsys.readouterr()
    assert text in captured.err + captured.out
    assert "Traceback" not in captured.err


def test_runs_show_any_kind_of_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "s.sqlite"
    with RunStore(store) as db:
        run = db.create_run("bench", {})
        db.add_record(run, RequestRecord(request_id="r", endpoint="chat"))
        db.put_summary(run, "compare", {"rows": [], "warnings": []})
        db.finish_run(run)
    assert main(["runs", "show", "latest", "--store", str(store)]) == 0
    assert main(["runs", "list", "--store", str(store), "--json"]) == 0
    assert "compare" in capsys.readouterr().out


def test_check_refuses_a_bad_argument_before_any_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A typo in --gpu (or --context, --alongside, --skip) is said at once: no engine started, no run stored."""
    store = tmp_path / "s.sqlite"
    for bad, said in ((["--gpu", "h100-typo"], "unknown GPU"), (["--context", "lots"], "token count"),
                      (["--skip", "nothing"], "--skip takes")):  # fmt: skip
        argv = ["check", "--target", "x=http://127.0.0.1:9", "--store", str(store), *bad]
        assert main(argv) == 2
        assert said in capsys.readouterr().err
    assert not store.exists() or RunStore(store).list_runs() == []


def test_coexist_judges_against_a_reference_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CPU probe alone twice, the second judged against the first's "alone" (--reference latest): its run id
    is stored, and the voice's lateness is judged against the reference's (a single probe's figures included)."""
    import json

    store = str(tmp_path / "s.sqlite")
    argv = ["coexist", "--probe", "cpu", "--conditions", "alone", "--repeats", "1", "--utterances", "2"]
    argv += ["--chunks", "10", "--store", store, "--json"]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["conditions"][0]["meets"] is None  # its own alone: nothing to judge
    assert main([*argv, "--reference", "latest"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["reference"] == first["run_id"]
    assert "lateness max" in second["conditions"][0]["verdict"]  # 20 chunks: the largest, with its count, no p99
    assert "(n=20)" in second["conditions"][0]["verdict"]
