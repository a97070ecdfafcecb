"""Grid axes and points: what the user typed becomes exactly the points' flags, and bad input is said plainly."""

from __future__ import annotations

import math
import shlex
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servelab.core.errors import UsageError
from servelab.sweep import Grid, make_grid, parse_axis, parse_point, read_spec

value = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._:/", min_size=1, max_size=8)
flag = st.from_regex(r"--[a-z][a-z-]{0,12}[a-z]", fullmatch=True)


def test_an_axis_of_flag_values() -> None:
    axis = parse_axis("--max-num-batched-tokens 512,1024")
    assert (axis.name, axis.values, axis.kind) == ("--max-num-batched-tokens", ("512", "1024"), "flag")
    assert parse_axis("-np=1,2").values == ("1", "2")


def test_a_json_value_keeps_its_commas_and_dash_leaves_the_flag_out() -> None:
    grid = make_grid(['--speculative-config -,{"method":"ngram","num_speculative_tokens":15}'], [])
    points = grid.expand()
    assert [p.args for p in points] == [(), ("--speculative-config", '{"method":"ngram","num_speculative_tokens":15}')]


def test_a_bare_switch_is_off_then_on_and_env_goes_to_the_environment() -> None:
    grid = make_grid(["--enforce-eager", "VLLM_CPU_KVCACHE_SPACE=1,2"], [])
    points = grid.expand()
    assert [(p.args, p.env_dict()) for p in points] == [
        ((), {"VLLM_CPU_KVCACHE_SPACE": "1"}),
        ((), {"VLLM_CPU_KVCACHE_SPACE": "2"}),
        (("--enforce-eager",), {"VLLM_CPU_KVCACHE_SPACE": "1"}),
        (("--enforce-eager",), {"VLLM_CPU_KVCACHE_SPACE": "2"}),
    ]


def test_points_are_crossed_with_the_axes() -> None:
    grid = make_grid(["-np 1,2"], ["-c 4096", "LLAMA_ARG_THREADS=1 -c 8192"])
    assert [p.key for p in grid.expand()] == [
        "-c 4096 -np 1", "-c 4096 -np 2", "LLAMA_ARG_THREADS=1 -c 8192 -np 1", "LLAMA_ARG_THREADS=1 -c 8192 -np 2",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("axes", "points", "said"),
    [
        (["max-num-seqs 4,8"], [], "an axis is an engine flag"),
        (["--max-num-seqs 4,,8"], [], "empty value"),
        (['--hf-overrides {"a":1'], [], "unclosed"),
        (["-np 1,2", "-np 4"], [], "on two axes"),
        ([""], [], "wants a flag"),
        ([], ["some-model --max-num-seqs 4"], "neither NAME=VALUE nor a flag"),
        ([], ['--x "unclosed'], "cannot be split"),
    ],
)
def test_bad_input_is_refused_with_a_sentence(axes: list[str], points: list[str], said: str) -> None:
    with pytest.raises(UsageError, match=said):
        make_grid(axes, points)


@given(st.lists(st.tuples(flag, st.lists(value, min_size=1, max_size=3, unique=True)), min_size=1, max_size=3,
                unique_by=lambda a: a[0]))  # fmt: skip
def test_every_point_is_the_typed_values_and_nothing_else(axes: list[tuple[str, list[str]]]) -> None:
    """The product of the axes, each point's words exactly one value of each axis in order, each point once."""
    grid = make_grid([f"{name} {','.join(values)}" for name, values in axes], [])
    points = grid.expand()
    assert len(points) == math.prod(len(v) for _, v in axes)
    assert len({p.key for p in points}) == len(points)
    for p in points:
        words = list(p.args)
        assert [words[i] for i in range(0, len(words), 2)] == [name for name, _ in axes]
        assert all(words[2 * i + 1] in values for i, (_, values) in enumerate(axes))
        assert shlex.split(p.key) == words


@given(st.lists(value, min_size=1, max_size=4, unique=True))
def test_a_point_reads_back_as_typed(values: list[str]) -> None:
    text = " ".join(f"--f{i} {v}" for i, v in enumerate(values))
    assert parse_point(text).args == tuple(shlex.split(text))


def test_a_spec_file_gives_the_same_grid(tmp_path: Path) -> None:
    path = tmp_path / "sweep.toml"
    path.write_text(
        'engine = "llamacpp"\npoints = ["-c 4096"]\n[grid]\n"-np" = [1, 2]\n"--no-warmup" = [false, true]\n'
    )
    spec = read_spec(path)
    assert spec.engine == "llamacpp"
    assert spec.to_grid().expand() == Grid(make_grid(["-np 1,2", "--no-warmup"], ["-c 4096"]).axes,
                                           make_grid([], ["-c 4096"]).points).expand()  # fmt: skip


def test_a_misspelled_spec_key_is_refused_with_the_nearest(tmp_path: Path) -> None:
    path = tmp_path / "sweep.toml"
    path.write_text('engine = "vllm"\nconcurency = [1, 4]\n')
    with pytest.raises(UsageError, match="unknown key 'concurency'; did you mean 'concurrency'"):
        read_spec(path)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('engine = "vllm"\nconcurrency = [0]\n', "concurrency"),
        ('engine = "vllm"\nrequests = -5\n', "requests"),
        ('engine = "vllm"\nstart_timeout = -1\n', "start_timeout"),
        ('engine = "vllm"\nsessions = [2, 0]\n', "sessions"),
    ],
)
def test_a_spec_file_keeps_the_command_lines_ranges(tmp_path: Path, text: str, said: str) -> None:
    """A spec once let concurrency 0 and a negative start timeout through (every point then 'failed to start')."""
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=said):
        read_spec(path)


def test_a_spec_file_that_is_not_text_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "sweep.toml"
    path.write_bytes(b"\xd1\xff\x00garbage")
    with pytest.raises(UsageError, match="not a text file"):
        read_spec(path)


def test_one_configuration_spelled_two_ways_is_started_once() -> None:
    """Each point costs an engine start: the same settings however spelled are one point; different values, or a
    switch and its --no- form, stay two."""
    same = make_grid(["--max-num-seqs 4,04"], []).expand()  # read as vLLM reads it (int): one value
    assert [p.args for p in same] == [("--max-num-seqs", "4")]
    lengths = make_grid(["--max-model-len 32k,32000,32K"], []).expand()  # vLLM's 32k is 32,000; 32K 32,768
    assert [p.args for p in lengths] == [("--max-model-len", "32k"), ("--max-model-len", "32K")]
    kept = make_grid(["--revision 0712345,712345", "--seed 9007199254740993,9007199254740992"], []).expand()
    assert len(kept) == 4  # flags no reader knows: values as written
    spelled = make_grid([], ["--max-num-seqs=4", "--max_num_seqs 4", "-tp 2", "--tensor-parallel-size 2"]).expand()
    assert [p.args for p in spelled] == [("--max-num-seqs=4",), ("-tp", "2")]
    switches = make_grid([], ["--enforce-eager", "--no-enforce-eager", "-np -1", "-np 1"]).expand()
    assert len(switches) == 4


def test_a_point_that_sets_one_thing_twice_is_refused() -> None:
    with pytest.raises(UsageError, match="gives max_num_seqs twice"):
        make_grid(["--max-num-seqs 4,8"], ["--max-num-seqs 16"]).expand()
    repeated = make_grid([], ["--override-kv a=int:1 --override-kv b=int:2 -ot x=CPU -ot y=CPU"]).expand()
    assert len(repeated) == 1  # a flag the engine takes many times may repeat


def test_quotes_protect_a_values_commas_and_are_not_passed_on() -> None:
    axis = parse_axis("--tensor-split '3,1','1,1'")
    assert axis.values == ("3,1", "1,1")
    assert parse_axis('--speculative-config -,{"method":"ngram","num_speculative_tokens":4}').values[1].startswith("{")
