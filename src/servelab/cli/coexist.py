"""`servelab coexist`: the same realtime probe alone and beside LLM decode, long prefill and both."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import typer

from servelab.cli._common import (
    ApiKeyOption,
    JsonOption,
    ModelOption,
    StoreOption,
    console,
    finite,
    open_store,
    print_json,
    refuse_failed,
    result_json,
    show_run,
    targets_from,
)
from servelab.cli.progress import steps
from servelab.coexist import (
    CONDITIONS,
    SEED_LAYERS,
    AudioFormat,
    CoexistOptions,
    HttpAudioProbe,
    Lease,
    LlmLoad,
    Mitigation,
    Probe,
    WorkerProbe,
    WorkerSpec,
    duration_text,
    expected,
    mitigated,
    parse_goals,
    parse_sharing,
    run_coexist,
    stored_result,
    with_baselines,
)
from servelab.core.errors import UsageError
from servelab.core.urls import check_url
from servelab.report import plot_intervals

# The stand-in's sizes: "0.6b" is shaped like a 0.6B streaming TTS decoder (28 layers of 1024); "small" fits a CPU.
SIZES = {"0.6b": (1024, 28, 3072), "small": (256, 4, 768)}


def _floats(spec: str, what: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in spec.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{what} is a comma-separated list of numbers, got {spec!r}") from None
    if not all(math.isfinite(v) for v in values):
        raise UsageError(f"{what} wants finite numbers, got {spec!r}")
    return values


def _json_object(text: str | None, what: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"{what} is a JSON object, like '{{\"speed\": 1.0}}': {exc}") from None
    if not isinstance(value, dict):
        raise UsageError(f"{what} is a JSON object, got {type(value).__name__}")
    return value


def _probe(kind: str, size: str, sharing: dict[str, Any], audio: dict[str, Any], spec: dict[str, Any]) -> Probe:
    if kind == "http":
        if not audio["url"]:
            raise UsageError("--probe http needs --tts-url URL (an endpoint that streams WAV or PCM)")
        pcm = AudioFormat(sample_rate=audio["sample_rate"])
        return HttpAudioProbe(
            check_url(audio["url"], "--tts-url"),
            audio_format=audio["format"],
            pcm=pcm,
            period_s=audio["period"],
            shape=audio["shape"],
            model=audio["model"],
            voice=audio["voice"],
            extra=_json_object(audio["body"], "--tts-body"),
        )
    if kind not in ("cpu", "gpu", "cpu-frames", "gpu-frames"):
        raise UsageError(f"--probe is cpu, gpu, cpu-frames, gpu-frames or http, got {kind!r}")
    if size not in SIZES:
        raise UsageError(f"--probe-size is {' or '.join(SIZES)}, got {size!r}")
    dim, layers, ffn = SIZES[size]
    device = "cuda" if kind.startswith("gpu") else "cpu"
    mode = "frames" if kind.endswith("frames") else "voice"
    return WorkerProbe(WorkerSpec(device, mode, dim, layers, ffn, green_sms=sharing.get("probe_sms", 0), **spec))


def coexist(
    target: str | None = typer.Option(
        None, "--target", help="NAME=URL of the LLM server that shares the machine (default: $OPENAI_BASE_URL)."
    ),
    model: list[str] = ModelOption,
    api_key: list[str] = ApiKeyOption,
    probe: str = typer.Option(
        "cpu",
        "--probe",
        help="cpu, gpu, cpu-frames, gpu-frames (avatar-like) or http; several at once comma-separated (the first is "
        "the voice, in every condition; the others, an avatar or a second voice, where a condition says avatar).",
    ),
    probe_size: str = typer.Option("small", "--probe-size", help="Stand-in decoder size: small or 0.6b."),
    steps_per_chunk: int = typer.Option(2, "--steps-per-chunk", min=1, help="Decoder steps per audio chunk."),
    chunk_ms: float = typer.Option(40.0, "--chunk-ms", min=1.0, help="Audio per chunk (ms); frames: ignored."),
    chunks: int = typer.Option(50, "--chunks", min=2, help="Chunks per utterance."),
    tts_url: str | None = typer.Option(None, "--tts-url", help="--probe http: the streaming speech endpoint."),
    audio_format: str = typer.Option("wav", "--audio-format", help="--probe http: wav or pcm."),
    tts_shape: str = typer.Option(
        "audio",
        "--tts-shape",
        help="--probe http: how the server streams: audio (chunked PCM/WAV), sse (speech.audio.delta events, "
        "vLLM-Omni's stream: true) or websocket (vLLM-Omni's /v1/audio/speech/stream).",
    ),
    tts_model: str = typer.Option("tts", "--tts-model", help="--probe http: the model field of the request."),
    tts_voice: str = typer.Option("default", "--tts-voice", help="--probe http: the voice field of the request."),
    tts_body: str | None = typer.Option(
        None,
        "--tts-body",
        help='--probe http: extra request fields as a JSON object, like \'{"language": "English"}\'.',
    ),
    sample_rate: int = typer.Option(24000, "--sample-rate", min=1, help="--probe http with pcm: samples per second."),
    conditions: str | None = typer.Option(
        None,
        "--conditions",
        help="Which, in this order: alone, avatar, decode, prefill, both, all, or parts joined with + (default: "
        "alone,decode,prefill,both; with several probes the seed's layers alone,avatar,decode,prefill,all).",
    ),
    goals: str = typer.Option(
        "", "--goals", help="What a condition must keep, like lateness=1.1,underruns@300=0,fps=25,llm=0.8 (defaults)."
    ),
    llm_baseline: bool = typer.Option(
        True, "--llm-baseline/--no-llm-baseline", help="Also run each LLM load with no probe: the share the LLM kept."
    ),
    mitigation: list[str] = typer.Option(
        [],
        "--mitigation",
        help="NAME=URL: run the conditions with LLM load again, that load sent here (a servelab gateway, an engine "
        "with a smaller --max-num-batched-tokens or an MPS cap); repeat.",
    ),
    lease: list[str] = typer.Option(
        [],
        "--lease",
        help="NAME[=ADMIN_KEY]: mitigation NAME is a servelab gateway; hold its realtime lease while the probes speak "
        "(the key from $SERVELAB_GATEWAY_ADMIN_KEY when not given).",
    ),
    reference: str | None = typer.Option(
        None,
        "--reference",
        help="RUN: judge against that stored coexist run's baselines (each probe alone, each LLM load alone): the "
        "plain server's, when this run's server is the mitigation (smaller batches, an MPS cap).",
    ),
    repeats: int = typer.Option(3, "--repeats", min=1, help="Rounds over the conditions (order rotated)."),
    utterances: int | None = typer.Option(
        None,
        "--utterances",
        min=1,
        help="Utterances per condition and round (default: the fewest that bring 1,000 chunks to each condition).",
    ),
    lookahead: str = typer.Option("0,300,500", "--lookahead", help="Listener lookahead buffers to compare (ms)."),
    decode_streams: int = typer.Option(4, "--decode-streams", min=1, help="LLM decode: concurrent short chats."),
    decode_tokens: int = typer.Option(256, "--decode-tokens", min=1, help="LLM decode: output tokens each."),
    prefill_tokens: int = typer.Option(32000, "--prefill-tokens", min=16, help="LLM prefill: prompt tokens each."),
    settle: float = typer.Option(2.0, "--settle", min=0.0, help="Seconds of LLM load before the probe starts."),
    sharing: str = typer.Option(
        "time-sliced", "--sharing", help="How the GPU is shared: time-sliced, mps[:LLM_PCT] or green:PROBE_SMS."
    ),
    plot: Path | None = typer.Option(None, "--plot", help="Write the chunk-interval plot (PNG) here."),
    store: Path | None = StoreOption,
    json_out: bool = JsonOption,
) -> None:
    """Does a long prefill make the streaming voice stutter? Chunk-interval p99, underruns, RTF per condition."""
    finite(chunk_ms=chunk_ms, settle=settle)
    share = parse_sharing(sharing)
    kinds = [k.strip() for k in probe.split(",") if k.strip()]
    default = SEED_LAYERS if len(kinds) > 1 else CONDITIONS
    options = CoexistOptions(
        conditions=tuple(c.strip() for c in conditions.split(",") if c.strip()) if conditions else default,
        repeats=repeats,
        utterances=utterances,
        lookaheads_ms=_floats(lookahead, "--lookahead"),
        load=LlmLoad(decode_streams, decode_tokens, prefill_tokens),
        settle_s=settle,
        sharing=share,
        goals=parse_goals(goals),
        llm_baselines=llm_baseline,
    )
    audio = {"url": tts_url, "format": audio_format, "sample_rate": sample_rate, "period": 0.0, "shape": tts_shape,
             "model": tts_model, "voice": tts_voice, "body": tts_body}  # fmt: skip
    spec = {"steps_per_chunk": steps_per_chunk, "chunk_ms": chunk_ms, "chunks": chunks}
    the_probes = [_probe(kind, probe_size, share, audio, spec) for kind in kinds]
    targets = targets_from([target] if target else [], model, api_key, quiet=json_out)
    if mitigation and not targets:
        raise UsageError("--mitigation needs the plain --target to compare with")
    options.mitigations = _mitigations(mitigation, lease, model, api_key, json_out)
    names = with_baselines(options.conditions) if targets and llm_baseline else options.conditions
    segments = len(mitigated(names, options.mitigations))
    out = console()
    with open_store(store) as db:
        options.reference = stored_result(db, reference) if reference else None
        count, seconds = expected(the_probes, targets[0] if targets else None, options)
        if not json_out:
            out.print(f"coexist: {segments} conditions x {options.repeats} rounds, {count} utterances each: "
                      f"{duration_text(seconds)} (--utterances, --repeats, --conditions)")  # fmt: skip
        with steps(not json_out) as bar:
            bar.start(f"{segments} conditions x {options.repeats} rounds", segments * options.repeats)
            result = run_coexist(
                db, the_probes, targets[0] if targets else None, options, args=_args(locals()),
                progress=lambda condition, chunks: bar.advance(),
            )  # fmt: skip
        if plot:
            plot = plot_intervals(result, plot)  # None: no chunk arrived, nothing drawn
        if json_out:
            print_json({"run_id": result.run_id, **result_json(result.stored())})
        else:
            show_run(db, result.run_id)
            if plot:
                out.print(f"plot: {plot}")
    if result.failed:
        raise typer.Exit(1)
    refuse_failed(result.stored())


def _mitigations(specs: list[str], leases: list[str], model: list[str], api_key: list[str],
                 quiet: bool) -> tuple[Mitigation, ...]:  # fmt: skip
    """Each --mitigation resolved as a target; those named by --lease hold that gateway's realtime lease."""
    if not specs:
        if leases:
            raise UsageError("--lease names a --mitigation")
        return ()
    resolved = targets_from(specs, model, api_key, quiet=quiet)
    keys: dict[str, str] = {}
    for item in leases:
        name, _, key = item.partition("=")
        key = key or os.environ.get("SERVELAB_GATEWAY_ADMIN_KEY", "")
        if name not in {t.name for t in resolved} or not key.strip():
            raise UsageError(
                f"--lease {name}: name a --mitigation and give its admin key (or SERVELAB_GATEWAY_ADMIN_KEY)"
            )
        keys[name] = key
    return tuple(Mitigation(t.name, t, Lease(t.url, keys[t.name]) if t.name in keys else None) for t in resolved)


def _args(scope: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in scope.items() if isinstance(v, str | int | float | bool | None) and not k.startswith("_")}
