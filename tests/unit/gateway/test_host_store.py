"""The host store: the state every worker process of one host shares through a memory-mapped file. Leases and
admissions under a lock; the prefill in flight one counter per store, added up by readers over live processes
only; a dead process's slot taken over by the next store that opens."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from servelab.gateway.store import HostStore, Limits, reset_host_store
from servelab.gateway.store.host import COUNT

OPEN = Limits(threshold=10**6, budget=10**6)


def test_stores_on_one_file_share_flags_and_the_prefill_budget(tmp_path: Path) -> None:
    path = str(tmp_path / "state")
    reset_host_store(path)

    async def run() -> list[object]:
        one, two = HostStore(path), HostStore(path)
        seen: list[object] = [one.slot != two.slot]
        await one.hold("realtime", "voice", 60)
        seen.append((await two.snapshot()).realtime)
        await one.admit("a", 3000, OPEN)
        await two.admit("b", 5000, OPEN)
        seen.append((await two.snapshot()).prefill_tokens)
        await one.release("a")
        got = await two.snapshot()
        seen.append((got.realtime, got.prefill_tokens))
        await one.close()
        seen.append((await two.snapshot()).prefill_tokens)
        three = HostStore(path)  # takes the slot the closed store gave back
        seen.append(three.slot == one.slot)
        await two.close()
        await three.close()
        return seen

    assert asyncio.run(run()) == [True, True, 8000, (True, 5000), 5000, True]


def test_a_dead_workers_prefill_is_dropped_when_its_slot_is_taken_over(tmp_path: Path) -> None:
    path = str(tmp_path / "state")
    reset_host_store(path)
    worker = (  # a worker that dies (SIGKILL) with 700 prompt tokens in flight
        "import asyncio, os, signal, sys\n"
        "from servelab.gateway.store import HostStore\n"
        "store = HostStore(sys.argv[1])\n"
        "from servelab.gateway.store import Limits\n"
        "asyncio.run(store.admit('r', 700, Limits(1000, 1000)))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", worker, path], check=False)
    assert done.returncode == -9

    async def run() -> tuple[int, int, int]:
        store = HostStore(path)  # the dead worker's slot: taken over, its tokens gone
        first = store.slot
        left = (await store.snapshot()).prefill_tokens
        await store.admit("r", 40, OPEN)
        total = (await store.snapshot()).prefill_tokens
        await store.close()
        return first, left, total

    assert asyncio.run(run()) == (0, 0, 40)


def test_a_state_file_with_nonsense_in_it_still_opens(tmp_path: Path) -> None:
    """A state file someone else wrote (a slot count far past the page): read as bounded, never past the map."""
    path = tmp_path / "state"
    reset_host_store(str(path))
    with open(path, "r+b") as f:
        f.seek(COUNT)
        f.write((10**12).to_bytes(8, "little"))

    async def run() -> int:
        store = HostStore(str(path))
        await store.admit("r", 5, OPEN)
        total = (await store.snapshot()).prefill_tokens
        await store.close()
        return total

    assert asyncio.run(run()) == 5


def test_a_dead_workers_charges_stop_counting_at_once(tmp_path: Path) -> None:
    """A worker killed with -9 while holding charges: a live worker stops counting them as soon as the process is
    gone (its slot's owner is checked at every read), before anything takes the slot over."""
    path = str(tmp_path / "state")
    reset_host_store(path)
    worker = (
        "import asyncio, os, signal, sys\n"
        "from servelab.gateway.store import HostStore, Limits\n"
        "store = HostStore(sys.argv[1])\n"
        "asyncio.run(store.admit('r', 700, Limits(1000, 1000)))\n"
        "print('charged', flush=True)\n"
        "sys.stdin.read()\n"
    )

    async def total(store: HostStore) -> int:
        return (await store.snapshot()).prefill_tokens

    live = HostStore(path)
    proc = subprocess.Popen([sys.executable, "-c", worker, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"charged\n"
        assert asyncio.run(total(live)) == 700
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert asyncio.run(total(live)) == 0
    asyncio.run(live.close())


def test_garbage_in_the_lease_table_reads_as_no_lease(tmp_path: Path) -> None:
    path = tmp_path / "state"
    reset_host_store(str(path))
    with open(path, "r+b") as f:
        f.seek(HostStore.SIZE - 32 * 1024)  # the realtime leases' blob
        f.write((20).to_bytes(4, "little") + b'{"a": [1, "x"], "b"')

    async def run() -> tuple[bool, int]:
        store = HostStore(str(path))
        await store.hold("realtime", "voice", 30)  # the garbage is replaced, the lease taken
        state = await store.state()
        await store.close()
        return state.realtime.on, len(state.realtime.leases)

    assert asyncio.run(run()) == (True, 1)
