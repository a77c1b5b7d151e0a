"""The key check: a database holding encrypted segments is opened only with their key.

At the first start with QUEEN_ENCRYPTION_KEY the broker stores the key's id and a constant
sealed under it (queen.encryption_key). Every later start verifies it: another key, or no
key at all, refuses to start with a message naming QUEEN_ENCRYPTION_KEY, because segments
sealed under the stored key may exist and would not open. So a wrong key fails loudly at
start-up instead of failing reads one by one (which still fail cleanly, never with garbage:
core/engine/encryption.py).

A database that never saw a key has no encrypted segments; it starts without one, and a
queue left with encryptionEnabled from before (configure accepted the flag before
encryption existed) refuses pushes until a key is set or the flag is turned off.
"""

from __future__ import annotations

import logging

from core.engine import encryption
from core.engine.encryption import ENV_NAME, EncryptionKeyMismatch
from core.settings import Settings
from core.storage import encryption_keys as sql
from core.storage.database import connect_with_retry
from core.storage.errors import storage_errors
from core.storage.statements import Conn

log = logging.getLogger(__name__)


async def check_key(conn: Conn, key: bytes | None) -> None:
    """Verify `key` against the database's key check (storing it at the first start with a
    key); raise EncryptionKeyMismatch when this process may not open the database."""
    if key is not None:
        cipher = encryption.SegmentCipher(key)
        await sql.insert_key_check(conn, key_id=cipher.key_id, check_value=cipher.seal(
            encryption.CHECK_PLAINTEXT, *encryption.CHECK_PLACE))
    stored = await sql.read_key_check(conn)
    if stored is None:
        if key is None:
            await _warn_about_encrypted_queues(conn)
        return
    since = stored.created_at.date().isoformat()
    if key is None:
        raise EncryptionKeyMismatch(
            f"{ENV_NAME} is not set, but this database holds data encrypted under the key "
            f"with id {stored.key_id.hex()} (in use since {since}): set {ENV_NAME} to that key")
    try:
        opened = encryption.SegmentCipher(key).open(stored.check_value,
                                                    *encryption.CHECK_PLACE)
    except encryption.EncryptionError:
        opened = None
    if opened != encryption.CHECK_PLAINTEXT:
        raise EncryptionKeyMismatch(
            f"{ENV_NAME} (key id {encryption.key_id(key).hex()}) is not the key this "
            f"database's encrypted data was written with (key id {stored.key_id.hex()}, in "
            f"use since {since}); refusing to start")


async def _warn_about_encrypted_queues(conn: Conn) -> None:
    names = await sql.encrypted_queue_names(conn, limit=5)
    if names:
        log.warning("queues with encryptionEnabled (%s%s) refuse pushes: %s is not set",
                    ", ".join(names), ", ..." if len(names) == 5 else "", ENV_NAME)


async def verify_encryption_key(settings: Settings, dsn: str) -> None:
    """`check_key` on a connection of its own: a start-up step of `serve`, which refuses
    at once with one clear message instead of through workers that keep dying."""
    conn = await connect_with_retry(dsn, settings, 30.0)
    try:
        with storage_errors():
            await check_key(conn, settings.encryption_key)
    finally:
        await conn.close()
