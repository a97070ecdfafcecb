"""`servelab plan MODEL`: will it fit, how many sessions, which gpu_memory_utilization."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import typer
from rich.table import Table

from servelab.cli._common import JsonOption, StoreOption, console, finite, open_store, print_json
from servelab.cli.plan_speed import held_levels, show_fit, show_speed
from servelab.core.errors import UsageError
from servelab.core.terminal import line, styled
from servelab.plan import (
    GIB,
    GPUS,
    QUANTS,
    Comparison,
    Plan,
    PlanRequest,
    check_engine,
    check_same_model,
    check_side_options,
    compare_with,
    engine_request,
    fit_from_runs,
    gpu,
    gpus,
    parse_alongside,
    parse_size,
    parse_tokens,
    plan_model,
    presets,
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
    context: str | None = typer.Option(
        None, "--context", help="Tokens per session (max_model_len), like 64k (default: 32k, or the model's maximum)."
    ),
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
    block_size: int | None = typer.Option(
        None, "--block-size", min=1, help="KV block size (vLLM: 16 on GPU, 128 on CPU)."
    ),
    allow_long: bool = typer.Option(
        False, "--allow-long-context", help="Plan a --context beyond the model's maximum (vLLM needs an override)."
    ),
    batched_tokens: int | None = typer.Option(
        None, "--max-num-batched-tokens", min=1, help="vLLM's per-step token budget (default: vLLM's for the card)."
    ),
    tp: int = typer.Option(1, "--tp", min=1, help="Tensor-parallel GPUs (the plan is per GPU)."),
    eager: bool = typer.Option(False, "--enforce-eager", help="vLLM without CUDA graphs (no graph memory)."),
    engine_args: str | None = typer.Option(
        None,
        "--engine-args",
        help='Your real engine flags as one quoted string, like "--max-model-len 64k -tp 2 --kv-cache-dtype fp8": '
        "everything that changes memory is read, and the printed command line is yours, completed.",
    ),
    suggest: bool = typer.Option(
        False,
        "--suggest",
        help="With --engine-args: write the plan's own --max-num-seqs (the --concurrency) and gpu_memory_utilization "
        "into your command. Without it the plan is of your flags exactly, vLLM's defaults for the rest.",
    ),
    fit: list[str] = typer.Option(
        [],
        "--fit",
        help="A stored bench or sweep run (id, prefix or 'latest'; RUN:TARGET for one of several) of "
        "this model on this card: fit the speed constants to its measured steps; repeat.",
    ),
    hold_out: str | None = typer.Option(
        None,
        "--hold-out",
        help="With --fit: the concurrencies whose steps are left out of the fit and predicted, like 1,4 "
        "(default: every third point).",
    ),
    prompt_tokens: int = typer.Option(
        1024, "--prompt-tokens", min=1, max=1 << 34, help="The prompt whose prefill and queued TTFT are predicted."
    ),
    store: Path | None = StoreOption,
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
    check_engine(engine)  # before anything is read: a typo is said at once
    card = None if gpu_mem else gpu(gpu_key)
    if gpu_mem and parse_size(gpu_mem) < 2**20:
        raise UsageError(f"--gpu-mem {gpu_mem!r} is no GPU's memory", hint="like 96GiB")
    request = PlanRequest(
        gpu_name=card.key if card else f"{gpu_mem} GPU",
        gpu_bytes=parse_size(gpu_mem) if gpu_mem else card.memory_bytes,  # type: ignore[union-attr]
        bandwidth_gbs=card.bandwidth_gbs if card else None,
        context=parse_tokens(context) if context else 0,  # 0: the model's, planned in plan_model
        concurrency=concurrency,
        quant=quant.lower() if quant else None,
        kv_dtype=kv_dtype.lower(),
        engine=engine,
        alongside=parse_alongside(alongside),
        headroom=parse_size(headroom),
        gpu_memory_utilization=util,
        weights_bytes=parse_size(weights) if weights else None,
        kv_pool_bytes=parse_size(kv_pool) if kv_pool else None,
        max_num_batched_tokens=batched_tokens or 8192,
        defaulted=("max_num_batched_tokens",) if batched_tokens is None else (),
        block_size=block_size or (128 if engine == "vllm-cpu" else 16),
        allow_long_context=allow_long,
        tp=tp,
        enforce_eager=eager,
        cuda_total_bytes=card.cuda_total_bytes if card else None,
        tflops=card.tflops if card else None,
        prompt_tokens=prompt_tokens,
    )
    reported = read_reported(calibrate) if calibrate else None
    if engine_args:
        side = {
            "--context": context,
            "--gpu-memory-utilization": util,
            "--max-num-batched-tokens": batched_tokens,
            "--enforce-eager": eager or None,
            "--block-size": block_size,
            "--tp": tp if tp > 1 else None,
            "--kv-dtype": None if kv_dtype.lower() == "auto" else kv_dtype,
            "--kv-pool": kv_pool,
            "--quant": quant if engine != "llamacpp" else None,
        }  # fmt: skip (llama.cpp: the GGUF's own type)
        check_side_options([name for name, value in side.items() if value is not None], suggest)
    request = engine_request(request, engine_args, reported, suggest=suggest)
    resolved = resolve_model(model, request.engine_args.config_overrides() if request.engine_args else None)
    if said := check_same_model(model, resolved, request.engine_args):
        print(f"note: {said}", file=sys.stderr)  # beside --json's stdout, never in it
    fitted = None
    if hold_out is not None and not fit:
        raise UsageError(
            "--hold-out goes with --fit RUN", hint="servelab plan MODEL --gpu CARD --fit RUN --hold-out 1,4"
        )
    if fit:
        with open_store(store) as db:
            fitted = fit_from_runs(resolved, request, db, fit, held_levels(hold_out))
        request = replace(request, speed_constants=fitted.constants)
    request, result = plan_model(resolved, request)
    comparison = compare_with(resolved, request, result, reported) if reported else None
    if json_out:
        data = result.to_dict()
        if fitted:
            data["fit"] = asdict(fitted)
        if comparison:
            data["calibration"] = asdict(comparison) | {"rules_error_blocks": comparison.rules_error_blocks}
        print_json(data)
    else:
        show_plan(result)
        if result.speed:
            show_speed(result.speed)
        if fitted:
            show_fit(fitted)
        if comparison:
            show_comparison(comparison, result)
    if not result.fits:
        raise typer.Exit(3)


def show_comparison(c: Comparison, p: Plan) -> None:
    """Each figure the engine reported beside the plan's prediction of it, with the difference (predicted less
    reported, and as a share of what was reported)."""
    r = c.reported
    table = Table("figure", "predicted", "reported", "difference", title=f"beside {r.source}", title_justify="left")
    parts = p.overhead_parts
    for label, mine, theirs in (("weights", p.weights.bytes, r.weights_bytes),
                                ("activation peak (profile run)", parts.get("activation"), r.torch_peak_bytes),
                                ("non-torch memory", parts.get("non_torch"), r.non_torch_bytes),
                                ("CUDA-graph estimate", parts.get("cudagraphs"), r.cudagraph_bytes),
                                ("compute buffers", parts.get("activation"), r.compute_buffer_bytes),
                                ("KV memory", c.predicted_pool_bytes, r.available_bytes)):  # fmt: skip
        if theirs is not None and mine is not None:
            table.add_row(label, _gib(mine), _gib(theirs), _difference(mine, theirs, _gib))
    if r.num_blocks is not None:
        table.add_row("blocks", "-", f"{r.num_blocks:,} x {r.block_size}", "-")
    for label, tokens in (("KV cache size, same KV memory", c.predicted_tokens_same_pool),
                          ("KV cache size, planned KV memory", c.predicted_tokens)):  # fmt: skip
        table.add_row(label, f"{tokens:,}" if tokens is not None else "-", f"{r.tokens:,}" if r.tokens else "-",
                      _difference(tokens, r.tokens, lambda n: f"{n:,.0f}"))  # fmt: skip
    if c.rules_error_blocks is not None:
        table.caption = f"capacity rules off by {c.rules_error_blocks:+.2f} blocks of {c.tokens_per_block} tokens"
    console().print(table)


def _difference(mine: float | None, theirs: float | None, shown: Callable[[float], str]) -> str:
    """``+0.12 GiB (+1.3%)``: predicted less reported; a share only where the reported figure is not 0."""
    if mine is None or theirs is None:
        return "-"
    sign = "+" if mine >= theirs else "-"
    share = f" ({(mine - theirs) / theirs:+.1%})" if theirs else ""
    return f"{sign}{shown(abs(mine - theirs))}{share}"


def _list_presets(json_out: bool) -> None:
    found, cards = presets(), gpus()
    if json_out:
        print_json({"presets": [asdict(p) for p in found], "gpus": [asdict(g) for g in cards]})
        return
    table = Table(title="presets", title_justify="left")
    for header in ("preset", "parameters", "architecture", "context", "weights"):
        wraps = header == "architecture"  # the rest whole, never cut; a long model_type folds
        table.add_column(header, no_wrap=not wraps, overflow="fold" if wraps else "ellipsis")
    for p in found:
        active = f"\n{p.active_params / 1e9:,.1f}B active" if p.active_params < p.total_params else ""
        context = f"{p.max_context:,}" if p.max_context else "-"
        table.add_row(p.name, f"{p.total_params / 1e9:,.1f}B{active}", p.architecture, context, p.quantization)
    console().print(table)
    cards_table = Table("--gpu", "card", "memory", "bandwidth", title="GPUs", title_justify="left")
    for g in cards:
        cards_table.add_row(g.key, g.name, f"{g.memory_gib:,.1f} GiB", f"{g.bandwidth_gbs:,.0f} GB/s")
    console().print(cards_table)


SETTING = {"sglang": "mem_fraction_static (of free memory)"}
ROWS = ("weights", "engine overhead (modelled)", "KV / state pool")
LLAMACPP_ROWS = ("model buffer (-ngl 999)", "compute buffer (modelled)", "KV buffer (-c cells)")


def _gib(value: float) -> str:
    return f"{value / GIB:,.2f} GiB" if value >= GIB else f"{value / 2**20:,.2f} MiB"


def _budget_table(p: Plan) -> Table:
    """The memory budget in the engine's own terms: llama.cpp's buffers and what they take, else the memory
    fraction the engine is given."""
    llamacpp = p.engine == "llamacpp"
    rows = LLAMACPP_ROWS if llamacpp else ROWS
    table = Table("budget", "memory", title=f"{p.engine} on {p.gpu} ({_gib(p.gpu_bytes)})", title_justify="left")
    table.add_row(rows[0], f"{_gib(p.weights.bytes)}\n{p.weights.method}")
    table.add_row(rows[1], f"{_gib(p.overhead_bytes)}\n{p.overhead_detail}")
    table.add_row(rows[2], _gib(p.kv_pool_bytes))
    table.add_row("co-tenants + headroom", _gib(p.cotenant_bytes + p.headroom_bytes))
    if llamacpp:
        used, room = (
            p.weights.bytes + p.overhead_bytes + p.kv_pool_bytes,
            p.gpu_bytes - p.cotenant_bytes - p.headroom_bytes,
        )
        table.add_row("buffers, all three", f"{_gib(used)} of the {_gib(room)} left beside the co-tenants")
        return table
    util_min = f"{p.util_min:.2f}" if p.util_min is not None else "-"
    table.add_row(
        SETTING.get(p.engine, "gpu_memory_utilization"),
        f"{p.util_chosen:.2f} (needs >= {util_min}, co-tenants allow <= {p.util_max:.2f})",
    )
    return table


def show_plan(p: Plan) -> None:
    out = console()
    colour = "green" if p.fits else "red"
    out.print(styled(f"{p.model}: {p.verdict}", f"bold {colour}"))
    for reason in p.reasons:
        out.print(line("  ", ("-", "red"), f" {reason}"))
    out.print(_budget_table(p))
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
    if p.suggestions:
        out.print(line(("what would fit", "bold"), " (each planned again with one change):"))
    elif not p.fits:
        out.print(f"no single change fits on {p.gpu}: not an 8-bit KV cache, a smaller --quant, a shorter --context "
                  "nor fewer sessions (planned again with each)")  # fmt: skip
    for way in p.suggestions:
        out.print(f"  {way}")
