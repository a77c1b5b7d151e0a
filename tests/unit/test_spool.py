"""The push spool on its own (no database): the file format's torn/damaged verdicts, the
group writer's bounds and failures, crash repair, and drainers that exclude each other.

Replays go to a list instead of the database; the broker-level behaviour is in
tests/integration/test_maintenance.py."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import uuid
from pathlib import Path

import pytest

from core.engine.encryption import EncryptionError
from core.engine.spool import Spool, SpoolFiles, SpoolSettings, SpoolUnavailable, file_name
from core.engine.spool_format import (
    HEADER_SIZE,
    Ending,
    ReadState,
    SpoolRecord,
    encode_record,
    read_header,
    scan,
)
from core.errors import CapacityExceeded, QueenError, StorageUnavailable
from core.logs import RepeatedFailure


def _record(n: int, size: int = 10) -> SpoolRecord:
    return SpoolRecord(uuid.uuid4(), f"t{n}", "q", "Default", b'"' + b"x" * size + b'"',
                       uuid.uuid4() if n % 2 else None, "sub" if n % 3 else None)


def _scan(blob: bytes, tmp_path: Path) -> tuple[list[SpoolRecord], ReadState]:
    path = tmp_path / "blob"
    path.write_bytes(blob)
    fd = os.open(path, os.O_RDONLY)
    try:
        state = ReadState(0)
        records = [r for r, _ in scan(fd, 0, len(blob), state) if r is not None]
    finally:
        os.close(fd)
    return records, state


def test_records_round_trip_and_a_cut_or_zeroed_tail_is_torn(tmp_path: Path) -> None:
    records = [_record(n) for n in range(3)]
    blob = b"".join(encode_record(r) for r in records)
    assert _scan(blob, tmp_path) == (records, ReadState(len(blob), Ending.CLEAN))
    last = encode_record(_record(9))
    for cut in (1, 7, 8, len(last) - 1):  # inside the length, the checksum, the body
        got, state = _scan(blob + last[:cut], tmp_path)
        assert got == records and state == ReadState(len(blob), Ending.TORN), cut
    got, state = _scan(blob + b"\0" * 4096, tmp_path)  # extended by a crash, never written
    assert got == records and state.ending is Ending.TORN


def test_a_bad_record_with_data_after_it_is_damage_not_a_torn_tail(tmp_path: Path) -> None:
    records = [_record(n) for n in range(2)]
    good = b"".join(encode_record(r) for r in records)
    bad = bytearray(encode_record(_record(5)))
    bad[12] ^= 0x01  # one flipped bit in the body
    got, state = _scan(good + bytes(bad) + encode_record(_record(6)), tmp_path)
    assert got == records and state == ReadState(len(good), Ending.DAMAGED)
    # The same flipped bit as the very last record: torn (never acknowledged).
    got, state = _scan(good + bytes(bad), tmp_path)
    assert got == records and state.ending is Ending.TORN


def _spool(tmp_path: Path, **settings: int) -> Spool:
    return Spool(SpoolSettings(tmp_path / "spool", flush_ms=10, **settings))


async def _drain_all(spool: Spool, into: list[SpoolRecord]) -> None:
    async def replay(batch: list[SpoolRecord]) -> list[QueenError | None]:
        into.extend(batch)
        return [None] * len(batch)
    await spool._drain(replay, lambda: False)


async def test_files_rotate_and_drain_in_order(tmp_path: Path) -> None:
    spool = _spool(tmp_path, events_per_file=4, max_batch=3)
    records = [_record(n) for n in range(11)]
    await asyncio.gather(*(spool.append([r]) for r in records[:5]))
    await spool.append(records[5:])
    assert len(spool.files.live()) >= 3 and spool.busy()
    assert spool.files.waiting_records() == 11
    replayed: list[SpoolRecord] = []
    await _drain_all(spool, replayed)
    assert replayed == records
    assert not spool.busy() and spool.files.waiting_records() == 0
    assert len(spool.files.live()) == 1  # only the newest file stays
    await spool.close()


async def test_a_full_spool_refuses_and_keeps_what_it_acknowledged(tmp_path: Path) -> None:
    spool = _spool(tmp_path, max_bytes=1024)
    first = [_record(n, size=300) for n in range(2)]
    await spool.append(first)  # an empty spool takes any push
    with pytest.raises(SpoolUnavailable, match="full"):
        await spool.append([_record(7, size=600)])
    assert spool.failed == 1
    replayed: list[SpoolRecord] = []
    await _drain_all(spool, replayed)
    assert replayed == first
    await spool.append([_record(8, size=600)])  # room again once drained
    await spool.close()


async def test_a_failed_write_is_refused_cut_back_and_the_next_one_lands(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spool = _spool(tmp_path)
    kept = [_record(0)]
    await spool.append(kept)
    real_fsync = os.fsync
    failing = {"on": True}

    def fsync(fd: int) -> None:
        if failing["on"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(SpoolUnavailable, match="disk is full"):
        await spool.append([_record(1)])
    failing["on"] = False
    later = [_record(2)]
    await spool.append(later)
    replayed: list[SpoolRecord] = []
    await _drain_all(spool, replayed)
    assert replayed == kept + later  # the refused record was never written
    await spool.close()


async def test_a_writer_killed_after_its_fsync_leaves_records_the_next_writer_keeps(
        tmp_path: Path) -> None:
    spool = _spool(tmp_path)
    await spool.append([_record(0)])
    path = spool.files.path(spool.files.live()[-1])
    # What a writer killed between its fsync and its header update leaves: valid records
    # past the confirmed end, then half of one more (killed inside a write).
    unconfirmed = _record(1)
    path.write_bytes(path.read_bytes() + encode_record(unconfirmed)
                     + encode_record(_record(2))[:5])
    after = _record(3)
    await spool.append([after])
    fd = os.open(path, os.O_RDONLY)
    header = read_header(fd)
    os.close(fd)
    assert header is not None and header.records == 3 and header.end == path.stat().st_size
    replayed: list[SpoolRecord] = []
    await _drain_all(spool, replayed)
    assert [r.transaction_id for r in replayed] == ["t0", "t1", "t3"]
    await spool.close()


async def test_a_record_refused_for_good_is_set_aside_and_can_be_replayed_later(
        tmp_path: Path) -> None:
    spool = _spool(tmp_path, max_batch=4)
    records = [_record(n) for n in range(6)]
    await spool.append(records)
    refused = {"t1": CapacityExceeded("full"), "t4": EncryptionError("no key")}
    outage = {"on": True}
    stored: list[str] = []

    async def replay(batch: list[SpoolRecord]) -> list[QueenError | None]:
        if outage["on"] and len(batch) == 2:  # the second batch first meets an outage
            outage["on"] = False
            raise StorageUnavailable()
        errors = [refused.get(r.transaction_id) for r in batch]
        stored.extend(r.transaction_id for r, e in zip(batch, errors) if e is None)
        return errors

    with pytest.raises(StorageUnavailable):  # retried later, from where it stopped
        await spool._drain(replay, lambda: False)
    assert stored == ["t0", "t2", "t3"] and spool.files.waiting_records() == 2
    await spool._drain(replay, lambda: False)
    assert stored == ["t0", "t2", "t3", "t5"] and not spool.busy()
    (kept,) = spool.settings.directory.glob("*.rejected")
    fd = os.open(kept, os.O_RDONLY)
    header = read_header(fd)
    assert header is not None and header.sealed and header.records == 2
    assert [r for r, _ in scan(fd, header.drained, header.end, ReadState(0))] == [
        records[1], records[4]]
    os.close(fd)
    # What docs/operating/maintenance.md tells an operator: brokers stopped, the file moved
    # back as the newest spool file is replayed (its cause gone now), before what comes after.
    await spool.close()
    refused.clear()
    kept.rename(spool.files.path(spool.files.next_seq()))
    spool = _spool(tmp_path, max_batch=4)  # the broker started again
    await spool.append([_record(6)])
    await spool._drain(replay, lambda: False)
    assert stored[4:] == ["t1", "t4", "t6"] and not spool.busy()
    await spool.close()


async def test_two_drainers_never_replay_the_same_records(tmp_path: Path) -> None:
    # Two workers' spools on one directory (separate descriptors, as in two processes).
    first, second = _spool(tmp_path, max_batch=5), _spool(tmp_path, max_batch=5)
    records = [_record(n) for n in range(40)]
    await first.append(records[:20])
    await second.append(records[20:])
    replayed: list[SpoolRecord] = []

    async def slow_replay(batch: list[SpoolRecord]) -> list[QueenError | None]:
        await asyncio.sleep(0.01)
        replayed.extend(batch)
        return [None] * len(batch)

    for _ in range(20):
        await asyncio.gather(first._drain(slow_replay, lambda: False),
                             second._drain(slow_replay, lambda: False))
        if not first.busy():
            break
    assert replayed == records
    await first.close()
    await second.close()


def test_only_spool_files_count_and_names_sort_in_order(tmp_path: Path) -> None:
    files = SpoolFiles(tmp_path)
    for name in (file_name(2), file_name(10), "000000000003.damaged", "x.spool",
                 file_name(4) + ".creating", "write.lock"):
        (tmp_path / name).write_bytes(b"")
    assert files.live() == [2, 10]
    assert files.next_seq() == 11
    assert HEADER_SIZE == 40


def test_with_an_encryption_key_no_payload_is_spooled_in_plain_text(tmp_path: Path) -> None:
    from core.engine import encryption

    secret = b'{"card": "4111-1111-1111-1111"}'
    record = SpoolRecord(uuid.uuid4(), "t-enc", "q", "p", secret)
    encryption.install(bytes(range(32)))
    try:
        blob = encode_record(record)
        assert secret not in blob and b"4111" not in blob
        got, state = _scan(blob, tmp_path)
        assert state.ending is Ending.CLEAN and [r.payload for r in got] == [secret]
        encryption.install(None)  # the same spool read without the key: refused, not garbage
        with pytest.raises(encryption.EncryptionError):
            _scan(blob, tmp_path)
    finally:
        encryption.install(None)
    assert secret in encode_record(record)  # without a key the spool keeps the JSON as sent


async def test_an_unusable_spool_directory_is_logged_when_it_starts_and_when_it_clears(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A file where the spool directory should be: every look at it fails (as it does with
    # EMFILE, or a directory it may not read). The drain loop looks every 10 ms here and the
    # push path at every push: that was two log lines per loop turn and one per push.
    spool = _spool(tmp_path)
    spool.settings.directory.write_bytes(b"")
    caplog.set_level(logging.INFO, logger="core.engine.spool")

    async def healthy() -> bool:
        return True

    async def replay(batch: list[SpoolRecord]) -> None:
        raise AssertionError("nothing to replay")

    async def run_for(seconds: float) -> None:
        loop = asyncio.create_task(spool.run_forever(replay, paused=lambda: False,
                                                     healthy=healthy))
        for _ in range(int(seconds / 0.002)):
            assert not spool.busy()  # unreadable counts as empty: pushes go to the database
            await asyncio.sleep(0.002)
        spool.stop()
        await loop
        spool._stopping.clear()

    await run_for(1.0)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines  # busy, the drain loop, the count: once each
    assert any("unreadable" in line and "pushes go to the database" in line
               for line in lines), lines
    assert any("drain failed" in line for line in lines), lines
    caplog.clear()

    spool.settings.directory.unlink()
    await run_for(0.3)  # usable again: one line each that it cleared, then quiet
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and all("again" in line for line in lines), lines
    await spool.close()


def test_a_repeated_failure_is_logged_again_once_a_minute_with_its_count(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    failure = RepeatedFailure(logging.getLogger("t"), clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="t")
    for n in range(1201):  # 2 minutes, every 100 ms
        now[0] = n / 10
        failure.failed(logging.ERROR, "drain failed: %s", "EMFILE")
    failure.cleared("drain works")
    failure.cleared("drain works")
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.ERROR, "drain failed: EMFILE"),
        (logging.ERROR, "drain failed: EMFILE (600 times in the last 60 s)"),
        (logging.ERROR, "drain failed: EMFILE (600 times in the last 60 s)"),
        (logging.INFO, "drain works (after failing 1201 times)")]
    caplog.clear()
    failure.failed(logging.ERROR, "drain failed: %s", "EACCES")  # a new series
    assert [r.getMessage() for r in caplog.records] == ["drain failed: EACCES"]
