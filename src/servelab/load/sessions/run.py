"""Drive a session workload against one target: N sessions at once (closed: each turn sent after the previous
answer and a think time) or sessions arriving at a rate (open), each turn's prompt the whole history with the
replies the model streamed (:mod:`.conversation`). Every turn is one record, labelled with its session and turn;
records go to the sink as they finish. A session ends at its first failed turn (a later prompt would rest on a
reply that never came); no prompt is sent past the target's context."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from servelab.core.records import Labels, RequestRecord
from servelab.engines.client import ClientOptions, StreamClient
from servelab.load.arrivals import ClosedLoop, OpenLoop, arrivals_for
from servelab.load.cycles import cycling_replies
from servelab.load.monitor import ClientMonitor
from servelab.load.runner import Load, ScenarioResult, Share, Sink, Target, payload, token_counter
from servelab.load.scenarios import Scenario, filler_text
from servelab.load.sessions.conversation import Conversation, Message, Prompt
from servelab.load.sessions.fit import HEAD_MARK_TOKENS, fit_spec, prompt_limit
from servelab.load.sessions.script import SessionScript, TurnScript, session_script
from servelab.load.sessions.spec import SessionSpec
from servelab.load.sessions.trace import TraceRun

MEASURE_LINES = 200  # filler lines /tokenize counts once, for the tokens per line of every text sent
DEFAULT_TOKENS_PER_LINE = 12.0


@dataclass(frozen=True, slots=True)
class Texts:
    """The text of a session's parts, sized by the target's own count of the filler (``tokens_per_line``)."""

    name: str
    tokens_per_line: float = DEFAULT_TOKENS_PER_LINE

    def text(self, seed: str, tokens: int) -> str:
        return filler_text(0, f"{self.name}:{seed}", lines=self.lines(tokens))

    def lines(self, tokens: int) -> int:
        return max(1, round(tokens / self.tokens_per_line))

    def tokens(self, tokens: int) -> int:
        """What :meth:`text` of ``tokens`` holds, by the measured rate (a line is whole)."""
        return round(self.lines(tokens) * self.tokens_per_line)

    def head(self, script: SessionScript, shared: int, nonce: str) -> str:
        """The shared part (every session's), then the session's own: a unique line first, so sessions share only
        what the spec says they share."""
        own = self.text(f"head:{script.session}", max(1, script.head_tokens - shared))
        mark = f"[session {nonce}]"
        return f"{self.text('shared', shared)}\n{mark}\n{own}" if shared else f"{mark}\n{own}"

    def summary(self, session: int) -> Callable[[int, int], str]:
        """The n-th summary of a session, of about ``tokens`` tokens."""

        def text(n: int, tokens: int) -> str:
            return "Summary of the conversation so far:\n" + self.text(f"summary:{session}:{n}", tokens)

        return text


class SessionRun:
    """One session scenario on one target, recording every turn through ``sink``."""

    def __init__(self, target: Target, scenario: Scenario, load: Load, sink: Sink) -> None:
        assert scenario.sessions is not None
        self.target, self.scenario, self.load, self.sink = target, scenario, load, sink
        self.spec: SessionSpec = scenario.sessions
        self.client = StreamClient(target.url, target=target.name, options=ClientOptions(api_key=target.api_key))
        self.result = ScenarioResult(target.name, scenario.name)
        self.monitor = ClientMonitor()
        self.texts = Texts(self.spec.name)
        self.compactions = 0
        self.unfit: list[str] = []
        self._errors_in_row = 0
        self._deadline: int | None = None

    async def run(self) -> ScenarioResult:
        """Fitted to the target, warmed up, every session driven; the step's warnings."""
        await self.prepare()
        self.monitor.start()
        try:
            await self.drive()
        finally:
            self.result.clients = [await self.monitor.stop()]
        self.result.warnings += session_warnings(self.result.records, self.load, self.compactions, self.unfit)
        return self.result

    async def prepare(self) -> None:
        count = token_counter(self.client.base, self.target.model, self.target.api_key)
        got = await count(filler_text(0, self.spec.name, lines=MEASURE_LINES))
        if got is None:
            self.result.warnings.append(f"no /tokenize on {self.target.name}: session lengths are estimates")
        else:
            self.texts = replace(self.texts, tokens_per_line=got / MEASURE_LINES)
        context, line = self.target.max_model_len, self.texts.tokens_per_line
        self.spec, told = fit_spec(self.spec, context, self.target.name, line)
        self.result.warnings += [told] if told else []
        for i in range(self.load.warmup):
            messages: list[Message] = [{"role": "user", "content": f"[{uuid.uuid4().hex[:12]}] warm up {i}"}]
            await self.client.send("chat", self._body(messages, 8), record=self._record(None, 0, False, "warmup"))

    async def drive(self, share: Share | None = None) -> None:
        """Every session of the step, all at once or spread over the spec's ramp (closed), or at the load's rate
        (open); with ``share``, this process's part: every ``workers``-th session from its ``worker``, due from the
        shared start (an open loop's arrivals from the one seeded schedule every process draws)."""
        sessions = self.sessions()
        start = share.start_ns if share is not None and share.start_ns is not None else time.perf_counter_ns()
        mine = range(share.worker, sessions, share.workers) if share is not None else range(sessions)
        if self.load.duration_s:
            self._deadline = start + int(self.load.duration_s * 1e9)
        pattern = arrivals_for(self.load, self.scenario)
        if not isinstance(pattern, OpenLoop):
            ramp_ns = int(self.spec.ramp_s * 1e9)
            await asyncio.gather(*(self.session(i, start + ramp_ns * i // sessions) for i in mine))
            return
        tasks, offsets, chosen = [], pattern.offsets(), set(mine)
        for i in range(sessions):
            due = start + int(next(offsets) * 1e9)
            if i not in chosen:
                continue
            await asyncio.sleep(max(0.0, (due - time.perf_counter_ns()) / 1e9))
            if self._stopped():
                break
            tasks.append(asyncio.create_task(self.session(i, due)))
        await asyncio.gather(*tasks)

    def sessions(self) -> int:
        """Closed: the concurrent sessions; open: the sessions sent (the load's, else the scenario's)."""
        pattern = arrivals_for(self.load, self.scenario)
        return pattern.concurrency if isinstance(pattern, ClosedLoop) else self.load.concurrency or self.spec.sessions

    async def session(self, index: int, due_ns: int) -> None:
        """One session's turns in order: the first at ``due_ns``, each later one its think time after the previous
        answer."""
        script = session_script(self.spec, index, self.load.seed)
        nonce = uuid.uuid4().hex[:12] if self.load.unique_prefix else str(index)
        talk = start_conversation(self.spec, script, self.texts, self.target.max_model_len, nonce)
        for turn in script.turns:
            if turn.index == 1:
                await asyncio.sleep(max(0.0, (due_ns - time.perf_counter_ns()) / 1e9))
            else:
                due_ns = time.perf_counter_ns() + int(turn.think_s * 1e9)
                await asyncio.sleep(turn.think_s)
            if self._stopped() or not await self._turn(talk, turn, index, due_ns):
                return

    async def _turn(self, talk: Conversation, turn: TurnScript, session: int, due_ns: int) -> bool:
        """One turn sent and its reply taken into the history; False where the session ends here."""
        before = talk.compactions
        prompt = turn_prompt(talk, self.texts, turn)
        self.compactions += talk.compactions - before
        if not prompt.fits:
            self.unfit.append(f"session {session} turn {turn.index}: {prompt.estimated_tokens:,} > {prompt.limit:,}")
            return False
        record = self._record(session, turn.index, prompt.compacted, self.scenario.name)
        self.monitor.sent()
        try:
            await self.client.send("chat", self._body(prompt.messages, turn.output_tokens), record=record,
                                   scheduled_ns=due_ns)  # fmt: skip
        finally:
            self.monitor.done()
        self.result.records.append(record)
        self.sink(record)
        self._errors_in_row = self._errors_in_row + 1 if record.error else 0
        if record.error:
            return False
        reply = record.completion_tokens if record.completion_tokens is not None else record.client_token_count
        talk.answered(record.output_text, record.tool_calls, record.prompt_tokens, reply)
        return True

    def _body(self, messages: list[Message], output_tokens: int) -> dict[str, object]:
        load = replace(self.load, max_tokens=self.load.max_tokens or output_tokens)
        body = payload(self.target, self.scenario, [], load)
        body["messages"] = messages
        return body

    def _record(self, session: int | None, turn: int, compacted: bool, label: str) -> RequestRecord:
        pattern = arrivals_for(self.load, self.scenario)
        labels = Labels(
            step=self.scenario.name,
            level=pattern.concurrency if isinstance(pattern, ClosedLoop) else None,
            rate=pattern.rate if isinstance(pattern, OpenLoop) else None,
            phase="warmup" if label == "warmup" else ("compacted" if compacted else None),
            sweep_of=self.scenario.sweep_of,
            session=session,
            turn=turn or None,
        )
        return self.client.new_record("chat", scenario=label, labels=labels)

    def _stopped(self) -> bool:
        if self._errors_in_row >= self.load.max_consecutive_errors:
            self.result.stopped_early = f"stopped early: {self._errors_in_row} failed turns in a row"
            return True
        return self._deadline is not None and time.perf_counter_ns() > self._deadline


def start_conversation(
    spec: SessionSpec, script: SessionScript, texts: Texts, context: int | None, nonce: str
) -> Conversation:
    """A session's conversation before its first turn: its head (``nonce`` marks it as this session's own)."""
    shared = spec.shared_tokens
    return Conversation(
        head=[{"role": "system", "content": texts.head(script, shared, nonce)}],
        head_tokens=texts.tokens(shared) + texts.tokens(script.head_tokens - shared) + HEAD_MARK_TOKENS,
        limit=prompt_limit(spec, context),
        summary=texts.summary(script.session),
        summary_tokens=texts.tokens(spec.summary_tokens),
        session=script.session,
    )


def turn_prompt(talk: Conversation, texts: Texts, turn: TurnScript) -> Prompt:
    """The prompt of ``turn``: its new content (seeded by session and turn) after the history."""
    text = texts.text(f"turn:{talk.session}:{turn.index}", turn.new_tokens)
    return talk.next_prompt(turn.index, text, texts.tokens(turn.new_tokens), turn.output_tokens, tool=turn.tool)


def session_warnings(records: list[RequestRecord], load: Load, compactions: int, unfit: list[str]) -> list[str]:
    """What the step's turns say: compactions, turns not sent for want of room, a server that does not report
    cached tokens or reports none on every later turn, replies shorter than asked, greedy replies cycling on one
    token (random weights)."""
    out = []
    if compactions:
        sessions = len({r.labels.session for r in records if r.labels.phase == "compacted"})
        out.append(f"{compactions} compaction(s) in {sessions} session(s): the history reached the limit")
    if unfit:
        out.append(f"{len(unfit)} session(s) ended before a turn that would not fit the context: {unfit[0]}")
    ok = [r for r in records if r.ok]
    if ok and all(r.cached_tokens is None for r in ok):
        out.append("the server reported no cached_tokens per turn: the prefix cache is read from /metrics only")
    later = [r for r in ok if (r.labels.turn or 0) > 1 and r.labels.phase != "compacted"]
    if later and all(r.cached_tokens == 0 for r in later):
        out.append(
            f"none of {len(later)} later turn(s) found its history cached (cached_tokens 0): the engine's prefix "
            "cache is off or too small for the sessions (vLLM leaves it off for hybrid models unless started with "
            "--enable-prefix-caching)"
        )
    if load.fixed_output != "off":
        short = [r for r in ok if r.finish_reason not in (None, "length")]
        if short:
            out.append(f"{len(short)} turn(s) ended before max_tokens ({short[0].finish_reason}): replies vary")
    cycling = cycling_replies(records, load.temperature)
    return [*out, cycling] if cycling else out


async def run_sessions(target: Target, scenario: Scenario, load: Load, sink: Sink) -> ScenarioResult:
    """A session or trace step in this process, on one event loop (a trace is never split over ``--workers``)."""
    if scenario.trace is not None:
        result = await TraceRun(target, scenario, load, sink).run()
        if load.workers and load.workers > 1:
            result.warnings.append(f"a trace replays from one load process; --workers {load.workers} was not used")
        return result
    return await SessionRun(target, scenario, load, sink).run()
