"""`servelab plan MODEL`: will it fit, how many sessions, which gpu_memory_utilization."""

from __future__ import annotations

from dataclasses import asdict

import typer
from rich.table import Table

from servelab.cli._common import JsonOption, console, finite, print_json
from servelab.core.terminal import line, styled
from servelab.plan import (
    GIB,
    GPUS,
    QUANTS,
    Comparison,
    Plan,
    PlanRequest,
    compare_with,
    engine_request,
    gpu,
    make_plan,
    parse_alongside,
    parse_size,
    parse_tokens,
    preset_names,
    read_reported,
    resolve_model,
)


def plan(
    model: str = typer.Argument(
        ...,
        help="A preset (see 'servelab plan list'), a folder or config.json, or org/name "
        "in the local Hugging Face cache.",
    ),
    gpu_key: str = typer.Option("h100-80gb", "--gpu", help=f"One of: {', '.join(GPUS)}."),
    gpu_mem: str | None = typer.Option(None, "--gpu-mem", help="GPU memory instead of --gpu, like 96GiB."),
    context: str = typer.Option("32k", "--context", help="Tokens per session (max_model_len), like 64k."),
    concurrency: int = typer.Option(
        1, "--concurrency", min=1, max=1 << 24, help="Concurrent sessions at that context."
    ),
    quant: str | None = typer.Option(
        None, "--quant", help=f"Weights, overriding the checkpoint's quantization_config: {', '.join(QUANTS)}."
    ),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="KV cache dtype: auto (16-bit), fp8, q8_0, q4_0."),
    alongside: list[str] = typer.Option([], "--alongside", help="A co-tenant's peak memory, NAME=SIZE; repeat."),
    headroom: str = typer.Option("0GiB", "--headroom", help="Memory to leave free besides the co-tenants."),
    engine: str = typer.Option("vllm", "--engine", help="vllm, sglang or llamacpp."),
    util: float | None = typer.Option(
        None, "--gpu-memory-utilization", min=0.05, max=1.0, help="Judge this setting instead of choosing one."
    ),
    weights: str | None = typer.Option(None, "--weights", help="Weight memory, when you know it (like 67GiB)."),
    kv_pool: str | None = typer.Option(
        None,
        "--kv-pool",
        help="A fixed KV memory (vLLM --kv-cache-memory-bytes, or VLLM_CPU_KVCACHE_SPACE for its CPU build).",
    ),
    block_size: int | None = typer.Option(None, "--block-size", help="KV block size (vLLM: 16 on GPU, 128 on CPU)."),
    allow_long: bool = typer.Option(
        False, "--allow-long-context", help="Plan a --context beyond the model's maximum (vLLM needs an override)."
    ),
    batched_tokens: int = typer.Option(8192, "--max-num-batched-tokens", help="vLLM's per-step token budget."),
    tp: int = typer.Option(1, "--tp", min=1, help="Tensor-parallel GPUs (the plan is per GPU)."),
    eager: bool = typer.Option(False, "--enforce-eager", help="vLLM without CUDA graphs (no graph memory)."),
    engine_args: str | None = typer.Option(
        None,
        "--engine-args",
        help='Your real engine flags as one quoted string, like "--max-model-len 64k -tp 2 --kv-cache-dtype fp8": '
        "everything that changes memory is read, and the printed command line is yours, completed.",
    ),
    calibrate: str | None = typer.Option(
        None,
        "--calibrate",
        help="A running vLLM's URL or start-up log: show its reported KV capacity beside the prediction.",
    ),
    json_out: bool = JsonOption,
) -> None:
    """Will MODEL fit this GPU at this context and concurrency, next to its co-tenants?"""
    finite(gpu_memory_utilization=util)
    if model == "list":
        _list_presets(json_out)
        return
    card = None if gpu_mem else gpu(gpu_key)
    request = PlanRequest(
        gpu_name=card.key if card else f"{gpu_mem} GPU",
        gpu_bytes=parse_size(gpu_mem) if gpu_mem else card.memory_bytes,  # type: ignore[union-attr]
        bandwidth_gbs=card.bandwidth_gbs if card else None,
        context=parse_tokens(context),
        concurrency=concurrency,
        quant=quant.lower() if quant else None,
        kv_dtype=kv_dtype.lower(),
        engine=engine,
        alongside=parse_alongside(alongside),
        headroom=parse_size(headroom),
        gpu_memory_utilization=util,
        weights_bytes=parse_size(weights) if weights else None,
        kv_pool_bytes=parse_size(kv_pool) if kv_pool else None,
        max_num_batched_tokens=batched_tokens,
        block_size=block_size or (128 if engine == "vllm-cpu" else 16),
        allow_long_context=allow_long,
        tp=tp,
        enforce_eager=eager,
        cuda_total_bytes=card.cuda_total_bytes if card else None,
    )
    reported = read_reported(calibrate) if calibrate else None
    request = engine_request(request, engine_args, reported)
    resolved = resolve_model(model, request.engine_args.config_overrides() if request.engine_args else None)
    result = make_plan(resolved, request)
    comparison = compare_with(resolved, request, result, reported) if reported else None
    if json_out:
        data = result.to_dict()
        if comparison:
            data["calibration"] = asdict(comparison) | {"rules_error_blocks": comparison.rules_error_blocks}
        print_json(data)
    else:
        show_plan(result)
        if comparison:
            show_comparison(comparison, result)
    if not result.fits:
        raise typer.Exit(3)


def show_comparison(c: Comparison, p: Plan) -> None:
    r = c.reported
    table = Table("calibration", "predicted", "reported", title=f"beside {r.source}", title_justify="left")
    parts = p.overhead_parts
    for label, mine, theirs in (("weights", p.weights.bytes, r.weights_bytes),
                                ("activation peak (profile run)", parts.get("activation"), r.torch_peak_bytes),
                                ("non-torch memory", parts.get("non_torch"), r.non_torch_bytes),
                                ("CUDA-graph estimate", parts.get("cudagraphs"), r.cudagraph_bytes),
                                ("compute buffers", parts.get("activation"), r.compute_buffer_bytes)):  # fmt: skip
        if theirs is not None and mine is not None:
            table.add_row(label, _gib(mine), _gib(theirs))
    if r.available_bytes is not None:
        table.add_row("KV memory", _gib(c.predicted_pool_bytes), _gib(r.available_bytes))
    if r.num_blocks is not None:
        table.add_row("blocks", "-", f"{r.num_blocks:,} x {r.block_size}")
    same = f"{c.predicted_tokens_same_pool:,}" if c.predicted_tokens_same_pool is not None else "-"
    table.add_row("KV cache size, same KV memory", same, f"{r.tokens:,}" if r.tokens else "-")
    table.add_row("KV cache size, planned KV memory", f"{c.predicted_tokens:,}", f"{r.tokens:,}" if r.tokens else "-")
    if c.rules_error_blocks is not None:
        table.caption = f"capacity rules off by {c.rules_error_blocks:+.2f} blocks of {c.tokens_per_block} tokens"
    console().print(table)


def _list_presets(json_out: bool) -> None:
    names = preset_names()
    if json_out:
        print_json(names)
        return
    for name in names:
        console().print(name)


SETTING = {"sglang": "mem_fraction_static (of free memory)", "llamacpp": "share of the GPU used"}


def _gib(value: float) -> str:
    return f"{value / GIB:,.2f} GiB" if value >= GIB else f"{value / 2**20:,.2f} MiB"


def show_plan(p: Plan) -> None:
    out = console()
    colour = "green" if p.fits else "red"
    out.print(styled(f"{p.model}: {p.verdict}", f"bold {colour}"))
    for reason in p.reasons:
        out.print(line("  ", ("-", "red"), f" {reason}"))
    table = Table("budget", "memory", title=f"{p.engine} on {p.gpu} ({_gib(p.gpu_bytes)})", title_justify="left")
    table.add_row("weights", f"{_gib(p.weights.bytes)}\n{p.weights.method}")
    table.add_row("engine overhead (modelled)", f"{_gib(p.overhead_bytes)}\n{p.overhead_detail}")
    table.add_row("KV / state pool", _gib(p.kv_pool_bytes))
    table.add_row("co-tenants + headroom", _gib(p.cotenant_bytes + p.headroom_bytes))
    util_min = f"{p.util_min:.2f}" if p.util_min is not None else "-"
    table.add_row(
        SETTING.get(p.engine, "gpu_memory_utilization"),
        f"{p.util_chosen:.2f} (needs >= {util_min}, co-tenants allow <= {p.util_max:.2f})",
    )
    out.print(table)
    cache = Table("cache", "value", title_justify="left")
    cache.add_row("parameters", f"{p.total_params / 1e9:,.2f}B total, {p.active_params / 1e9:,.2f}B active")
    cache.add_row("KV per token (growing layers)", f"{p.kv_bytes_per_token / 1024:,.2f} KiB")
    if p.state_bytes_per_sequence:
        cache.add_row("recurrent state per sequence", f"{p.state_bytes_per_sequence / 2**20:,.1f} MiB")
    cache.add_row("one session at the context", _gib(p.capacity.bytes_per_sequence))
    cache.add_row("engine's KV cache size", f"{p.capacity.tokens:,} tokens")
    cache.add_row("max concurrent sessions", f"{p.capacity.max_sequences:.2f}")
    cache.add_row("rule", p.capacity.rule)
    out.print(cache)
    d = p.decode
    if d.tok_s_short:
        out.print(
            f"single-stream decode ceiling: {d.tok_s_short:,.0f} tok/s at 1K context, "
            f"{d.tok_s_long:,.0f} tok/s at the full context (bytes read per token / bandwidth)"
        )
    if d.experts_touched:
        touched = ", ".join(f"B={b}: {n:.0f}" for b, n in d.experts_touched.items())
        out.print(f"experts read per MoE layer by a batch of B: {touched}")
    out.print(line(("command:", "bold"), f" {p.command}"))
    for note in p.notes:
        out.print(styled(f"note: {note}", "dim"))
