"""The host store: the state every worker process of one host shares through a memory-mapped file. Flags under a
lock; the prefill in flight one lock-free counter per store, added up by readers; a dead process's counter taken
over by the next store that opens."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from servelab.gateway.store import HostStore, reset_host_store


def test_stores_on_one_file_share_flags_and_the_prefill_budget(tmp_path: Path) -> None:
    path = str(tmp_path / "state")
    reset_host_store(path)

    async def run() -> list[object]:
        one, two = HostStore(path), HostStore(path)
        seen: list[object] = [one.slot != two.slot]
        await one.set_flag("realtime", True, 0.0, ttl=60)
        seen.append(await two.flag("realtime", 0.0))
        await one.add_prefill(3000)
        seen.append(await two.add_prefill(5000))
        await one.add_prefill(-3000)
        seen.append((await two.snapshot(0.0))[1:])
        await one.close()
        seen.append(await two.prefill())
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
        "asyncio.run(store.add_prefill(700))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", worker, path], check=False)
    assert done.returncode == -9

    async def run() -> tuple[int, int, int]:
        store = HostStore(path)  # the dead worker's slot: taken over, its tokens gone
        first = store.slot
        left = await store.prefill()
        await store.add_prefill(40)
        total = await store.prefill()
        await store.close()
        return first, left, total

    assert asyncio.run(run()) == (0, 0, 40)


def test_a_state_file_with_nonsense_in_it_still_opens(tmp_path: Path) -> None:
    """A state file someone else wrote (a slot count far past the page): read as bounded, never past the map."""
    path = tmp_path / "state"
    reset_host_store(str(path))
    with open(path, "r+b") as f:
        f.seek(HostStore.COUNT)
        f.write((10**12).to_bytes(8, "little"))

    async def run() -> int:
        store = HostStore(str(path))
        await store.add_prefill(5)
        total = await store.prefill()
        await store.close()
        return total

    assert asyncio.run(run()) == 5
