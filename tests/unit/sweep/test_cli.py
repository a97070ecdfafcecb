"""Bad input to `servelab sweep` is said in a sentence with exit 2, before any engine starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from servelab.cli import main


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([], "needs at least one --grid axis or --point"),
        (["--grid", "max-num-seqs 4"], "an axis is an engine flag"),
        (["--grid", "-np 1", "--engine", "vlm"], "unknown engine 'vlm'"),
        (["--grid", "-np 1", "--concurrency", "1,x"], "whole numbers separated by commas"),
        (["--grid", "-np 1", "--gpu", "h100-80"], "h100-80"),
        (["--grid", "-np 1", "--model", "/no/such/model"], "no such file or folder"),
        (["--grid", "-np 1", "--resume", "x"], "--resume goes on with the stored run's own settings"),
        (["--grid", "-np 1", "--temperature", "-1"], "'--temperature': Input should be greater than or equal to 0"),
    ],
)
def test_bad_input_is_refused_before_anything_starts(
    args: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sweep", "--store", str(tmp_path / "runs.sqlite"), *args]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


def test_a_spec_temperature_out_of_range_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text('points = ["-np 1"]\ntemperature = 9\n')
    assert main(["sweep", "--store", str(tmp_path / "runs.sqlite"), "--spec", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "temperature" in err and "less than or equal to 2" in err and "Traceback" not in err


@pytest.mark.parametrize(("suite", "said"), [("code", "needs a sandbox"), ("nonsense", "no such suite")])
def test_an_eval_a_sweep_cannot_run_is_refused_before_any_engine_starts(
    suite: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["sweep", "--engine", "llamacpp", "--grid", "-np 1", "--eval", suite, "--store", str(tmp_path / "s.sqlite")]
    assert main(argv) == 2
    assert said in capsys.readouterr().err
