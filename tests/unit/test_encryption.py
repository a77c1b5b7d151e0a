"""The sealed-segment envelope (core/engine/encryption.py) and QUEEN_ENCRYPTION_KEY's parsing."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from core import segments
from core.engine import encryption
from core.engine.encryption import EncryptionError, SegmentCipher, key_from_env
from core.env import SettingsError

KEY = bytes(range(32))


@pytest.fixture
def installed() -> Iterator[None]:
    encryption.install(KEY)
    yield
    encryption.install(None)


def _blob() -> bytes:
    return segments.pack([segments.Frame(uuid.uuid4(), "t", b'{"secret":"SECRET-VALUE"}')])


def test_a_key_is_64_hex_characters_and_a_bad_one_is_named_never_echoed() -> None:
    assert key_from_env({"QUEEN_ENCRYPTION_KEY": KEY.hex().upper()}) == KEY
    assert key_from_env({}) is None and key_from_env({"QUEEN_ENCRYPTION_KEY": " "}) is None
    spaced = "aa   " + " ".join(["aa"] * 20)  # 64 characters that fromhex reads as 21 bytes
    assert len(spaced) == 64 and len(bytes.fromhex(spaced)) == 21
    for bad in ("abc", KEY.hex()[:-2] + "zz", KEY.hex() + "00", "secret-passphrase", spaced):
        with pytest.raises(SettingsError) as info:
            key_from_env({"QUEEN_ENCRYPTION_KEY": bad})
        assert str(info.value).startswith("QUEEN_ENCRYPTION_KEY must be exactly 64 hex")
        assert bad not in str(info.value)


def test_sealed_segments_open_to_the_blob_and_hide_its_bytes() -> None:
    cipher, blob = SegmentCipher(KEY), _blob()
    sealed = cipher.seal(blob, "q", "p")
    assert encryption.is_sealed(sealed) and not encryption.is_sealed(blob)
    assert b"SECRET-VALUE" not in sealed and blob not in sealed
    assert len(sealed) == len(blob) + encryption.HEADER_SIZE + encryption.TAG_SIZE
    assert cipher.open(sealed, "q", "p") == blob
    # A fresh nonce per seal: the same blob never seals to the same bytes.
    nonces = {cipher.seal(blob, "q", "p")[12:24] for _ in range(100)}
    assert len(nonces) == 100


@pytest.mark.parametrize(("queue", "partition"), [("q", "other"), ("other", "p"),
                                                  ("qp", ""), ("", "qp")])
def test_a_segment_opened_as_another_partitions_fails_authentication(
        queue: str, partition: str) -> None:
    cipher = SegmentCipher(KEY)
    sealed = cipher.seal(_blob(), "q", "p")
    with pytest.raises(EncryptionError, match="fails authentication"):
        cipher.open(sealed, queue, partition)


def test_an_altered_byte_anywhere_fails_and_another_key_is_named() -> None:
    cipher = SegmentCipher(KEY)
    sealed = cipher.seal(_blob(), "q", "p")
    for at in range(len(encryption.MAGIC) + encryption.KEY_ID_SIZE, len(sealed)):
        altered = bytearray(sealed)
        altered[at] ^= 1
        with pytest.raises(EncryptionError):
            cipher.open(bytes(altered), "q", "p")
    other = SegmentCipher(os.urandom(32))
    with pytest.raises(EncryptionError, match=f"key id {cipher.key_id.hex()}.*"
                                              f"key id {other.key_id.hex()}"):
        other.open(sealed, "q", "p")
    with pytest.raises(EncryptionError, match="truncated"):
        cipher.open(sealed[:30], "q", "p")


def test_opened_passes_plain_blobs_and_needs_the_key_for_sealed_ones(installed: None) -> None:
    blob = _blob()
    sealed = encryption.seal(blob, "q", "p")
    assert encryption.opened(blob, "q", "p") == blob
    assert encryption.opened(sealed, "q", "p") == blob
    encryption.install(None)
    assert encryption.opened(blob, "q", "p") == blob
    with pytest.raises(EncryptionError, match="QUEEN_ENCRYPTION_KEY is not set"):
        encryption.opened(sealed, "q", "p")
    with pytest.raises(EncryptionError, match="nothing is written in plain text"):
        encryption.seal(blob, "q", "p")
