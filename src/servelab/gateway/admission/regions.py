"""The exact count of a render that holds ``strftime_now`` outputs (:mod:`.clock`): exact away from them, one token
a byte near them, so the figure holds for the text of any date.

Rule (a byte-level BPE without a normalizer, :attr:`TokenCounter.plain`; any other tokenizer has no such bound and
the request is uncountable): the tokenizer cuts the text at each match of an added token and tokenizes every piece
alone. When no added token's text can overlap another's (:func:`overlap_free`, checked once at load: no proper
suffix of one is a prefix of one, none is inside another), every occurrence of an added token's text is matched in
any text, so a match whose neighbours are not clock output is matched on every date. Each output's *region* runs
from the nearest such match before it to the nearest after it (the text's ends where there is none, and the whole
text where the vocabulary is not overlap-free). Tokens that touch no region are the same on every date and are
counted as the tokenizer made them; the tokens of a region cover at least one byte each, so they are at most its
bytes with every output at its widest (twice that where the pre-tokenizer adds a prefix space to each piece)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any

from servelab.gateway.admission.clock import Span, extra_bytes


class AddedTokens:
    """The tokenizer's added tokens, read once: their ids, their texts, and whether the texts are overlap-free."""

    def __init__(self, tokenizer: Any) -> None:
        decoder = tokenizer.get_added_tokens_decoder()
        self.text = {i: t.content for i, t in decoder.items() if t.content}
        self.overlap_free = overlap_free(set(self.text.values()))


def overlap_free(contents: set[str]) -> bool:
    """Whether no two occurrences of these texts can overlap in any string (nor one with itself, shifted)."""
    prefixes = {c[:k] for c in contents for k in range(1, len(c))}
    if any(c[k:] in prefixes for c in contents for k in range(1, len(c))):
        return False
    joined = "\x00".join(contents)
    return all(joined.count(c) == 1 for c in contents)


def clocked_tokens(tokenizer: Any, added: AddedTokens, text: str, spans: tuple[Span, ...], prefix_space: bool) -> int:
    """The bound on the tokens of ``text`` (rendered at the reference date, its outputs at ``spans``, in order) on
    any date."""
    encoding = tokenizer.encode(text, add_special_tokens=True)
    bounds = _Bounds(_matches(encoding, added, text) if added.overlap_free else [], spans)
    regions = _merge([bounds.region(span, len(text)) for span in spans])
    starts = [start for start, _ in regions]
    exact = sum(
        1
        for (start, end), sequence in zip(encoding.offsets, encoding.sequence_ids, strict=True)
        if sequence is None or not _touches(regions, starts, start, end)
    )
    widest = sum(len(text[start:end].encode("utf-8", "surrogatepass")) for start, end in regions)
    return exact + (widest + extra_bytes(spans, text)) * (2 if prefix_space else 1)


def _matches(encoding: Any, added: AddedTokens, text: str) -> list[tuple[int, int]]:
    """Where the added tokens the tokenizer matched lie in ``text`` (their own text, not any whitespace they strip)."""
    out = []
    for token, (start, end), sequence in zip(encoding.ids, encoding.offsets, encoding.sequence_ids, strict=True):
        content = added.text.get(token)
        if content is None or sequence is None:
            continue
        at = text.find(content, start, max(end, start + len(content)))
        if at >= 0:
            out.append((at, at + len(content)))
    return out


class _Bounds:
    """The matches and the outputs, in order, for the search of each output's region."""

    def __init__(self, matches: list[tuple[int, int]], spans: tuple[Span, ...]) -> None:
        self.matches, self.spans = matches, spans
        self.match_starts, self.match_ends = [m[0] for m in matches], [m[1] for m in matches]
        self.span_starts = [span.start for span in spans]

    def region(self, span: Span, length: int) -> tuple[int, int]:
        """From the end of the last match before ``span`` to the start of the first after it whose neighbours are
        not clock output (a ``single_word`` token's match depends on its neighbours)."""
        left = next((self.matches[k][1] for k in range(bisect_right(self.match_ends, span.start) - 1, -1, -1)
                     if self._apart(self.matches[k])), 0)  # fmt: skip
        right = next((self.matches[k][0] for k in range(bisect_left(self.match_starts, span.end), len(self.matches))
                      if self._apart(self.matches[k])), length)  # fmt: skip
        return left, right

    def _apart(self, match: tuple[int, int]) -> bool:
        """No output covers the match or the characters right beside it (outputs do not overlap: the one starting
        last before the match's far neighbour is the only one that can reach it)."""
        k = bisect_left(self.span_starts, match[1] + 1) - 1
        return k < 0 or self.spans[k].end < match[0]


def _merge(regions: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(regions):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _touches(regions: list[tuple[int, int]], starts: list[int], start: int, end: int) -> bool:
    """Whether a token at ``[start, end)`` (at the point ``start`` where it has no width) lies in a region, even in
    part (regions are disjoint and in order: only the last one starting before the token's end can reach it)."""
    if end > start:
        k = bisect_left(starts, end) - 1
        return k >= 0 and regions[k][1] > start
    k = bisect_right(starts, start) - 1
    return k >= 0 and regions[k][1] >= start
