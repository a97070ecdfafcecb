"""The user's own engine flags: read for memory, kept verbatim, completed on the printed command line."""

import gzip
import shlex
from pathlib import Path

import pytest

from servelab.cli import main
from servelab.core.errors import UsageError
from servelab.plan import PlanRequest, make_plan, parse_engine_args, resolve_model, with_engine_args
from servelab.plan.engine_args import engine_args_from_log, human_int

ROOT = Path(__file__).resolve().parents[3]
GIB = 2**30


def test_human_readable_numbers_as_vllm_reads_them() -> None:
    assert (human_int("32k"), human_int("32K"), human_int("20G"), human_int("8192")) == (32000, 32768, 20 * GIB, 8192)
    with pytest.raises(UsageError):
        human_int("1.5K")


def test_every_memory_flag_is_read_and_the_rest_kept() -> None:
    args = parse_engine_args(
        "vllm serve org/model --max-model-len 64K -tp 2 --kv-cache-dtype=fp8 --enforce-eager "
        "--gpu-memory-utilization 0.85 --max-num-seqs 8 --max-num-batched-tokens 4096 --block-size 32 "
        "--mamba-ssm-cache-dtype float32 --served-model-name coder --enable-prefix-caching"
    )
    assert args.given() == {
        "model": "org/model", "max_model_len": 65536, "tensor_parallel_size": 2, "kv_cache_dtype": "fp8",
        "enforce_eager": True, "gpu_memory_utilization": 0.85, "max_num_seqs": 8, "max_num_batched_tokens": 4096,
        "block_size": 32, "mamba_ssm_cache_dtype": "float32", "enable_prefix_caching": True,
    }  # fmt: skip
    completed = args.completed([("--max-model-len", "1"), ("--max-num-seqs", "1"), ("--swap-space", "4")])
    assert completed[-2:] == ["--swap-space", "4"] and "--served-model-name" in completed
    assert completed.count("--max-model-len") == 1 and completed.count("64K") == 1  # theirs, not the plan's
    assert "1" not in completed


def test_bad_flags_are_clear_errors() -> None:
    with pytest.raises(UsageError, match="--max-model-len needs a value"):
        parse_engine_args("--max-model-len")
    with pytest.raises(UsageError, match="tensor-parallel-size"):
        parse_engine_args("--tensor-parallel-size two")
    with pytest.raises(UsageError, match="cannot be split"):
        parse_engine_args("--served-model-name 'open")


def test_sglang_and_llamacpp_spellings() -> None:
    sglang = parse_engine_args("--context-length 32768 --mem-fraction-static 0.8 --tp 2", "sglang")
    assert (sglang.max_model_len, sglang.gpu_memory_utilization, sglang.tensor_parallel_size) == (32768, 0.8, 2)
    llama = parse_engine_args("-c 65536 -np 4 -ctk q8_0", "llamacpp")
    assert (llama.max_model_len, llama.max_num_seqs, llama.kv_cache_dtype) == (65536, 4, "q8_0")


def test_the_flags_change_the_plan() -> None:
    resolved = resolve_model("llama-3.1-8b")
    base = PlanRequest(gpu_name="h200", gpu_bytes=140 * GIB, bandwidth_gbs=None, context=8192, concurrency=1,
                       quant=None, kv_dtype="auto")  # fmt: skip
    plain = make_plan(resolved, base)
    tp2 = make_plan(resolved, with_engine_args(base, parse_engine_args("-tp 2 --kv-cache-dtype fp8 --enforce-eager")))
    assert tp2.weights.bytes == pytest.approx(plain.weights.bytes / 2, rel=0.01)
    assert tp2.kv_bytes_per_token == plain.kv_bytes_per_token / 2  # fp8, the bytes of one token on all layers
    assert tp2.overhead_parts["cudagraphs"] == 0
    assert "--tensor-parallel-size 2" not in tp2.command and "-tp 2" in tp2.command


def test_a_log_brings_its_own_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = ROOT / "docs/data/h200-capacity-2026-12-01/llama8b-e2k.log.gz"
    with gzip.open(log, "rt") as handle:
        text = handle.read()
    args = engine_args_from_log(text)
    assert args is not None and (args.max_num_batched_tokens, args.enforce_eager) == (2048, True)
    main(shlex.split(f"plan {ROOT / 'benchmarks/gpu/models/llama-3.1-8b'} --gpu h200 --calibrate {log} --json"))
    out = capsys.readouterr().out
    assert "--max-num-batched-tokens 2048" in out and "--enforce-eager" in out  # the printed command is the log's


def test_hf_overrides_change_the_architecture_planned() -> None:
    """--hf-overrides as vLLM applies it: a chunk size of 0 turns Llama-4's chunked local attention off,
    so every layer holds the whole context and fewer tokens fit."""
    model = str(ROOT / "benchmarks/gpu/models/llama-4-scout-16l")
    args = parse_engine_args(f"vllm serve {model} --hf-overrides '{{\"attention_chunk_size\": 0}}'")
    assert args.config_overrides() == {"attention_chunk_size": 0}
    assert "--hf-overrides" in args.tokens  # kept on the printed command line
    base = PlanRequest(gpu_name="h200", gpu_bytes=141 * GIB, bandwidth_gbs=None, context=32768, concurrency=1,
                       quant=None, kv_dtype="auto")  # fmt: skip
    req = with_engine_args(base, args)
    chunked = make_plan(resolve_model(model), req)
    overridden = resolve_model(model, args.config_overrides())
    full = make_plan(overridden, req)
    assert full.capacity.tokens < 0.7 * chunked.capacity.tokens
    assert "--hf-overrides" in overridden.spec.source


def test_hf_overrides_update_nested_configs_and_replace_the_rest() -> None:
    from servelab.plan.resolve import apply_overrides

    config = {"text_config": {"a": 1, "b": 2}, "rope_scaling": {"type": "yarn", "factor": 4}, "x": 1}
    out = apply_overrides(config, {"text_config": {"b": 3}, "rope_scaling": {"factor": 8}, "y": [1]})
    assert out == {"text_config": {"a": 1, "b": 3}, "rope_scaling": {"factor": 8}, "x": 1, "y": [1]}
    assert config["text_config"] == {"a": 1, "b": 2}  # the input is left as it was


@pytest.mark.parametrize("bad", ["'{not json'", "'[1, 2]'", "'3'"])
def test_hf_overrides_must_be_a_json_object(bad: str) -> None:
    with pytest.raises(UsageError, match="--hf-overrides"):
        parse_engine_args(f"--hf-overrides {bad}")


def test_a_logs_hf_overrides_are_read_back() -> None:
    log = ROOT / "docs/data/h200-capacity-2026-12-01/llama4-nochunk-e8k.log.gz"
    with gzip.open(log, "rt") as handle:
        args = engine_args_from_log(handle.read())
    assert args is not None and args.config_overrides() == {"attention_chunk_size": 0}
    assert "--hf-overrides" in args.tokens


@pytest.mark.parametrize(
    "flags",
    [
        "--max-model-len 0", "--max-model-len -1", "--max-model-len 0.5", "--max-model-len 1e999", "-tp 0",
        "--block-size 0", "--gpu-memory-utilization nan", "--gpu-memory-utilization inf",
        "--gpu-memory-utilization 1.5", "--gpu-memory-utilization -1", "--kv-cache-memory-bytes -5",
        "--max-num-seqs 0", "--max-num-batched-tokens -8k",
    ],
)  # fmt: skip
def test_a_value_the_engine_would_refuse_is_a_clear_error(flags: str) -> None:
    """vLLM refuses these at start; the plan did not: tracebacks (0 or NaN divided by) or a plan built on them."""
    with pytest.raises(UsageError, match="--engine-args"):
        parse_engine_args(flags)


@pytest.mark.parametrize("context", ["0", "-1", "-64k", "1e999", "99999999999999999999"])
def test_a_context_no_engine_serves_is_refused(context: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "llama-3.1-8b", "--gpu", "h200", "--context", context]) == 2
    assert "token count" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text",
    [
        """--compilation-config '{"max_cudagraph_capture_size": "big"}'""",
        """--compilation-config '{"cudagraph_capture_sizes": [1, "a"]}'""",
        """--compilation-config '{"cudagraph_capture_sizes": 5}'""",
        "-cc.max_cudagraph_capture_size=abc",
        """--compilation-config '{"cudagraph_mode": "garbage"}'""",
        """--compilation-config '{"level": "x"}'""",
        """--speculative-config '{"method": "ngram", "num_speculative_tokens": "four"}'""",
        "-O 4",
        "-O",
        "-O --enforce-eager",
    ],
)
def test_a_runtime_value_vllm_would_refuse_is_refused(text: str) -> None:
    """Each of these once planned as something else or raised a traceback: vLLM refuses them, so does the plan."""
    with pytest.raises(UsageError):
        parse_engine_args(text)


def test_quantization_the_command_would_not_load_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """--quant beside --engine-args once planned FP8 weights for a command that loads bf16 (even with --suggest,
    which writes no quantization); --quantization awq on a checkpoint that declares none was planned at 16 bits."""
    for extra in ([], ["--suggest"]):
        code = main(["plan", "llama-3.1-70b", "--gpu", "h100-80gb", "--engine-args", "--max-model-len 8k",
                     "--quant", "fp8", *extra])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and "--quant is not one of the --engine-args flags" in err and "--quantization" in err
    req = with_engine_args(PlanRequest(gpu_name="x", gpu_bytes=80 * 2**30, bandwidth_gbs=None, context=8192,
                                       concurrency=1, quant=None, kv_dtype="auto"),
                           parse_engine_args("--quantization awq --max-model-len 8192"))  # fmt: skip
    with pytest.raises(UsageError, match="declares no quantization_config"):
        make_plan(resolve_model("llama-3.1-8b"), req)
    online = with_engine_args(req, parse_engine_args("--quantization fp8 --max-model-len 8192"))
    assert make_plan(resolve_model("llama-3.1-8b"), online).weights.bytes < 9 * 2**30  # vLLM's online FP8


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("--max-model-length 4096", "did you mean --max-model-len"),
        ("--gpu-memory-utilisation 0.5", "did you mean --gpu-memory-utilization"),
        ("-pp 2", "pipeline parallelism"),
        ("--pipeline-parallel-size=4", "pipeline parallelism"),
        ("--cpu-offload-gb 40", "offloaded to the host"),
        ("--performance-mode fast", "not one of vLLM's"),
    ],
)
def test_a_flag_vllm_would_refuse_or_the_plan_cannot_model_is_refused(text: str, said: str) -> None:
    """Each was planned as vLLM's defaults, silently: a typo vLLM refuses, or a split the plan does not model."""
    with pytest.raises(UsageError, match=said):
        parse_engine_args(text)


def test_flags_that_move_vllms_batch_defaults_are_followed() -> None:
    """vLLM 0.25.1 (engine/arg_utils.py): throughput mode doubles both defaults; with chunked prefill off a default
    token budget is at least the context. Flags the plan does not read but that change nothing it models pass."""
    from servelab.plan.defaults import LARGE, completed_batch, vllm_batch_defaults

    base = vllm_batch_defaults("vllm", 80 * 2**30, "h100-80gb")
    assert completed_batch(base, 131072, None, None) == LARGE
    assert completed_batch(base, 131072, None, None, throughput=True) == (2 * LARGE[0], 2 * LARGE[1])
    assert completed_batch(base, 131072, None, None, chunked_prefill=False) == (LARGE[0], 131072)
    assert completed_batch(base, 131072, 64, 4096, throughput=True, chunked_prefill=False) == (64, 4096)
    assert parse_engine_args("--no-enable-chunked-prefill").enable_chunked_prefill is False
    assert parse_engine_args("--pipeline-parallel-size 1 --served-model-name x --max-loras 2").model is None


def test_a_command_serving_another_model_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    other = "vllm serve Qwen/Qwen3.6-27B --max-model-len 8k"  # a preset's hub id: its shape is known, and not this
    code = main(["plan", "llama-3.1-8b", "--gpu", "h100", "--engine-args", other])
    err = " ".join(capsys.readouterr().err.split())  # the error is wrapped at the terminal's width
    assert code == 2 and "serve 'Qwen/Qwen3.6-27B', a model of another shape than 'llama-3.1-8b'" in err
    unread = "vllm serve NousResearch/Hermes-3-Llama-3.1-8B --max-model-len 8k"  # a fine-tune not cached here
    assert main(["plan", "llama-3.1-8b", "--gpu", "h100", "--engine-args", unread]) == 0
    assert "cannot read here" in capsys.readouterr().err
    launcher = ("python -m vllm.entrypoints.openai.api_server --model meta-llama/Llama-3.1-8B-Instruct "
                "--max-model-len 8k")  # fmt: skip
    assert main(["plan", "llama-3.1-8b", "--gpu", "h100", "--engine-args", launcher]) == 0
    assert "vllm serve --model meta-llama/Llama-3.1-8B-Instruct" in capsys.readouterr().out


def test_ways_out_of_a_plan_of_the_engines_flags_are_the_engines_flags(capsys: pytest.CaptureFixture[str]) -> None:
    """servelab's --context and --kv-dtype are refused beside --engine-args, so they are no way out there: the
    plan names the flags to put in --engine-args (or a checkpoint), each planned again."""
    main(["plan", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine-args", "--max-model-len 131072"])
    out = capsys.readouterr().out
    assert "--max-model-len 53248 in --engine-args: fits" in out and "a checkpoint quantized to int4: fits" in out
    ways = out.split("what would fit")[1]
    assert "  --context " not in ways and "  --quant " not in ways
    main(["plan", "llama-3.1-8b", "--gpu", "rtx-4090", "--engine", "llamacpp", "--engine-args", "-c 524288 -np 4"])
    assert "-c 69632 in --engine-args: fits" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("--max-model-len 32k --no-enable-chunked-prefill --max-num-batched-tokens 2048", "chunked prefill off"),
        ("--max-model-len 32k --max-num-seqs 1024 --max-num-batched-tokens 512", "below --max-num-seqs"),
    ],
)
def test_a_batch_vllm_refuses_at_start_is_refused(text: str, said: str) -> None:
    """vLLM 0.25.1's SchedulerConfig.verify_max_model_len refuses both; the plan said "fits"."""
    from servelab.plan import plan_model

    base = PlanRequest(gpu_name="h100-80gb", gpu_bytes=80 * 2**30, bandwidth_gbs=None, context=8192, concurrency=1,
                       quant=None, kv_dtype="auto")  # fmt: skip
    req = with_engine_args(base, parse_engine_args(text))

    with pytest.raises(UsageError, match=said):
        plan_model(resolve_model("llama-3.1-8b"), req)


def test_a_log_whose_start_the_plan_cannot_model_is_refused() -> None:
    """--calibrate read a log of pipeline parallelism or CPU offload without them, and blamed the capacity rules."""
    line = "(APIServer pid=1) INFO non-default args: {'model': 'm', 'pipeline_parallel_size': 2}"
    with pytest.raises(UsageError, match="pipeline_parallel_size"):
        engine_args_from_log(line)
    assert engine_args_from_log("INFO non-default args: {'model': 'm', 'pipeline_parallel_size': 1}") is not None


@pytest.mark.parametrize(
    "launcher",
    ["vllm serve", "/opt/venv/bin/vllm serve", "uv run vllm serve", "python -m vllm.entrypoints.openai.api_server",
     "python3.12 -m vllm.entrypoints.openai.api_server"],
)  # fmt: skip
def test_the_launcher_words_are_not_the_model(launcher: str) -> None:
    """A launcher named by a path or behind `uv run` was taken for the model (and refused as another one)."""
    model = "--model M" if "-m " in launcher else "M"
    args = parse_engine_args(f"{launcher} {model} --max-model-len 8192")
    assert args.model == "M" and args.max_model_len == 8192
