"""The correctness gate: bitmaps of pushed and delivered (producer, sequence) pairs.

One bytearray per producer, indexed by sequence: cheap enough to keep for millions of
messages, and mergeable across processes by plain addition. Delivery counts saturate at 255,
which is plenty to tell "once" from "more than once".
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Bitmaps:
    """Per producer: a byte per sequence (acked flag for pushes, count for deliveries)."""

    maps: dict[int, bytearray] = field(default_factory=dict)

    def mark(self, producer: int, seq: int) -> None:
        bits = self.maps.get(producer)
        if bits is None:
            bits = self.maps[producer] = bytearray()
        if seq >= len(bits):
            bits.extend(bytes(seq - len(bits) + 1024))
        if bits[seq] < 255:
            bits[seq] += 1

    def merge(self, other: Bitmaps) -> None:
        for producer, bits in other.maps.items():
            mine = self.maps.setdefault(producer, bytearray())
            if len(mine) < len(bits):
                mine.extend(bytes(len(bits) - len(mine)))
            for i, v in enumerate(bits):
                if v:
                    mine[i] = min(255, mine[i] + v)

    def count(self) -> int:
        return sum(len(b) - b.count(0) for b in self.maps.values())


@dataclass(frozen=True, slots=True)
class GateResult:
    group: str
    pushed: int       # acknowledged pushes
    delivered: int    # distinct acknowledged messages delivered
    missing: int      # acknowledged but never delivered: a lost message
    duplicated: int   # delivered more than once
    unexpected: int   # delivered but never acknowledged (e.g. a push whose answer was lost)
    uncertain: int    # pushes whose answer never came (they may or may not be stored)

    @property
    def passed(self) -> bool:
        return self.missing == 0 and self.duplicated == 0 and self.unexpected <= self.uncertain


def check(group: str, pushed: Bitmaps, delivered: Bitmaps, uncertain: int) -> GateResult:
    missing = duplicated = unexpected = seen = 0
    producers = set(pushed.maps) | set(delivered.maps)
    for producer in producers:
        acked = pushed.maps.get(producer, bytearray())
        got = delivered.maps.get(producer, bytearray())
        n = max(len(acked), len(got))
        acked = acked + bytes(n - len(acked))
        got = got + bytes(n - len(got))
        for a, g in zip(acked, got):
            if a and not g:
                missing += 1
            elif g and not a:
                unexpected += 1
            if a and g:
                seen += 1
            if g > 1:
                duplicated += 1
    return GateResult(group, pushed.count(), seen, missing, duplicated, unexpected, uncertain)
