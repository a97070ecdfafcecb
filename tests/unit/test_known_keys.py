"""No silent default: a key a config or spec file does not know is refused with the nearest one it does, for the
gateway's TOML (every section), here; the scenario, dataset, trace and task files in their own tests."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from servelab.cli import main
from servelab.core.errors import UsageError
from servelab.core.known_keys import nearest, refuse_near_misses, refuse_unknown, validate
from servelab.gateway.config import GatewayConfig, Keys, Policy, Server, State, Upstream, load_config

LOCAL = '[local]\nurl = "http://127.0.0.1:8000"\n'
SECTIONS: dict[str, type[BaseModel]] = {"policy": Policy, "server": Server, "state": State, "keys": Keys}


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.toml"
    path.write_text(text)
    return path


def test_the_misspelled_threshold_is_refused_with_the_right_key(tmp_path: Path) -> None:
    path = _write(tmp_path, LOCAL + "[policy]\nprefil_threshold_tokens = 1000\n")
    with pytest.raises(UsageError) as caught:
        load_config(path)
    said = str(caught.value)
    assert str(path) in said
    assert "unknown key 'policy.prefil_threshold_tokens'" in said
    assert "did you mean 'policy.prefill_threshold_tokens'?" in said


def test_the_gateway_command_says_it_and_starts_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, LOCAL + "[policy]\nprefil_threshold_tokens = 1000\n")
    assert main(["gateway", "--config", str(path)]) == 2
    said = " ".join(capsys.readouterr().err.split())  # the console wraps long lines
    assert "did you mean 'policy.prefill_threshold_tokens'?" in said and "Traceback" not in said


@pytest.mark.parametrize(
    ("toml", "unknown", "guess"),
    [
        ('hots = "0.0.0.0"\n' + LOCAL, "hots", "host"),
        ('[local]\nurl = "http://x:1"\nhealth_pth = "/h"\n', "local.health_pth", "local.health_path"),
        (LOCAL + '[extrnal]\nurl = "http://x:1"\n', "extrnal", "external"),
        (LOCAL + '[external]\nurl = "http://x:1"\napi_key_evn = "K"\n', "external.api_key_evn", "external.api_key_env"),
        (LOCAL + "[server]\nmax_header_byte = 4096\n", "server.max_header_byte", "server.max_header_bytes"),
        (LOCAL + '[state]\nbackend = "redis"\nredis_ulr = "redis://h"\n', "state.redis_ulr", "state.redis_url"),
        (LOCAL + '[keys]\nclient = ["k"]\n', "keys.client", "keys.clients"),
    ],
)
def test_every_section_refuses_a_misspelling(tmp_path: Path, toml: str, unknown: str, guess: str) -> None:
    with pytest.raises(UsageError, match=re.escape(f"unknown key '{unknown}'; did you mean '{guess}'")):
        load_config(_write(tmp_path, toml))


def test_a_key_like_nothing_known_is_refused_with_the_section_s_keys(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        load_config(_write(tmp_path, LOCAL + "[policy]\nzebra = 1\n"))
    assert "unknown key 'policy.zebra'" in str(caught.value) and "did you mean" not in str(caught.value)
    assert caught.value.hint is not None and "prefill_threshold_tokens" in caught.value.hint


def test_the_unknown_key_is_named_before_other_errors(tmp_path: Path) -> None:
    text = LOCAL + "[policy]\nprefil_threshold_tokens = 1000\nmin_hold_s = -1\n"
    with pytest.raises(UsageError, match="prefil_threshold_tokens"):
        load_config(_write(tmp_path, text))


def test_a_good_config_still_loads(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, LOCAL + "[policy]\nprefill_threshold_tokens = 1000\n"))
    assert config.policy.prefill_threshold_tokens == 1000


def _sections() -> list[tuple[str, str]]:
    pairs = [(name, key) for name, model in SECTIONS.items() for key in model.model_fields]
    pairs += [("local", key) for key in Upstream.model_fields if key != "url"]
    return pairs + [("", key) for key in GatewayConfig.model_fields if key not in ("local", *SECTIONS)]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(_sections()), st.data())
def test_any_key_with_one_letter_dropped_is_refused_and_found(pair: tuple[str, str], data: st.DataObject) -> None:
    """Whatever key, whatever letter: never taken silently, and the suggestion is the key the user meant."""
    section, key = pair
    at = data.draw(st.integers(0, len(key) - 1))
    typo = key[:at] + key[at + 1 :]
    body = f"{typo} = 1\n"
    text = (body + LOCAL) if not section else (f'[local]\nurl = "http://x:1"\n{body}' if section == "local" else
                                               f"{LOCAL}[{section}]\n{body}")  # fmt: skip
    with pytest.raises(UsageError) as caught:
        _toml(text)
    raise_where = str(caught.value)
    assert f"unknown key '{section + '.' if section else ''}{typo}'" in raise_where
    if len(key) >= 8:
        assert f"did you mean '{section + '.' if section else ''}{key}'" in raise_where


def _toml(text: str) -> GatewayConfig:
    return validate(GatewayConfig, tomllib.loads(text), "g.toml")


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=30))
def test_refuse_unknown_takes_exactly_the_known_keys(key: str) -> None:
    known = ("prompt", "max_tokens", "messages")
    if key in known:
        refuse_unknown({key: 1}, known, "f")
    else:
        with pytest.raises(UsageError, match=re.escape(f"f: unknown key '{key}'")):
            refuse_unknown({key: 1}, known, "f")


def test_near_misses_are_refused_other_keys_left_to_the_data() -> None:
    known = ("prompt", "max_tokens", "messages")
    refuse_near_misses({"prompt": "hi", "id": "x-1", "source": "logs"}, known, "data.jsonl:line 1")
    with pytest.raises(
        UsageError, match=re.escape("data.jsonl:line 2: unknown key 'max_token'; did you mean 'max_tokens'")
    ):
        refuse_near_misses({"prompt": "hi", "max_token": 5}, known, "data.jsonl:line 2")
    assert nearest("Max_Tokens_", known) == "max_tokens"


def test_every_settings_file_is_read_by_one_reader(tmp_path: Path) -> None:
    """The gateway's config, a session spec and a sweep spec: a file that is not there, not TOML (or JSON by its
    suffix), or not a table is said in one sentence naming it, by the one reader they share."""
    from servelab.core.known_keys import read_table
    from servelab.gateway.config import load_config
    from servelab.load.sessions import read_spec as read_session_spec
    from servelab.sweep import read_spec as read_sweep_spec

    bad = tmp_path / "bad.toml"
    bad.write_text("x = [")
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    for read in (load_config, read_session_spec, read_sweep_spec, read_table):
        with pytest.raises(UsageError, match=r"bad.toml is not valid TOML"):
            read(bad)
        with pytest.raises(UsageError, match=r"cannot read .*missing.toml"):
            read(tmp_path / "missing.toml")
    with pytest.raises(UsageError, match=r"list.json: the file holds a list, not a table"):
        read_table(listed)
