"""Which layout for encryption at rest, measured: `python -m loadtest probe encryption_layout`.

In-process, on the corpus of loadtest/corpus.py (~1 KiB business events), for segments of
1, 10, 100 and 1000 messages, alternating in the same run (`--rounds`, medians):

- `plain`: frames packed and compressed (what a plain queue stores);
- `segment`: the same blob, sealed once with AES-256-GCM (core/engine/encryption.py);
- `message`: each payload sealed on its own (12-byte nonce + ciphertext + 16-byte tag in
  the frame, flag 4), then frames packed and compressed.

Per layout: CPU to build a segment (the flush), to read all of it (a JSON pop of the whole
segment, fetch), to read one message of it (a pop of 1 from a large segment), and the bytes
stored, each as a ratio to `plain`. Nothing here touches the network or a database.
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections.abc import Callable

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from core import segments
from core.engine import encryption
from loadtest.corpus import build_corpus
from loadtest.probes.rounds import Rounds, arguments, in_turn

SIZES = (1, 10, 100, 1000)
LAYOUTS = ("plain", "segment", "message")


class Layouts:
    """Build and read one segment of `frames` in each layout."""

    def __init__(self, frames: list[segments.Frame]) -> None:
        key = os.urandom(32)
        self.cipher = encryption.SegmentCipher(key)
        self.aead = AESGCM(key)
        self.frames = frames

    def build(self, layout: str) -> bytes:
        if layout == "plain":
            return segments.pack(self.frames)
        if layout == "segment":
            return self.cipher.seal(segments.pack(self.frames), "queue", "partition")
        sealed = []
        for f in self.frames:
            nonce = os.urandom(12)
            sealed.append(segments.Frame(f.message_id, f.transaction_id,
                                         nonce + self.aead.encrypt(nonce, f.payload,
                                                                   f.message_id.bytes)))
        return segments.pack(sealed)

    def read(self, layout: str, blob: bytes, first: int, last: int) -> list[bytes]:
        if layout == "plain":
            return [f.payload for f in segments.unpack_range(blob, first, last)]
        if layout == "segment":
            opened = self.cipher.open(blob, "queue", "partition")
            return [f.payload for f in segments.unpack_range(opened, first, last)]
        return [self.aead.decrypt(f.payload[:12], f.payload[12:], f.message_id.bytes)
                for f in segments.unpack_range(blob, first, last)]


def _per_call(fn: Callable[[], object], budget: float) -> float:
    """Seconds per call, repeating `fn` for about `budget` seconds of CPU."""
    calls, start = 0, time.process_time()
    while True:
        fn()
        calls += 1
        spent = time.process_time() - start
        if spent >= budget:
            return spent / calls


class Sizes:
    """One segment of each size in every layout, its blobs checked to read back."""

    def __init__(self, corpus_bodies: tuple[bytes, ...]) -> None:
        self.boxes: dict[int, tuple[Layouts, dict[str, bytes]]] = {}
        for size in SIZES:
            frames = [segments.Frame(uuid.uuid4(), f"t{i}",
                                     corpus_bodies[i % len(corpus_bodies)])
                      for i in range(size)]
            box = Layouts(frames)
            blobs = {layout: box.build(layout) for layout in LAYOUTS}
            for layout in LAYOUTS:  # every layout reads back what it wrote
                assert box.read(layout, blobs[layout], 0, size - 1) == [
                    f.payload for f in frames]
            self.boxes[size] = box, blobs

    def round(self, rounds: Rounds, round_index: int, budget: float) -> None:
        """Each figure of each layout once (CPU seconds per call), layouts in turn."""
        for size, (box, blobs) in self.boxes.items():
            for layout in in_turn(LAYOUTS, round_index):
                blob = blobs[layout]
                calls: dict[str, Callable[[], object]] = {
                    "build": functools.partial(box.build, layout),
                    "read all": functools.partial(box.read, layout, blob, 0, size - 1),
                    "read one": functools.partial(box.read, layout, blob, size - 1, size - 1)}
                for name, call in calls.items():
                    rounds.add(f"{size} msgs {layout} {name} us", _per_call(call, budget) * 1e6)


def main(argv: list[str] | None = None) -> int:
    parser = arguments("encryption_layout", __doc__ or "", rounds=5, connections=None,
                       fast_database=False)
    parser.add_argument("--budget", type=float, default=0.05,
                        help="CPU seconds per figure per round")
    args = parser.parse_args(argv)
    corpus = build_corpus()
    rounds = Rounds("encryption_layout", args)
    rounds.detail("corpus", {"messages": len(corpus.bodies), "mean_bytes": corpus.mean_bytes,
                             "zstd_ratio": corpus.zstd_ratio})
    sizes = Sizes(corpus.bodies)
    for r in range(args.rounds):
        sizes.round(rounds, r, args.budget)
        rounds.end_round()
    for size, (_, blobs) in sizes.boxes.items():
        for layout in ("segment", "message"):
            for name in ("build", "read all", "read one"):
                rounds.ratio(f"{size} msgs {layout} / plain {name}",
                             f"{size} msgs {layout} {name} us", f"{size} msgs plain {name} us")
            rounds.detail(f"{size} msgs {layout} / plain stored bytes",
                          round(len(blobs[layout]) / len(blobs["plain"]), 4))
    return rounds.finish()


if __name__ == "__main__":
    raise SystemExit(main())
