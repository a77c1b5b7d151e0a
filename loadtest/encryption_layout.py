"""Which layout for encryption at rest, measured: `python -m loadtest.encryption_layout`.

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

import argparse
import functools
import os
import statistics
import time
import uuid
from collections.abc import Callable

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from core.engine import encryption, segments
from loadtest.corpus import build_corpus

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


def measure(frames: list[segments.Frame], rounds: int, budget: float
            ) -> dict[str, dict[str, float]]:
    """Median ratio to `plain` of each figure, per layout."""
    box = Layouts(frames)
    n = len(frames)
    blobs = {layout: box.build(layout) for layout in LAYOUTS}
    for layout in LAYOUTS:  # every layout reads back what it wrote
        assert box.read(layout, blobs[layout], 0, n - 1) == [f.payload for f in frames]
    figures: dict[str, dict[str, list[float]]] = {
        layout: {"build": [], "read all": [], "read one": []} for layout in LAYOUTS}
    for _ in range(rounds):
        for layout in LAYOUTS:
            blob = blobs[layout]
            calls: dict[str, Callable[[], object]] = {
                "build": functools.partial(box.build, layout),
                "read all": functools.partial(box.read, layout, blob, 0, n - 1),
                "read one": functools.partial(box.read, layout, blob, n - 1, n - 1)}
            for name, call in calls.items():
                figures[layout][name].append(_per_call(call, budget))
    out: dict[str, dict[str, float]] = {}
    for layout in LAYOUTS:
        out[layout] = {
            name: statistics.median(v / p for v, p in zip(values, figures["plain"][name]))
            for name, values in figures[layout].items()}
        out[layout]["bytes"] = len(blobs[layout]) / len(blobs["plain"])
        out[layout]["plain us/segment build"] = statistics.median(
            figures["plain"]["build"]) * 1e6
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.encryption_layout",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=0.05,
                        help="CPU seconds per figure per round")
    args = parser.parse_args(argv)
    corpus = build_corpus()
    print(f"corpus: {len(corpus.bodies)} messages, mean {corpus.mean_bytes:.0f} bytes, "
          f"zstd ratio {corpus.zstd_ratio:.2f}")
    print("ratios to plain (medians of per-round ratios); 'plain' column: plain's own cost")
    for size in SIZES:
        frames = [segments.Frame(uuid.uuid4(), f"t{i}", corpus.bodies[i % len(corpus.bodies)])
                  for i in range(size)]
        result = measure(frames, args.rounds, args.budget)
        plain_us = result["plain"]["plain us/segment build"]
        for layout in ("segment", "message"):
            r = result[layout]
            print(f"{size:5} msgs  {layout:8} build x{r['build']:.2f}  read all "
                  f"x{r['read all']:.2f}  read one x{r['read one']:.2f}  stored bytes "
                  f"x{r['bytes']:.2f}   (plain build {plain_us:.0f} us)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
