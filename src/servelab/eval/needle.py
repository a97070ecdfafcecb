"""Needle in a haystack: one record to find among many, generated from a seed, on a length x depth grid."""

from __future__ import annotations

import random
import string
from collections.abc import Awaitable, Callable

from servelab.eval.items import Item

TOKENS_PER_RECORD = 30  # about, for the records below; the target's own count is checked by usage.prompt_tokens
FIRST = ("Ada", "Bruno", "Chiara", "Dmitri", "Elif", "Farah", "Goran", "Hana", "Ivo", "Jonas", "Kenji", "Lena")
LAST = ("Moreau", "Novak", "Okafor", "Petrov", "Quinn", "Rossi", "Sato", "Tanaka", "Ueda", "Varga", "Weiss")
CITIES = ("Lyon", "Graz", "Porto", "Turku", "Brno", "Split", "Gent", "Basel", "Cork", "Pula")
STATUS = ("open", "closed", "pending", "archived")


def _id(rng: random.Random) -> str:
    alphabet = string.ascii_uppercase + string.digits
    return "".join(rng.choices(alphabet, k=3)) + "-" + "".join(rng.choices(alphabet, k=4))


def needle_item(tokens: int, depth: float, seed: int = 0, records: int | None = None) -> Item:
    """About ``tokens`` tokens of records (``records`` of them when given, as fitted to a target's tokenizer);
    the needle's record at ``depth`` (0 = first, 1 = last)."""
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth {depth} is outside 0..1")
    rng = random.Random(f"{seed}:{tokens}:{depth}")
    count = max(2, records or tokens // TOKENS_PER_RECORD)
    at = round(depth * (count - 1))
    needle_owner = "Zelda Quarrington"  # a name no other record can have
    lines, answer = [], ""
    for i in range(count):
        record_id = _id(rng)
        owner = needle_owner if i == at else f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        if i == at:
            answer = record_id
        lines.append(
            f"Record {i + 1:04d}: id={record_id}; owner={owner}; city={rng.choice(CITIES)}; "
            f"status={rng.choice(STATUS)}; amount={rng.randint(10, 9999)}"
        )
    prompt = (
        "Below is a list of records.\n\n"
        + "\n".join(lines)
        + f"\n\nWhat is the id of the record whose owner is {needle_owner}? Answer with the id only."
    )
    return Item(
        id=f"needle-{tokens}-d{depth:g}",
        suite="needle",
        kind="needle",
        prompt=prompt,
        answer=answer,
        category=f"{tokens} tokens",
        max_tokens=24,
        meta={"target_tokens": tokens, "depth": depth, "records": count, "seed": seed},
    )


def needle_grid(lengths: list[int], depths: list[float], seed: int = 0) -> list[Item]:
    return [needle_item(n, d, seed) for n in lengths for d in depths]


async def fit_needle(item: Item, count: Callable[[str], Awaitable[int | None]]) -> Item:
    """The item regenerated with as many records as bring its prompt within 3% of the intended tokens by the
    target's own count (the item unchanged where the target cannot count)."""
    want, depth, seed = item.meta["target_tokens"], item.meta["depth"], item.meta.get("seed", 0)
    for _ in range(4):
        got = await count(item.prompt)
        if got is None or abs(got - want) <= 0.03 * want:
            return item
        records = max(2, round(item.meta["records"] * want / got))
        if records == item.meta["records"]:
            return item
        item = needle_item(want, depth, seed, records)
    return item
