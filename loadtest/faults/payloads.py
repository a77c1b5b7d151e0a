"""Message payloads that carry their own identity and a checksum.

A payload names its producer, sequence and variant (0 for the first write of a
transactionId, 1 for a deliberate re-send with a different body) and a CRC over all of it,
so a consumer and the checker can tell a corrupted or swapped payload from the real one.
"""

from __future__ import annotations

import zlib
from typing import Any


def _crc(producer: str, seq: int, variant: int, pad: str) -> str:
    return format(zlib.crc32(f"{producer}|{seq}|{variant}|{pad}".encode()), "08x")


def make(producer: str, seq: int, variant: int, pad: str) -> dict[str, Any]:
    return {"p": producer, "s": seq, "v": variant, "x": pad,
            "c": _crc(producer, seq, variant, pad)}


def intact(payload: Any) -> bool:
    """True when the payload is one of ours and its checksum matches."""
    try:
        return bool(payload["c"] == _crc(payload["p"], payload["s"], payload["v"], payload["x"]))
    except (KeyError, TypeError):
        return False


def txid(producer: str, seq: int) -> str:
    return f"{producer}-{seq}"
