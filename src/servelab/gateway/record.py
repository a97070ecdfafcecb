"""The gateway's traffic as a trace a bench can replay (``[record] path``): one Mooncake-format line per answered
request, ``timestamp`` (ms since the gateway started, at the request's arrival), ``input_length`` (the engine's
usage, else the prompt's ids), ``output_length`` (the usage's completion tokens), ``hash_ids`` and, where the
request named one (``user``), its ``session``.

The rule kept: recording never changes what the gateway routes or answers, and never keeps text. A line is made
after the answer ended, on a thread of its own, from the prompt's token ids as the admission renders and tokenizes
it (the local engine's tokenizer and chat template); each block of ``block_tokens`` ids is hashed with every block
before it (two prompts share a hash id exactly where they share a prefix block), as 63 bits of BLAKE2b: a
fingerprint of token ids, the same in every gateway process. A request it cannot make a line of (no tokenizer, no
usage, a prompt the admission could not count) is counted as dropped, never raised.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from servelab.gateway.admission import TokenCounter

HASH_BYTES = 8


def block_hashes(ids: list[int], block: int) -> list[int]:
    """One id per block of ``block`` token ids (the last block may be short), each hashed with all before it."""
    out, chain = [], b""
    for start in range(0, len(ids), block):
        piece = b"".join(i.to_bytes(4, "little", signed=False) for i in ids[start : start + block])
        chain = hashlib.blake2b(chain + piece, digest_size=HASH_BYTES).digest()
        out.append(int.from_bytes(chain, "little") >> 1)  # 63 bits: a JSON integer every reader takes
    return out


class Recorder:
    """Lines appended to ``path`` by one thread, in the order answers end."""

    def __init__(self, path: Path, block_tokens: int) -> None:
        self.path, self.block = path, block_tokens
        self.start_ns = time.monotonic_ns()
        self.written = self.dropped = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="servelab-record")
        self._lock = threading.Lock()

    def note(self, counter: TokenCounter | None, path: str, body: dict[str, Any], arrived_ns: int,
             usage: dict[str, Any]) -> None:  # fmt: skip
        """Hand an answered request to the recording thread (called on the event loop: nothing heavy here)."""
        self._pool.submit(self._write, counter, path, body, arrived_ns, usage)

    def _write(self, counter: TokenCounter | None, path: str, body: dict[str, Any], arrived_ns: int,
               usage: dict[str, Any]) -> None:  # fmt: skip
        try:
            line = self.line(counter, path, body, arrived_ns, usage)
        except Exception:  # a prompt the admission could not count, a tokenizer fault: dropped, counted
            line = None
        with self._lock:
            if line is None:
                self.dropped += 1
                return
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:  # one write of the whole line: the gateway's worker processes append to one file
                os.write(fd, (line + "\n").encode())
            finally:
                os.close(fd)
            self.written += 1

    def line(self, counter: TokenCounter | None, path: str, body: dict[str, Any], arrived_ns: int,
             usage: dict[str, Any]) -> str | None:  # fmt: skip
        """The request's trace line, or None where it cannot be made."""
        output = usage.get("completion_tokens")
        if counter is None or not isinstance(output, int) or isinstance(output, bool) or output < 1:
            return None
        ids = counter.prompt_ids(path, body)
        prompt = usage.get("prompt_tokens")
        length = prompt if isinstance(prompt, int) and not isinstance(prompt, bool) and prompt > 0 else len(ids)
        entry: dict[str, Any] = {"timestamp": round((arrived_ns - self.start_ns) / 1e6, 3), "input_length": length,
                                 "output_length": output, "hash_ids": block_hashes(ids, self.block)}  # fmt: skip
        if isinstance(body.get("user"), str):
            entry["session"] = body["user"]
        return json.dumps(entry)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
