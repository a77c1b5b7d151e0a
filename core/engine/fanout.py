"""Fan-out that decompresses once: a short-lived cache of decompressed segments per process.

With many consumer groups on one queue, each group's pop reads the same new segments within
moments of the others. The first pop decompresses a segment; the pops that follow within
`ttl` seconds reuse the bytes. Segments are immutable once written (offsets only grow; a
retention pass removes whole segments and a recreated partition has a new id), so a
(partition, base offset, last offset, stored size) key names one content for good. Memory is
bounded: at most `max_bytes` of decompressed bytes are held, the least recently used going
first, and nothing is kept past `ttl`.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from core import segments

Key = tuple[int, int, int, int]  # partition id, base offset, last offset, stored size


class SegmentCache:
    def __init__(self, *, max_bytes: int = 16 * 2**20, ttl: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._max = max_bytes
        self._ttl = ttl
        self._clock = clock
        self._held: OrderedDict[Key, tuple[float, bytes]] = OrderedDict()
        self.bytes = 0
        self.hits = 0
        self.misses = 0

    def raw(self, partition_id: int, base_offset: int, last_offset: int, blob: bytes) -> bytes:
        """The decompressed bytes of a stored (already decrypted) segment blob."""
        key = (partition_id, base_offset, last_offset, len(blob))
        now = self._clock()
        held = self._held.get(key)
        if held is not None and now - held[0] <= self._ttl:
            self._held.move_to_end(key)
            self.hits += 1
            return held[1]
        self.misses += 1
        raw = segments.decompress(blob)
        if held is not None:
            self._drop(key)
        if len(raw) <= self._max // 4:  # a huge segment is not worth evicting others for
            self._held[key] = (now, raw)
            self.bytes += len(raw)
            self._trim(now)
        return raw

    def _trim(self, now: float) -> None:
        while self._held:
            key, (at, _) = next(iter(self._held.items()))
            if self.bytes <= self._max and now - at <= self._ttl:
                # The oldest-used entry is fresh and within budget; expired entries deeper
                # in the order go when they reach the front or are looked up.
                return
            self._drop(key)

    def _drop(self, key: Key) -> None:
        _, raw = self._held.pop(key)
        self.bytes -= len(raw)


SEGMENTS = SegmentCache()  # the process's cache (the event loop is its only user)
