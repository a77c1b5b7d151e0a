"""Encryption at rest: a stored segment of an `encryptionEnabled` queue is sealed with
AES-256-GCM under QUEEN_ENCRYPTION_KEY.

A sealed segment is the zstd blob of its frames (core/segments.py), encrypted once, whole:

    "QSE" 0x01 | 8-byte key id | 12-byte random nonce | AES-256-GCM(zstd blob) | 16-byte tag

The associated data is the header (magic + key id) and the segment's place (queue and
partition names), so a segment moved to another partition's rows fails authentication
instead of being read as that partition's messages. Offsets are not bound: the write path
learns them only inside the append statement, after the blob was built.

Why whole segments and not each payload: loadtest/probes/encryption_layout.py measures both
(one call per flush instead of one per message; ciphertext does not compress, so encrypting
before compression also loses the compression); docs/security/encryption.md.

A plain segment is a zstd frame (magic 28 b5 2f fd), so sealed and plain segments tell
themselves apart: turning encryption on leaves older segments plain and readable, and the
reader opens whatever it finds. The key is a process-wide secret read once at start-up
(`install`); readers and the write path reach it here rather than through every call.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Mapping

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from core.env import SettingsError
from core.errors import QueenError

ENV_NAME = "QUEEN_ENCRYPTION_KEY"
MAGIC = b"QSE\x01"
KEY_ID_SIZE = 8
NONCE_SIZE = 12  # 96 bits, random per seal: the GCM nonce size with no derivation step
TAG_SIZE = 16
HEADER_SIZE = len(MAGIC) + KEY_ID_SIZE + NONCE_SIZE
_U16 = struct.Struct("<H")
# What the key check (core/storage/keycheck.py) encrypts, and its associated data.
CHECK_PLAINTEXT = b"queen encryption key check v1"
CHECK_PLACE = ("", "queen key check")


class EncryptionError(QueenError):
    """A stored segment is encrypted and cannot be opened (no key, another key, or data
    altered), or a write needs a key this process does not have."""


class EncryptionKeyMismatch(QueenError):
    """QUEEN_ENCRYPTION_KEY is not the key this database's encrypted data was written with."""


def key_from_env(env: Mapping[str, str]) -> bytes | None:
    """QUEEN_ENCRYPTION_KEY: unset or empty = no key; otherwise exactly 64 hex characters."""
    raw = env.get(ENV_NAME, "").strip()
    if not raw:
        return None
    # The value is a secret: an error names its shape, never the value.
    wanted = f"{ENV_NAME} must be exactly 64 hex characters (a 32-byte AES-256 key)"
    if len(raw) != 64:
        raise SettingsError(f"{wanted}; it has {len(raw)} characters")
    try:
        key = bytes.fromhex(raw)
    except ValueError:
        key = b""
    if len(key) != 32:  # fromhex also skips spaces: 64 characters are not always 32 bytes
        raise SettingsError(f"{wanted}; it has characters that are not hex")
    return key


def key_id(key: bytes) -> bytes:
    """A short public name of a key: tells "another key" from "altered data" in errors,
    and reveals nothing useful about the key (an HMAC of a constant under it)."""
    return hmac.new(key, b"queen key id v1", hashlib.sha256).digest()[:KEY_ID_SIZE]


class SegmentCipher:
    """Seals and opens segment blobs under one key."""

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("an AES-256 key has 32 bytes")
        self._aead = AESGCM(key)
        self.key_id = key_id(key)
        self._header = MAGIC + self.key_id

    def seal(self, blob: bytes, queue: str, partition: str) -> bytes:
        nonce = os.urandom(NONCE_SIZE)
        sealed = self._aead.encrypt(nonce, blob, self._header + _place(queue, partition))
        return b"".join((self._header, nonce, sealed))

    def open(self, sealed: bytes, queue: str, partition: str) -> bytes:
        where = f"a stored segment of queue {queue!r}, partition {partition!r}"
        if len(sealed) < HEADER_SIZE + TAG_SIZE:
            raise EncryptionError(f"{where} is encrypted but truncated")
        written_with = bytes(sealed[len(MAGIC):len(MAGIC) + KEY_ID_SIZE])
        if written_with != self.key_id:
            raise EncryptionError(
                f"{where} was encrypted with key id {written_with.hex()}, but "
                f"{ENV_NAME} has key id {self.key_id.hex()}: set the key it was written with")
        try:
            return self._aead.decrypt(bytes(sealed[len(MAGIC) + KEY_ID_SIZE:HEADER_SIZE]),
                                      bytes(sealed[HEADER_SIZE:]),
                                      self._header + _place(queue, partition))
        except InvalidTag:
            raise EncryptionError(f"{where} fails authentication under {ENV_NAME}: the data "
                                  f"was altered or belongs elsewhere") from None


def _place(queue: str, partition: str) -> bytes:
    q, p = queue.encode(), partition.encode()
    return b"".join((_U16.pack(len(q)), q, _U16.pack(len(p)), p))


_cipher: SegmentCipher | None = None


def install(key: bytes | None) -> None:
    """The process's key (None: no key; encrypted queues then refuse writes and reads)."""
    global _cipher
    _cipher = SegmentCipher(key) if key is not None else None


def cipher() -> SegmentCipher | None:
    return _cipher


def is_sealed(blob: bytes) -> bool:
    return bytes(blob[:len(MAGIC)]) == MAGIC


def seal(blob: bytes, queue: str, partition: str) -> bytes:
    """A segment blob of an encrypted queue, sealed with the installed key."""
    if _cipher is None:
        raise EncryptionError(f"queue {queue!r} has encryptionEnabled, but {ENV_NAME} is not "
                              f"set: nothing is written in plain text to an encrypted queue")
    return _cipher.seal(blob, queue, partition)


def opened(blob: bytes, queue: str, partition: str) -> bytes:
    """A stored segment blob ready for core.segments: plain blobs as they are, sealed ones
    decrypted (or an EncryptionError, never garbage)."""
    if not is_sealed(blob):
        return blob
    if _cipher is None:
        raise EncryptionError(f"a stored segment of queue {queue!r}, partition "
                              f"{partition!r} is encrypted, and {ENV_NAME} is not set")
    return _cipher.open(blob, queue, partition)
