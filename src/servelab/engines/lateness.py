"""How late this process reads the bytes the kernel received: the transport adds one reading per socket read."""

from __future__ import annotations

from array import array


class Lateness:
    """How late this process read bytes the kernel had received (read time - kernel stamp), the most recent
    ``size`` reads kept in a ring: a client whose event loop is saturated reads late, whatever its stamps say."""

    def __init__(self, size: int = 1 << 16) -> None:
        self._ring, self._mask, self.count = array("q", bytes(8 * size)), size - 1, 0

    def add(self, late_ns: int) -> None:
        self._ring[self.count & self._mask] = late_ns
        self.count += 1

    def since(self, mark: int) -> list[int]:
        """The readings added after ``count`` was ``mark`` (the ring's most recent, when more were added)."""
        n = min(self.count - mark, len(self._ring))
        return [self._ring[i & self._mask] for i in range(self.count - n, self.count)]


READ_LATENESS = Lateness()
