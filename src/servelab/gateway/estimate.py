"""The admission's token figure for one request, and how it was obtained.

Invariant: the figure is never below the engine's own count of the prompt tokens the request puts on it.
- In process (:class:`~servelab.gateway.admission.TokenCounter`, the local engine's tokenizer and template): a
  byte bound while it is small, else the exact count (method ``bound`` / ``exact`` / ``ids``).
- Without a tokenizer in process: the engine's own ``/tokenize`` (method ``engine``), for every prompt of the
  request, times its fan-out.
- When neither can count it, the request is long: its figure is ``long_figure`` (over the threshold and the
  whole budget) with method ``uncounted`` and the reason; so is a count that fails in any way, and a body holding a
  number the gateway's parser may have read inexactly (:mod:`.admission.numbers`). There is no guess to fall back to."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, NamedTuple

from servelab.gateway.admission import CHAT, TokenCounter, Uncountable
from servelab.gateway.admission.counter import fan_out, prompts
from servelab.gateway.admission.fields import check_fields
from servelab.gateway.admission.numbers import check_numbers

IN_THREAD_BYTES = 32 * 1024  # a body this large is counted off the event loop (tokenizers releases the GIL)
MAX_WAITING = 8  # exact counts queued for the counting thread past this: the request is uncounted (long)

Remote = Callable[[dict[str, Any]], Awaitable[int | None]]  # the engine's count of one chat or one text


class Estimate(NamedTuple):
    tokens: int
    method: str  # bound, exact, ids, engine, uncounted
    why: str = ""  # uncounted: the reason

    def header(self) -> str:
        return f"{self.tokens};{self.method}"


class Admission:
    """Counts requests for the policy: in process when a counter is loaded, else by the engine."""

    def __init__(
        self, counter: TokenCounter | None, remote: Remote, long_figure: int, bound_max: int, long_at: int
    ) -> None:
        self.counter, self.remote = counter, remote
        self.long_figure, self.bound_max, self.long_at = long_figure, bound_max, long_at
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="servelab-count")  # at most a core on counting
        self._waiting = 0

    def uncounted(self, why: str) -> Estimate:
        return Estimate(self.long_figure, "uncounted", why)

    def rehearse(self, path: str, body: dict[str, Any]) -> int:
        """The in-process count with no effect (the warm-up's path; 0 where there is none to make)."""
        try:
            return self.counter.count(path, body, self.bound_max, self.long_at).tokens if self.counter else 0
        except Uncountable:
            return 0

    async def figure(self, path: str, body: dict[str, Any], raw: bytes) -> Estimate:
        """The figure for ``body`` (parsed from ``raw``); a count that fails in any way is uncounted (long)."""
        try:
            check_numbers(raw, body)
            if self.counter is not None:
                return await self._in_process(self.counter, path, body, len(raw))
            return await self._by_engine(path, body)
        except Uncountable as exc:
            return self.uncounted(str(exc))
        except Exception as exc:  # whatever breaks the count, the request is long: never a 5xx
            return self.uncounted(f"the count failed: {type(exc).__name__}")

    async def _in_process(self, counter: TokenCounter, path: str, body: dict[str, Any], size: int) -> Estimate:
        if size <= IN_THREAD_BYTES:
            tokens, method = counter.count(path, body, self.bound_max, self.long_at)
            return Estimate(tokens, method)
        if self._waiting >= MAX_WAITING:
            raise Uncountable(f"{MAX_WAITING} large prompts are already waiting to be counted")
        self._waiting += 1
        try:
            work = partial(counter.count, path, body, self.bound_max, self.long_at)
            count = await asyncio.get_running_loop().run_in_executor(self._pool, work)
        finally:
            self._waiting -= 1
        return Estimate(count.tokens, count.method)

    async def _by_engine(self, path: str, body: dict[str, Any]) -> Estimate:
        """The engine's count of each prompt (a chat whole; each string of a completions batch; token ids by
        their number), times the fan-out; any prompt it cannot count makes the request uncounted."""
        times = fan_out(body)
        check_fields(path == CHAT, body, None)  # chat_template, prompt_embeds, any field not modelled: uncountable
        if path == CHAT:
            pieces: list[dict[str, Any]] = [body]
            ids = 0
        else:
            texts, ids = prompts(body.get("prompt"))
            if isinstance(body.get("suffix"), str):
                texts.append(body["suffix"])
            pieces = [{"prompt": text, "model": body.get("model", "")} for text in texts]
        total = ids
        for piece in pieces:
            counted = await self.remote(piece)
            if counted is None:
                raise Uncountable("the engine could not count the prompt (/tokenize failed)")
            total += counted
        return Estimate(total * times, "engine")
