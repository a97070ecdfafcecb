"""A rehearsal of the request path, run when the loop starts to linger after an answer: the next request (the
same client's, often a millisecond away) then finds the parser, the body checks, the policy and the upstream
request's encoding in the CPU's caches instead of cold from a sleep through the stream.

Why: on the H200 host a request handled while the loop had polled through the whole previous one added
0.26 ms to TTFT at one stream, one handled after the process slept mid-stream 0.40 ms (docs/gateway-bench.md,
session 12): the request path ran cold. On the 2-core machine, with polling on, the rehearsal took the request
leg from +341 to +267 us over direct (benchmarks/gateway/legs.py --blocks; not yet measured on the H200).

It has no effect beyond the caches: a canned request through a throwaway parser, the same body checks, the
policy on the local health as it is, the bytes of an upstream request that is never sent; no store read or
write, no metric, no I/O. ``[server] warm_on_linger = false`` turns it off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servelab.gateway.body import parse_body
from servelab.gateway.messages import Request, Response, ServerLimits
from servelab.gateway.poll import BusyPoll
from servelab.gateway.server import Connection
from servelab.gateway.slots import Slots

BODY = b'{"model":"m","messages":[{"role":"user","content":"warm"}],"stream":true,"max_tokens":1}'
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer -\r\n"
    b"content-type: application/json\r\ncontent-length: %d\r\n\r\n%b" % (len(BODY), BODY)
)


async def _never(request: Request) -> Response:  # a throwaway connection dispatches nothing
    return Response(204)


class Rehearsal:
    """``path`` is the gateway's side (its key check, policy and encoding; no effects) for a parsed request."""

    def __init__(self, limits: ServerLimits, max_depth: int, path: Callable[[Request, dict[str, Any]], object]):
        self.conn = Connection(_never, limits, Slots(1), BusyPoll(None))  # its own slots: never served
        self.max_depth, self.path = max_depth, path

    def parse(self) -> Request:
        """The canned request through the throwaway connection's parser."""
        self.conn.parser.feed_data(REQUEST)
        request = self.conn.queue.popleft()
        assert isinstance(request, Request)  # the canned request is never refused
        return request

    def __call__(self) -> None:
        try:
            request = self.parse()
            self.path(request, parse_body(request.body, self.max_depth))
        except Exception:  # a warm-up: whatever it meets, the next real request meets and answers
            pass
        finally:
            self.conn.queue.clear()
