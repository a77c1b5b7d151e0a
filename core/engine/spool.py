"""The durable push spool: pushes the database cannot take now, kept on the broker's disk.

A push goes to the spool instead of PostgreSQL while push maintenance is on, while the
database is unreachable, and while the spool still holds anything, so buffered messages
reach the database before anything pushed after them. It is answered `buffered` only once
its records are written and fsynced.

One spool per database per host: `<FILE_BUFFER_DIR>/<database instance id>/`, shared by
every worker of every broker using that directory. Its records are in append-only files
`NNNNNNNNNNNN.spool` (`core.engine.spool_format`), the highest-numbered one taking new records,
the next one started after FILE_BUFFER_EVENTS_PER_FILE records. Why shared rather than one
file per worker: a client whose consecutive pushes land on different workers (several
connections, or a worker that died) must find them in the database in the order it got its
answers; with one file per worker, draining the files one by one reorders them.

Writing. A worker gathers the records of concurrent pushes and writes them as one group
(one write, one fsync) while holding an exclusive `flock` on `write.lock`, so groups of all
workers land in the file one after the other; then it records the new end in the header.
Before writing, it checks that nothing unconfirmed lies past the header's end: a writer
killed mid-write leaves a torn record there, which is cut off (it was never answered); a
writer killed between its fsync and its header update leaves valid records, which are
kept. The lock is the kernel's: a dead process holds none.

Draining. Every worker runs a drain loop (every FILE_BUFFER_FLUSH_MS). While maintenance is
off and the database answers, the one worker that gets the `flock` on `drain.lock` replays
the files in order, FILE_BUFFER_MAX_BATCH records at a time, through the normal write path,
and records after each committed batch how far it got; the others find the lock taken and
wait their turn, so two workers never replay the same records at once, and when the
drainer dies (kill -9) the lock passes to another worker or its replacement. A crash
between a batch's commit and the header update replays the batch again: the transactionId
and message id kept in each record make that a duplicate that writes nothing (within the
queue's dedup window). A drained file other than the newest is deleted; a damaged one
(an invalid record with data after it) is drained up to the damage and kept for an
operator as `NNNNNNNNNNNN.damaged`.

A record the database refuses for good is set aside, not retried: the push would have been
answered 4xx had it come now (a `ClientError`: its queue is at `maxSize`), or it needs an
operator (an `EncryptionError`: its queue has `encryptionEnabled` and this broker no key).
Retrying it would hold the spool, and so every push after it to any queue, until someone
acted. When a batch meets such a refusal, its refused records are tried again one at a time
(a flush is refused whole: a batch may pass a `maxSize` that one record alone does not), and
those refused alone go, fsynced, to `NNNNNNNNNNNN.rejected` (the spool's format, sealed: no
writer appends to it) before the drain goes past them; each is logged with the reason and
counted (`queen_cluster_spool_rejected_total`). A crash between the two may leave a record
there twice; its transactionId makes a second replay of it a duplicate. Any other failure
(the database away, a lock, an error of its own) is retried, in order, as before.

Bounds. The records waiting in the spool may take up to FILE_BUFFER_MAX_BYTES; a push past
that, or one that cannot be written (disk full, I/O error), is refused with
`SpoolUnavailable` (503 and Retry-After) and nothing of it is acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from core.counters import COUNTERS
from core.engine.encryption import EncryptionError
from core.engine.spool_format import (
    DAMAGED,
    DRAINED_AT,
    END_AT,
    FLAGS_AT,
    HEADER_SIZE,
    RECORDS_AT,
    SEALED,
    Ending,
    Header,
    ReadState,
    SpoolRecord,
    encode_header,
    encode_record,
    read_header,
    scan,
    write_field,
)
from core.errors import ClientError, QueenError, ServiceError, StorageUnavailable
from core.logs import RepeatedFailure
from core.waiting import wait_event

log = logging.getLogger(__name__)

SUFFIX = ".spool"
DAMAGED_SUFFIX = ".damaged"
REJECTED_SUFFIX = ".rejected"
_TEMP_SUFFIX = ".creating"
WRITE_LOCK = "write.lock"
DRAIN_LOCK = "drain.lock"
COUNT_SECONDS = 2.0  # how often the drain loop recounts the waiting records

# Writes records through the normal write path; answers, per record, None when it is stored
# (or a duplicate) or why it is not.
Replay = Callable[[list[SpoolRecord]], Awaitable[list[QueenError | None]]]


def _refused_for_good(error: QueenError) -> bool:
    """Will the database refuse this record whenever it is replayed, until an operator acts?"""
    return isinstance(error, (ClientError, EncryptionError))


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


def file_name(seq: int) -> str:
    return f"{seq:012d}{SUFFIX}"


def _seq(name: str) -> int | None:
    stem, dot, suffix = name.partition(".")
    if dot and "." + suffix in (SUFFIX, DAMAGED_SUFFIX, REJECTED_SUFFIX) and stem.isdigit():
        return int(stem)
    return None


class SpoolFiles:
    """The files of one spool directory. Every method blocks: call them in a thread."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def live(self) -> list[int]:
        """Sequence numbers of the spool files (not the damaged ones), in order."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(s for n in names if n.endswith(SUFFIX) and (s := _seq(n)) is not None)

    def path(self, seq: int) -> Path:
        return self.directory / file_name(seq)

    @contextlib.contextmanager
    def locked(self, name: str, *, wait: bool = True) -> Iterator[bool]:
        """Hold the `flock` on a lock file for the block (its own descriptor, so threads of
        one process exclude each other too); with `wait` false, yields False at once when
        another holder has it."""
        if not self.directory.exists():
            self.directory.mkdir(parents=True, exist_ok=True)
            _fsync_directory(self.directory.parent)
        fd = os.open(self.directory / name, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # releases the lock

    def create(self, seq: int) -> None:
        """A new empty file, durably in the directory (under the write lock)."""
        temp = self.directory / (file_name(seq) + _TEMP_SUFFIX)
        fd = os.open(temp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.pwrite(fd, encode_header(Header(HEADER_SIZE, HEADER_SIZE, 0, 0)), 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(temp, self.path(seq))
        _fsync_directory(self.directory)

    def next_seq(self) -> int:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return 1
        return max((s for n in names if (s := _seq(n)) is not None), default=0) + 1

    def set_aside(self, seq: int, fd: int, header: Header | None) -> None:
        """Keep a damaged file for an operator, under a name nobody drains."""
        if header is not None:
            write_field(fd, FLAGS_AT, header.flags | SEALED | DAMAGED)
        with contextlib.suppress(OSError):
            os.rename(self.path(seq), self.directory / f"{seq:012d}{DAMAGED_SUFFIX}")

    def repair(self, fd: int, header: Header) -> Header:
        """Take in what lies past the header's end (under the write lock): valid records (a
        writer died after its fsync, before its header update) are confirmed, a torn tail
        is cut off, and a file damaged there is sealed so nothing is written after it."""
        size = os.fstat(fd).st_size
        if size <= header.end:
            return header
        state = ReadState(header.end)
        found = sum(1 for _ in scan(fd, header.end, size, state))
        if found:
            header.end, header.records = state.offset, header.records + found
            write_field(fd, RECORDS_AT, header.records)
            write_field(fd, END_AT, header.end)
        if state.ending is Ending.DAMAGED:  # drained up to here, then set aside
            header.flags |= SEALED | DAMAGED
            write_field(fd, FLAGS_AT, header.flags)
        else:
            if state.ending is Ending.TORN:
                log.warning("push spool: dropped a torn record (%d bytes, never "
                            "acknowledged) at the end of the file", size - state.offset)
            os.ftruncate(fd, state.offset)
        os.fsync(fd)
        return header

    def append(self, blob: bytes, count: int, *, events_per_file: int,
               max_bytes: int) -> None:
        """Write records after everything else in the spool, fsynced; raises OSError or
        SpoolUnavailable with nothing written."""
        with self.locked(WRITE_LOCK):
            seqs = self.live()
            waiting = self._waiting_bytes(seqs)
            if waiting and waiting + len(blob) > max_bytes:  # an empty spool takes any push
                raise SpoolUnavailable(
                    "the push spool is full: it waits for the database to take it in")
            seq = seqs[-1] if seqs else 0
            fd = os.open(self.path(seq), os.O_RDWR) if seq else -1
            try:
                header = read_header(fd) if seq else None
                if seq and header is None:
                    self.set_aside(seq, fd, None)
                if header is not None:
                    header = self.repair(fd, header)
                if header is None or header.sealed or (
                        header.records and header.records + count > events_per_file):
                    if header is not None and not header.sealed:
                        write_field(fd, FLAGS_AT, header.flags | SEALED)
                    if fd >= 0:
                        os.close(fd)
                    seq = self.next_seq()
                    self.create(seq)
                    fd = os.open(self.path(seq), os.O_RDWR)
                    header = Header(HEADER_SIZE, HEADER_SIZE, 0, 0)
                try:
                    if os.pwrite(fd, blob, header.end) != len(blob):
                        raise OSError(errno.ENOSPC, "short write")
                    os.fsync(fd)
                except OSError:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, header.end)
                    raise
                # Confirmed only now; a reader never looks past `end`.
                write_field(fd, RECORDS_AT, header.records + count)
                write_field(fd, END_AT, header.end + len(blob))
            finally:
                if fd >= 0:
                    os.close(fd)

    def _waiting_bytes(self, seqs: list[int]) -> int:
        total = 0
        for seq in seqs:
            with contextlib.suppress(FileNotFoundError), _opened(self.path(seq)) as fd:
                header = read_header(fd)
                if header is not None:
                    total += header.end - header.drained
        return total

    def next_to_drain(self) -> tuple[int, Header] | None:
        """The oldest file with records to replay (with its header), deleting drained files
        on the way; None when everything is drained."""
        with self.locked(WRITE_LOCK):
            seqs = self.live()
            for seq in seqs:
                with _opened(self.path(seq)) as fd:
                    header = read_header(fd)
                    if header is None:
                        log.error("push spool file %s has no valid header; kept as damaged",
                                  file_name(seq))
                        self.set_aside(seq, fd, None)
                        continue
                    if seq == seqs[-1] and not header.sealed:
                        header = self.repair(fd, header)
                    if header.drained < header.end:
                        return seq, header
                    if header.flags & DAMAGED:
                        self.set_aside(seq, fd, header)
                    elif header.sealed or seq != seqs[-1]:
                        self.path(seq).unlink()
            return None

    def read_batch(self, seq: int, header: Header, limit: int, state: ReadState
                   ) -> list[tuple[SpoolRecord, int]]:
        with _opened(self.path(seq)) as fd:
            return [(r, offset) for r, offset in itertools.islice(
                scan(fd, header.drained, header.end, state), limit) if r is not None]

    def mark_drained(self, seq: int, offset: int) -> None:
        with _opened(self.path(seq)) as fd:
            write_field(fd, DRAINED_AT, offset)

    def reject(self, seq: int, records: Sequence[SpoolRecord]) -> Path:
        """Append records to the file of those set aside from file `seq`, fsynced (only the
        drainer calls it, under the drain lock); answers its path."""
        path = self.directory / f"{seq:012d}{REJECTED_SUFFIX}"
        blob = b"".join(encode_record(r) for r in records)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            header = read_header(fd)
            if header is None:  # new, or its creation was cut short: nothing in it counts
                header = Header(HEADER_SIZE, HEADER_SIZE, 0, SEALED)
                os.pwrite(fd, encode_header(header), 0)
            if os.pwrite(fd, blob, header.end) != len(blob):
                raise OSError(errno.ENOSPC, "short write")
            os.fsync(fd)
            write_field(fd, RECORDS_AT, header.records + len(records))
            write_field(fd, END_AT, header.end + len(blob))
            os.fsync(fd)  # before the drain goes past them
        finally:
            os.close(fd)
        _fsync_directory(self.directory)
        return path

    def mark_damaged(self, seq: int) -> None:
        """An invalid record below the confirmed end: nothing after it can be trusted."""
        with _opened(self.path(seq)) as fd:
            header = read_header(fd)
            if header is not None:
                write_field(fd, DRAINED_AT, header.end)
            self.set_aside(seq, fd, header)

    def waiting_records(self) -> int:
        """Records in the spool not yet in the database."""
        total = 0
        for seq in self.live():
            with contextlib.suppress(FileNotFoundError), _opened(self.path(seq)) as fd:
                header = read_header(fd)
                if header is not None:
                    state = ReadState(header.drained)
                    total += sum(1 for _ in scan(fd, header.drained, header.end, state,
                                                 decode=False))
        return total


@dataclass(slots=True)
class _Append:
    blob: bytes
    count: int
    future: asyncio.Future[None]


class Spool:
    """One worker's side of the spool: its group writer, the `busy` check of the push path,
    and the drain loop."""

    def __init__(self, settings: SpoolSettings) -> None:
        self.settings = settings
        self.files = SpoolFiles(settings.directory)
        self._queue: list[_Append] = []
        self._writer: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()
        self._stopping = asyncio.Event()
        self._probe: tuple[int, int] | None = None  # (seq, fd) of the newest file
        self.database_down = False
        self.failed = 0  # records this worker refused because the spool could not take them
        self.last_waiting = 0  # records waiting, as last counted (for the metrics)
        # What fails here fails again 10 times a second (the drain loop) or at every push
        # until an operator acts (EMFILE, a full disk, permissions): logged when it starts,
        # about once a minute while it lasts, and when it clears. One each, so that one
        # path working again does not restart another's series.
        self._unreadable = RepeatedFailure(log)  # `busy`
        self._uncounted = RepeatedFailure(log)  # `waiting`
        self._undrained = RepeatedFailure(log)  # the drain loop
        self._unwritable = RepeatedFailure(log)  # refused appends

    # --- the push path -----------------------------------------------------------------------

    def busy(self) -> bool:
        """Does the spool hold records not yet in the database? (A few system calls: the
        push path asks before every write, so that a push answered `buffered` by any
        worker is never overtaken by a later push written directly.) A spool directory
        that cannot be read counts as empty: pushes go to the database, which answers."""
        try:
            busy = self._busy()
        except OSError as exc:
            self._unreadable.failed(logging.WARNING, "push spool directory unreadable (%s); "
                                    "pushes go to the database", exc)
            if self._probe is not None:
                with contextlib.suppress(OSError):
                    os.close(self._probe[1])
                self._probe = None
            return False
        self._unreadable.cleared("push spool directory readable again")
        return busy

    def _busy(self) -> bool:
        if self._probe is not None:
            header = read_header(self._probe[1])
            if header is not None and not header.sealed:
                return header.drained < header.end
            os.close(self._probe[1])
            self._probe = None
        seqs = self.files.live()
        if not seqs:
            return False
        if len(seqs) > 1:
            return True  # older files are drained first; look again next time
        try:
            fd = os.open(self.files.path(seqs[0]), os.O_RDONLY)
        except FileNotFoundError:
            return True
        header = read_header(fd)
        if header is None or header.sealed:
            os.close(fd)
            return True
        self._probe = (seqs[0], fd)
        return header.drained < header.end

    async def append(self, records: Sequence[SpoolRecord]) -> None:
        """Write records durably; returns once they are fsynced. Raises SpoolUnavailable when
        the spool is full or the write failed (nothing of them was acknowledged)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.add_done_callback(_retrieve)
        self._queue.append(_Append(b"".join(encode_record(r) for r in records),
                                   len(records), future))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_queued(), name="spool-writer")
        await asyncio.shield(future)  # once queued, written whether or not the caller waits

    async def _write_queued(self) -> None:
        """Write what is queued as groups (one write and fsync each) until nothing is."""
        settings = self.settings
        while self._queue:
            group: list[_Append] = []
            count = 0
            while self._queue and (not group or count + self._queue[0].count
                                   <= settings.events_per_file):
                group.append(self._queue.pop(0))
                count += group[-1].count
            try:
                await asyncio.to_thread(
                    self.files.append, b"".join(a.blob for a in group), count,
                    events_per_file=settings.events_per_file, max_bytes=settings.max_bytes)
            except (OSError, SpoolUnavailable) as exc:
                self._refuse(group, exc)
                continue
            self._unwritable.cleared("push spool takes pushes again")
            for append in group:
                if not append.future.done():
                    append.future.set_result(None)

    def _refuse(self, group: list[_Append], exc: OSError | SpoolUnavailable) -> None:
        if isinstance(exc, SpoolUnavailable):
            error = exc
        else:
            reason = ("the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT)
                      else exc.strerror or str(exc))
            error = SpoolUnavailable(f"the push spool cannot be written: {reason}")
        count = sum(a.count for a in group)
        self.failed += count
        self._unwritable.failed(logging.WARNING, "push spool refused %d records: %s", count,
                                error.message)
        for append in group:
            if not append.future.done():
                append.future.set_exception(error)

    # --- draining ------------------------------------------------------------------------------

    def kick(self) -> None:
        """Look at the spool now (maintenance ended, the database came back)."""
        self._kick.set()

    def stop(self) -> None:
        self._stopping.set()
        self._kick.set()

    async def run_forever(self, replay: Replay, *, paused: Callable[[], bool],
                          healthy: Callable[[], Awaitable[bool]]) -> None:
        """Drain while maintenance is off and the database answers, until `stop`; recount
        what waits every COUNT_SECONDS (for the metrics)."""
        next_count = 0.0
        while not self._stopping.is_set():
            await wait_event(self._kick, self.settings.flush_ms / 1000)
            self._kick.clear()
            if time.monotonic() >= next_count:
                next_count = time.monotonic() + COUNT_SECONDS
                await self.waiting()
            if self._stopping.is_set() or paused():
                continue
            if self.database_down:
                if not await healthy():
                    continue
                self.database_down = False
                log.info("the database answers again; draining the push spool")
            try:
                if self.busy() or await asyncio.to_thread(self._unsettled):
                    await self._drain(replay, paused)
            except StorageUnavailable:
                self.database_down = True
            except QueenError as exc:
                self._undrained.failed(logging.WARNING, "push spool drain failed (%s); "
                                       "retrying", exc.message)
            except OSError as exc:
                self._undrained.failed(logging.ERROR, "push spool drain failed: %s", exc)
            else:
                self._undrained.cleared("push spool drain works again")

    def _unsettled(self) -> bool:
        """Anything for the drainer besides confirmed records: older files to delete, or
        records a dead writer left unconfirmed past the newest file's end."""
        seqs = self.files.live()
        if len(seqs) != 1:
            return len(seqs) > 1
        with contextlib.suppress(FileNotFoundError), _opened(self.files.path(seqs[0])) as fd:
            header = read_header(fd)
            return header is None or os.fstat(fd).st_size > header.end
        return False

    async def _drain(self, replay: Replay, paused: Callable[[], bool]) -> None:
        """Replay the spool in order while this worker holds the drain lock."""
        files = self.files
        with files.locked(DRAIN_LOCK, wait=False) as mine:
            if not mine:
                return  # another worker is draining
            while not self._stopping.is_set() and not paused():
                target = await asyncio.to_thread(files.next_to_drain)
                if target is None:
                    return
                seq, header = target
                state = ReadState(header.drained)
                batch = await asyncio.to_thread(files.read_batch, seq, header,
                                                self.settings.max_batch, state)
                if batch:
                    refused = await _replay_batch(replay, [record for record, _ in batch])
                    if refused:
                        await self._set_aside(seq, refused)
                    await asyncio.to_thread(files.mark_drained, seq, batch[-1][1])
                elif state.ending is not Ending.CLEAN:
                    log.error("push spool file %s is damaged at byte %d (below what its "
                              "writers confirmed); the records before it were written, the "
                              "file is kept as %s", file_name(seq), state.offset,
                              f"{seq:012d}{DAMAGED_SUFFIX}")
                    await asyncio.to_thread(files.mark_damaged, seq)

    async def _set_aside(self, seq: int, refused: list[tuple[SpoolRecord, QueenError]]
                         ) -> None:
        path = await asyncio.to_thread(self.files.reject, seq, [r for r, _ in refused])
        COUNTERS.add("spool_rejected", len(refused))
        # One line per queue and reason: a batch of a full queue is one line, not a hundred.
        why: dict[tuple[str, str], list[str]] = {}
        for record, error in refused:
            why.setdefault((record.queue, error.message), []).append(record.transaction_id)
        for (queue, reason), txids in why.items():
            log.error("push spool: set aside %d record(s) of queue %r the database refuses "
                      "(%s), kept in %s; transactionIds %s%s", len(txids), queue, reason,
                      path.name, ", ".join(txids[:10]), ", ..." if len(txids) > 10 else "")

    async def waiting(self) -> int:
        """Records in the spool not yet in the database (every worker's); 0 when the
        directory cannot be read."""
        try:
            self.last_waiting = await asyncio.to_thread(self.files.waiting_records)
        except OSError as exc:
            self._uncounted.failed(logging.WARNING, "push spool directory unreadable (%s); "
                                   "its records are not counted", exc)
            self.last_waiting = 0
        else:
            self._uncounted.cleared("push spool directory counted again")
        return self.last_waiting

    async def close(self) -> None:
        """Finish the writes in flight (what the spool holds waits for the next drainer)."""
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)
        if self._probe is not None:
            os.close(self._probe[1])
            self._probe = None


async def _replay_batch(replay: Replay, records: list[SpoolRecord]
                        ) -> list[tuple[SpoolRecord, QueenError]]:
    """Replay records; answer those the database refuses for good, with why. Any other
    failure raises: the batch is replayed again later (what did commit is a duplicate then)."""
    errors = await replay(records)
    _raise_retryable(errors)
    refused = [(r, e) for r, e in zip(records, errors) if e is not None]
    if len(records) == 1 or not refused:
        return refused
    # A flush is refused whole, so a record may be refused only for the company it kept
    # (the batch passes a maxSize that it alone does not): each is tried again alone, in order.
    alone = []
    for record, _ in refused:
        (error,) = await replay([record])
        _raise_retryable([error])
        if error is not None:
            alone.append((record, error))
    return alone


def _raise_retryable(errors: Sequence[QueenError | None]) -> None:
    for error in errors:
        if error is not None and not _refused_for_good(error):
            raise error


@contextlib.contextmanager
def _opened(path: Path) -> Iterator[int]:
    fd = os.open(path, os.O_RDWR)
    try:
        yield fd
    finally:
        os.close(fd)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _retrieve(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()
