"""The README's `servelab plan` examples print what the README says they print."""

import shlex
from pathlib import Path

import pytest

from servelab.cli import main

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def examples() -> list[tuple[str, str]]:
    lines = README.splitlines()
    found = []
    for i, line in enumerate(lines[:-1]):
        if line.startswith("$ servelab plan "):
            found.append((line[2:], lines[i + 1]))
    return found


def test_the_readme_has_the_seed_examples() -> None:
    assert len(examples()) >= 4


@pytest.mark.parametrize(("command", "first_line"), examples())
def test_readme_plan_example(
    command: str, first_line: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    main(shlex.split(command)[1:])
    assert capsys.readouterr().out.splitlines()[0] == first_line
