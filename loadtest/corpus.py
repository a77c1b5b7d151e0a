"""A fixed-seed corpus of ~1 KiB JSON messages that look like real business events.

Real payloads repeat keys and enum values and carry ids, timestamps and decimal amounts; a
random-bytes corpus would make zstd look useless and a constant one would make it look magic.
The zstd ratio of the corpus is reported because it decides how many messages fit through
the storage bandwidth.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import msgspec
import zstandard

_CURRENCIES = ("EUR", "USD", "GBP", "CHF", "JPY")
_STATUSES = ("created", "authorized", "captured", "refunded", "failed")
_COUNTRIES = ("DE", "FR", "IT", "ES", "NL", "US", "GB", "CH", "JP", "BR")
_SKUS = tuple(f"SKU-{n:05d}" for n in range(300))
_WORDS = ("priority", "gift", "fragile", "express", "return", "weekend", "office", "door")


@dataclass(frozen=True, slots=True)
class Corpus:
    """Encoded payload bodies (JSON objects without the run-time envelope)."""

    bodies: tuple[bytes, ...]
    zstd_ratio: float  # raw bytes / zstd level-1 bytes, compressed in segments of 100
    mean_bytes: float


def _event(rng: random.Random, index: int, target: int) -> bytes:
    base = 1_767_225_600_000 + index * 37  # 2026-01-01 in ms, spaced like a busy stream
    lines = []
    for _ in range(rng.randint(2, 5)):
        lines.append({"sku": rng.choice(_SKUS), "qty": rng.randint(1, 9),
                      "unitPrice": round(rng.uniform(0.5, 400), 2)})
    doc: dict[str, object] = {
        "eventId": f"{rng.getrandbits(64):016x}-{index:08d}",
        "type": "order." + rng.choice(_STATUSES),
        "occurredAt": base,
        "customer": {"id": f"cus_{rng.getrandbits(40):010x}",
                     "country": rng.choice(_COUNTRIES), "tier": rng.choice(("gold", "std"))},
        "amount": {"value": round(sum(li["qty"] * li["unitPrice"] for li in lines), 2),  # type: ignore[operator]
                   "currency": rng.choice(_CURRENCIES)},
        "lines": lines,
        "tags": rng.sample(_WORDS, 2),
        "signature": f"{rng.getrandbits(256):064x}",  # incompressible, like a real hmac
    }
    raw = msgspec.json.encode(doc)
    # Pad with a free-text note so every body is close to the target size.
    if len(raw) < target:
        note = " ".join(rng.choice(_WORDS) for _ in range((target - len(raw)) // 7 + 1))
        doc["note"] = note[: max(0, target - len(raw) - 10)]
        raw = msgspec.json.encode(doc)
    return raw


def build_corpus(*, seed: int = 42, size: int = 512, message_bytes: int = 1024) -> Corpus:
    rng = random.Random(seed)
    bodies = tuple(_event(rng, i, message_bytes) for i in range(size))
    raw_total = sum(len(b) for b in bodies)
    compressor = zstandard.ZstdCompressor(level=1)
    packed = sum(len(compressor.compress(b"".join(bodies[i:i + 100])))
                 for i in range(0, len(bodies), 100))
    return Corpus(bodies, raw_total / packed, raw_total / len(bodies))


class Envelope(msgspec.Struct):
    """What a consumer reads back from `data`: producer, sequence, send time (epoch s)."""

    p: int
    s: int
    t: float


def payload(corpus: Corpus, producer: int, seq: int, sent_at: float) -> bytes:
    """The pushed JSON payload: the envelope keys first, then a corpus body."""
    body = corpus.bodies[(producer * 7919 + seq) % len(corpus.bodies)]
    return b'{"p":%d,"s":%d,"t":%.6f,"body":%s}' % (producer, seq, sent_at, body)


def transaction_id(producer: int, seq: int) -> str:
    return f"p{producer}-{seq}"
