"""The durable push spool: pushes a worker cannot write to the database now, kept on its disk.

A push goes to the spool instead of PostgreSQL while push maintenance is on, while the
database is unreachable, and while this worker's spool still holds anything (so a worker's
buffered messages reach the database in the order it took them, before anything newer). A
push written to the spool is answered `buffered` only after its records are on disk and
fsynced; pushes that arrive while one fsync runs share the next (group commit).

Files. Each worker appends to its own files under `<FILE_BUFFER_DIR>/<database instance
id>/` (`core.spool_format` describes a file); a file takes up to FILE_BUFFER_EVENTS_PER_FILE
records, then the worker starts the next. A worker holds an exclusive `flock` on every file
it owns, from creation (made under a temporary name, locked, then renamed into place) until
it has drained and deleted it. The kernel drops the lock when the process dies, however it
dies, so any worker (its replacement, a sibling, a broker started later on the same
directory) claims a dead worker's file by taking the lock, and two workers never drain one
file at once. A claimer also checks that the path still names the file it locked: the
owner may have deleted it between the claimer's open and lock.

Draining. When maintenance is off and the database answers, a background loop (every
FILE_BUFFER_FLUSH_MS) replays the worker's own files oldest first, and any unlocked file in
the directory, in batches of FILE_BUFFER_MAX_BATCH records through the normal write path.
After each batch commits, the file's header records how far it got; a crash in between
replays that batch again, and the transactionId and message id kept in each record make the
replay a duplicate that writes nothing (within the queue's dedup window). A drained file is
deleted.

Bounds. A worker's undrained spool is limited to FILE_BUFFER_MAX_BYTES; a push past that, or
one that cannot be written (disk full, I/O error), is refused with `SpoolUnavailable` (503
and Retry-After) and nothing of it is acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import itertools
import logging
import os
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.errors import QueenError, ServiceError, StorageUnavailable
from core.spool_format import (
    HEADER_SIZE,
    Ending,
    ReadState,
    SpoolRecord,
    encode_header,
    encode_record,
    read_header,
    scan,
)

log = logging.getLogger(__name__)

SUFFIX = ".spool"
DAMAGED_SUFFIX = ".damaged"  # kept for an operator: an invalid record with data after it
_TEMP_SUFFIX = ".creating"
ORPHAN_SCAN_SECONDS = 1.0  # how often a worker looks for files nobody holds

Replay = Callable[[list[SpoolRecord]], Awaitable[None]]


class SpoolUnavailable(ServiceError):
    """The push spool cannot take this push now; retry shortly."""

    retry_after_seconds = 2


@dataclass(frozen=True, slots=True)
class SpoolSettings:
    directory: Path  # this database's spool directory
    flush_ms: int = 100
    max_batch: int = 100
    events_per_file: int = 10_000
    max_bytes: int = 1 << 30


class SpoolFile:
    """One spool file, locked by this process. Its methods block: call them in a thread."""

    def __init__(self, path: Path, fd: int, end: int, drained: int) -> None:
        self.path = path
        self.fd = fd
        self.end = end  # where the next record goes (own files) or the size when claimed
        self.drained = drained
        self.records = 0  # records appended by this process
        self.replayed = 0  # records written to the database by this process
        self.sealed = False  # takes no more records

    @classmethod
    def create(cls, directory: Path) -> SpoolFile:
        """A new, empty, locked file, durably in the directory."""
        if not directory.exists():
            directory.mkdir(parents=True, exist_ok=True)
            _fsync_directory(directory.parent)
        name = f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}"
        temp = directory / (name + _TEMP_SUFFIX)
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.pwrite(fd, encode_header(HEADER_SIZE), 0)
            os.fsync(fd)
            path = directory / (name + SUFFIX)
            os.rename(temp, path)  # claimers only look at complete, locked files
            _fsync_directory(directory)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                temp.unlink()
            raise
        return cls(path, fd, HEADER_SIZE, HEADER_SIZE)

    @classmethod
    def claim(cls, path: Path) -> SpoolFile | None:
        """Lock a file nobody holds; None when a live process holds it or it is gone."""
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # Its owner may have drained and deleted it between our open and our lock.
            if os.stat(path).st_ino != os.fstat(fd).st_ino:
                raise FileNotFoundError(path)
        except (BlockingIOError, FileNotFoundError):
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        drained = read_header(fd)
        size = os.fstat(fd).st_size
        claimed = cls(path, fd, size, HEADER_SIZE if drained is None else min(drained, size))
        claimed.sealed = True
        if drained is None:
            claimed.drained = size  # no valid header: nothing in it can be trusted
            claimed.mark_damaged()
        return claimed

    def append(self, blob: bytes, count: int) -> None:
        """Write records at the end and fsync; on failure cut the file back to what it held
        before and take no more records in it."""
        try:
            written = os.pwrite(self.fd, blob, self.end)
            if written != len(blob):
                raise OSError(errno.ENOSPC, "short write to the spool")
            os.fsync(self.fd)
        except OSError:
            self.sealed = True
            with contextlib.suppress(OSError):
                os.ftruncate(self.fd, self.end)
                os.fsync(self.fd)
            raise
        self.end += len(blob)
        self.records += count

    def read_batch(self, limit: int, state: ReadState) -> list[tuple[SpoolRecord, int]]:
        """Up to `limit` records from the drained offset, each with the offset past it."""
        return [(record, offset) for record, offset in itertools.islice(
            scan(self.fd, self.drained, self.end, state), limit) if record is not None]

    def save_drained(self, offset: int) -> None:
        self.drained = offset
        os.pwrite(self.fd, encode_header(offset), 0)

    def mark_damaged(self) -> None:
        """Keep the file for an operator under a name no worker claims (`remove` then
        leaves it there)."""
        damaged = self.path.with_suffix(DAMAGED_SUFFIX)
        with contextlib.suppress(OSError):
            os.rename(self.path, damaged)
            self.path = damaged

    def remove(self) -> None:
        """Delete the file (still holding its lock), then release it; a damaged one stays."""
        if self.path.suffix != DAMAGED_SUFFIX:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self.close()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.fd = -1


def pending_records(path: Path) -> int:
    """Records not yet drained in a file (counted by their lengths, not checked)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    try:
        drained = read_header(fd)
        if drained is None:
            return 0
        state = ReadState(drained)
        return sum(1 for _ in scan(fd, drained, os.fstat(fd).st_size, state, decode=False))
    finally:
        os.close(fd)


@dataclass(slots=True)
class _Append:
    blob: bytes
    count: int
    future: asyncio.Future[None]


class Spool:
    """One worker's spool: its files, the group-fsync writer, and the drain loop."""

    def __init__(self, settings: SpoolSettings) -> None:
        self.settings = settings
        self.directory = settings.directory
        self._files: deque[SpoolFile] = deque()  # own files, oldest first
        self._active: SpoolFile | None = None  # the one taking records
        self._queue: deque[_Append] = deque()
        self._writer: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()
        self._kick = asyncio.Event()
        self._stopping = asyncio.Event()
        self.database_down = False
        self.pending = 0  # own records not yet in the database (queued, on disk)
        self.bytes = 0  # bytes of those records
        self.failed = 0  # records refused because they could not be written

    # --- taking pushes ---------------------------------------------------------------------

    @property
    def backlog(self) -> bool:
        """Does this worker hold buffered records not yet in the database?"""
        return self.pending > 0 or bool(self._files)

    async def append(self, records: Sequence[SpoolRecord]) -> None:
        """Write records durably; returns once they are fsynced. Raises SpoolUnavailable when
        the spool is over its size limit or the write failed (nothing was acknowledged)."""
        blob = b"".join(encode_record(r) for r in records)
        if self.pending and self.bytes + len(blob) > self.settings.max_bytes:
            self.failed += len(records)
            raise SpoolUnavailable(
                f"the push spool is full ({self.bytes} bytes waiting for the database)")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(_Append(blob, len(records), future))
        self.pending += len(records)
        self.bytes += len(blob)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_queued(), name="spool-writer")
        await asyncio.shield(future)  # once queued, written whether or not the caller waits

    async def _write_queued(self) -> None:
        while self._queue:
            async with self._write_lock:
                group: list[_Append] = []
                try:
                    file = self._active
                    if file is None or file.sealed or \
                            file.records >= self.settings.events_per_file:
                        if file is not None:
                            file.sealed = True
                        file = self._active = await asyncio.to_thread(
                            SpoolFile.create, self.directory)
                        self._files.append(file)
                    count = file.records
                    while self._queue and (not group or count + self._queue[0].count
                                           <= self.settings.events_per_file):
                        group.append(self._queue.popleft())
                        count += group[-1].count
                    await asyncio.to_thread(file.append, b"".join(a.blob for a in group),
                                            sum(a.count for a in group))
                except OSError as exc:
                    if not group:  # the file could not be made: fail everything queued
                        group, self._queue = list(self._queue), deque()
                    self._refuse(group, exc)
                    continue
                for append in group:
                    if not append.future.done():
                        append.future.set_result(None)

    def _refuse(self, group: list[_Append], exc: OSError) -> None:
        reason = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else str(exc)
        log.error("push spool write failed (%s); %d records refused", reason,
                  sum(a.count for a in group))
        for append in group:
            self.pending -= append.count
            self.bytes -= len(append.blob)
            self.failed += append.count
            if not append.future.done():
                append.future.set_exception(
                    SpoolUnavailable(f"the push spool cannot be written: {reason}"))
            append.future.add_done_callback(_retrieve)

    # --- draining ----------------------------------------------------------------------------

    def kick(self) -> None:
        """Look at the spool now (maintenance ended, the database came back)."""
        self._kick.set()

    def stop(self) -> None:
        self._stopping.set()
        self._kick.set()

    async def run_forever(self, replay: Replay, *, paused: Callable[[], bool],
                          healthy: Callable[[], Awaitable[bool]]) -> None:
        """Drain while maintenance is off and the database answers, until `stop`."""
        next_scan = 0.0
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), self.settings.flush_ms / 1000)
            self._kick.clear()
            if self._stopping.is_set() or paused():
                continue
            if self.database_down:
                if not await healthy():
                    continue
                self.database_down = False
                log.info("the database answers again; draining the push spool")
            try:
                if self._files or self._queue:
                    await self._drain_own(replay)
                if time.monotonic() >= next_scan:
                    next_scan = time.monotonic() + ORPHAN_SCAN_SECONDS
                    await self._drain_orphans(replay)
            except StorageUnavailable:
                self.database_down = True
            except QueenError as exc:
                log.warning("push spool drain failed (%s); retrying", exc.message)
            except OSError as exc:
                log.error("push spool drain failed: %s", exc)

    async def _drain_own(self, replay: Replay) -> None:
        while self._files and not self._stopping.is_set():
            file = self._files[0]
            if file is self._active:
                async with self._write_lock:  # no write group in flight on it now
                    file.sealed = True
                    self._active = None
            if not await self._drain_file(file, replay):
                return  # stopping: the file stays, with its lock, until close
            self._files.popleft()
            self.pending -= file.records - file.replayed  # 0 unless it was damaged
            self.bytes -= file.end - HEADER_SIZE
            await asyncio.to_thread(file.remove)
        if not self._files and not self._queue:
            self.pending = self.bytes = 0  # nothing of ours is left anywhere

    async def _drain_orphans(self, replay: Replay) -> None:
        for path in await asyncio.to_thread(self._orphan_paths):
            if self._stopping.is_set() or self.database_down:
                return
            file = await asyncio.to_thread(SpoolFile.claim, path)
            if file is None:
                continue
            log.info("claimed the push spool file %s of a stopped worker", path.name)
            try:
                if await self._drain_file(file, replay):
                    await asyncio.to_thread(file.remove)
            finally:
                file.close()

    def _orphan_paths(self) -> list[Path]:
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        own = {f.path.name for f in self._files}
        return [self.directory / n for n in names if n.endswith(SUFFIX) and n not in own]

    async def _drain_file(self, file: SpoolFile, replay: Replay) -> bool:
        """Replay a sealed file from its drained offset to its end; True when the file is
        finished with (every valid record written; a torn tail dropped; a damaged file set
        aside), False when the loop is stopping. Raises what a replay raised."""
        state = ReadState(file.drained)
        own = file in self._files
        while True:
            if self._stopping.is_set():
                return False
            batch = await asyncio.to_thread(file.read_batch, self.settings.max_batch, state)
            if not batch:
                break
            await replay([record for record, _ in batch])
            await asyncio.to_thread(file.save_drained, batch[-1][1])
            file.replayed += len(batch)
            if own:
                self.pending -= len(batch)
        if state.ending is Ending.TORN:
            log.warning("push spool file %s ends in a torn record (%d bytes, never "
                        "acknowledged); dropped", file.path.name, file.end - state.offset)
        elif state.ending is Ending.DAMAGED:
            log.error("push spool file %s is damaged at byte %d; the records before it were "
                      "written, the file is kept as %s", file.path.name, state.offset,
                      file.path.with_suffix(DAMAGED_SUFFIX).name)
            await asyncio.to_thread(file.mark_damaged)
        return True

    def waiting_elsewhere(self) -> int:
        """Records waiting in the directory's files other than this worker's (blocking)."""
        own = {f.path.name for f in self._files}
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return 0
        return sum(pending_records(self.directory / n) for n in names
                   if n.endswith(SUFFIX) and n not in own)

    async def close(self) -> None:
        """Finish the writes in flight and release every file (what is left in them is
        drained by whichever worker claims them next)."""
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
        for file in self._files:
            file.close()
        self._files.clear()
        self._active = None


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()
