"""`python -m loadtest scale`: the partition-scale cell (issue 26, item 5).

Per partition count N, from outside, on a fresh database of the durable embedded PostgreSQL
and a fresh broker (2 web workers by default), the way the other cells run:

* **seed**: one queue holding one message in each of N partitions (`p0` .. `p{N-1}`), pushed
  through the HTTP batch push (1,000 items a request over a few connections): through the
  broker's own write path, so the seed does not depend on the schema of the checkout measured.
* **drain** at each width (default 1 and 10 partitions a pop): `--consumers` consumers (4)
  pop without waiting (batch 100, `partitions=<width>`) and ack every popped batch, for
  `--drain-seconds`; a group that has drained all N gives way to a fresh group (which starts
  at the oldest message), so a small queue is measured over the same time as a large one.
  Figure: delivered messages per second. Each group's deliveries are checked: none twice,
  and a group that ran to the end got all N.
* **caught-up poll**: a group moved to the end of every partition (the seek route, `toEnd`:
  a group that has consumed everything) polls with `wait=false` from `--pollers`
  connections back to back for `--poll-seconds` (at most `--max-polls`). Figures: latency
  p50/p99, every answer must be 204; PostgreSQL CPU per poll.
* **quiet**: nothing runs for `--quiet-seconds`: PostgreSQL's own CPU per wall second (the
  floor under the idle figure).
* **idle**: `--idle-consumers` caught-up consumers (100) of that group long-poll
  (`wait=true`, `--idle-timeout-ms`) for `--idle-seconds`. Figure: PostgreSQL CPU seconds per
  wall second, of the broker's database backends and of the whole server (psutil on the pids
  of the PostgreSQL this command started).
* **claim statements** (loadtest/claims.py) in every phase: how many the broker ran and how
  many found nothing.

Before the caught-up phase the database is vacuumed and analysed (VACUUM ANALYZE, from
outside, the same for every checkout), so autovacuum after the seed and the drains does not
land inside the idle windows.

Ratios: every figure against the smallest N of the same run; with `--compare-root`, also
this checkout's figures against the other checkout's at the same N (both in the same run,
alternating per N). Writes `loadtest/results/scale-<run>.json` and `.txt` (also printed).
Everything on 127.0.0.1; only processes this command started are stopped (by pid).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import asyncpg
import msgspec
import psutil  # type: ignore[import-untyped]

from loadtest import claims, launch
from loadtest.httpc import Connection, HttpError
from loadtest.report import RESULTS
from loadtest.stats import Histogram

SEED_ITEMS = 1000  # messages per seed push request
SEED_CONNECTIONS = 4
POP_BATCH = 100


def add_parser(sub: Any) -> None:
    p = sub.add_parser("scale", help="the partition-scale cell: drain, caught-up polls and "
                                     "idle cost at 100 / 10k / 100k partitions",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--partitions", type=int, nargs="+", default=[100, 10_000, 100_000])
    p.add_argument("--workers", type=int, default=2, help="broker web workers")
    p.add_argument("--consumers", type=int, default=4, help="drain consumers")
    p.add_argument("--widths", type=int, nargs="+", default=[1, 10],
                   help="partitions per pop in the drain")
    p.add_argument("--drain-seconds", type=float, default=10.0)
    p.add_argument("--pollers", type=int, default=4, help="connections polling caught up")
    p.add_argument("--poll-seconds", type=float, default=8.0)
    p.add_argument("--max-polls", type=int, default=5000)
    p.add_argument("--quiet-seconds", type=float, default=5.0)
    p.add_argument("--idle-consumers", type=int, default=100)
    p.add_argument("--idle-seconds", type=float, default=60.0)
    p.add_argument("--idle-timeout-ms", type=int, default=10_000,
                   help="long-poll timeout of each idle pop")
    p.add_argument("--broker-root", type=Path,
                   help="run the broker from another checkout (it migrates its database)")
    p.add_argument("--compare-root", type=Path,
                   help="also run the broker of this checkout (the 'before'), alternating per "
                        "partition count, and report this run's figures / its figures")
    p.add_argument("--no-vacuum", action="store_true",
                   help="skip the VACUUM ANALYZE before the caught-up phase")
    p.add_argument("--out", type=Path, default=RESULTS, help="results directory")


# ---------------------------------------------------------------- wire


class _Popped(msgspec.Struct):
    transactionId: str
    partitionId: str
    leaseId: str | None = None


class _PopAnswer(msgspec.Struct):
    messages: list[_Popped] | None = None


class _PushVerdict(msgspec.Struct):
    status: str


_POP = msgspec.json.Decoder(_PopAnswer)
_VERDICTS = msgspec.json.Decoder(list[_PushVerdict])


def _pop_path(queue: str, group: str, *, width: int, wait_ms: int | None = None) -> str:
    wait = f"&wait=true&timeout={wait_ms}" if wait_ms else "&wait=false"
    return (f"/api/v1/pop/queue/{quote(queue, safe='')}?batch={POP_BATCH}&partitions={width}"
            f"&consumerGroup={quote(group, safe='')}&subscriptionMode=all{wait}")


# ---------------------------------------------------------------- CPU of process trees


class Cpu:
    """CPU seconds of a process tree between `start()` and `stop()`, per pid (processes that
    come and go are counted for the time seen), split into the broker database's backends
    (process title names the database) and everything else of the tree."""

    def __init__(self, root_pid: int | None, database: str | None = None) -> None:
        self.root_pid = root_pid
        self.database = database
        self._first: dict[int, tuple[float, bool]] = {}
        self._wall = 0.0

    def _read(self) -> dict[int, tuple[float, bool]]:
        out: dict[int, tuple[float, bool]] = {}
        if not self.root_pid:
            return out
        try:
            root = psutil.Process(self.root_pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return out
        for proc in procs:
            try:
                t = proc.cpu_times()
                title = " ".join(proc.cmdline()) if self.database else ""
            except psutil.Error:
                continue
            backend = (self.database is not None and self.database in title
                       and "autovacuum" not in title)
            out[proc.pid] = (t.user + t.system, backend)
        return out

    def start(self) -> None:
        self._first = self._read()
        self._wall = time.monotonic()

    def stop(self) -> dict[str, float]:
        last = self._read()
        wall = time.monotonic() - self._wall
        total = backends = 0.0
        for pid, (cpu, backend) in last.items():
            used = cpu - self._first.get(pid, (0.0, False))[0]
            total += used
            if backend:
                backends += used
        return {"wall_s": round(wall, 3), "cpu_s": round(total, 4),
                "backends_cpu_s": round(backends, 4)}


# ---------------------------------------------------------------- phases


async def seed(url: str, queue: str, n: int) -> dict[str, Any]:
    """One message in each of partitions p0..p{n-1}, SEED_ITEMS per push request."""
    chunks = [range(i, min(i + SEED_ITEMS, n)) for i in range(0, n, SEED_ITEMS)]
    todo = asyncio.Queue[range]()
    for c in chunks:
        todo.put_nowait(c)
    queued = 0
    qb = queue.encode()

    async def pusher() -> None:
        nonlocal queued
        conn = Connection(url)
        try:
            while not todo.empty():
                chunk = todo.get_nowait()
                body = b'{"items":[' + b",".join(
                    b'{"queue":"%s","partition":"p%d","transactionId":"s%d","payload":{"i":%d}}'
                    % (qb, i, i, i) for i in chunk) + b"]}"
                for _attempt in range(5):
                    answer = await conn.request("POST", "/api/v1/push", body, timeout=120)
                    if answer.status == 201:
                        break
                    await asyncio.sleep(0.5)
                else:
                    raise RuntimeError(f"seed push answered {answer.status}: "
                                       f"{answer.body[:200]!r}")
                queued += sum(v.status in ("queued", "duplicate")
                              for v in _VERDICTS.decode(answer.body))
        finally:
            await conn.close()

    start = time.monotonic()
    await asyncio.gather(*(pusher() for _ in range(SEED_CONNECTIONS)))
    seconds = time.monotonic() - start
    if queued != n:
        raise RuntimeError(f"seed: {queued} of {n} messages acknowledged")
    return {"messages": n, "seconds": round(seconds, 2), "msg_per_s": round(n / seconds, 1)}


@dataclass
class _Group:
    name: str
    seen: set[str] = field(default_factory=set)
    duplicates: int = 0


async def drain(url: str, queue: str, n: int, width: int, consumers: int, seconds: float,
                tag: str) -> dict[str, Any]:
    """Consumers pop (no wait) and ack for `seconds`; a group that has all N gives way to a
    fresh one. Answers messages per second and the per-group check."""
    groups = [_Group(f"{tag}-w{width}-0")]
    pops = empty = errors = 0
    lat = Histogram()
    deadline = time.monotonic() + seconds
    lock = asyncio.Lock()

    async def consumer() -> None:
        nonlocal pops, empty, errors
        conn = Connection(url)
        try:
            while time.monotonic() < deadline:
                g = groups[-1]
                t0 = time.perf_counter()
                try:
                    answer = await conn.request("GET", _pop_path(queue, g.name, width=width),
                                                timeout=30)
                except (TimeoutError, HttpError):
                    errors += 1
                    continue
                pops += 1
                if answer.status != 200:
                    if answer.status != 204:
                        errors += 1
                    empty += 1
                    async with lock:  # the group is done: the next one (if not done already)
                        if len(g.seen) >= n and groups[-1] is g:
                            groups.append(_Group(f"{tag}-w{width}-{len(groups)}"))
                    continue
                lat.add((time.perf_counter() - t0) * 1000)
                msgs = _POP.decode(answer.body).messages or []
                for m in msgs:
                    if m.transactionId in g.seen:
                        g.duplicates += 1
                    g.seen.add(m.transactionId)
                if msgs:
                    body = msgspec.json.encode({"consumerGroup": g.name, "acknowledgments": [
                        {"transactionId": m.transactionId, "partitionId": m.partitionId,
                         "status": "completed", "leaseId": m.leaseId} for m in msgs]})
                    ack = await conn.request("POST", "/api/v1/ack/batch", body, timeout=30)
                    if ack.status != 200:
                        errors += 1
                async with lock:
                    if len(g.seen) >= n and groups[-1] is g:
                        groups.append(_Group(f"{tag}-w{width}-{len(groups)}"))
        finally:
            await conn.close()

    start = time.monotonic()
    await asyncio.gather(*(consumer() for _ in range(consumers)))
    elapsed = time.monotonic() - start
    delivered = sum(len(g.seen) for g in groups)
    finished = [g for g in groups if len(g.seen) >= n]
    bad = [g.name for g in groups if g.duplicates or len(g.seen) > n]
    return {"width": width, "seconds": round(elapsed, 2), "delivered": delivered,
            "msg_per_s": round(delivered / elapsed, 1), "pops": pops, "empty_pops": empty,
            "errors": errors, "groups": len(groups), "groups_drained": len(finished),
            "duplicates": sum(g.duplicates for g in groups), "gate_ok": not bad,
            "pop_ms": lat.summary()}


async def seek_to_end(url: str, queue: str, group: str) -> dict[str, Any]:
    conn = Connection(url)
    start = time.monotonic()
    try:
        answer = await conn.request(
            "POST", f"/api/v1/consumer-groups/{quote(group, safe='')}/queues/"
                    f"{quote(queue, safe='')}/seek", b'{"toEnd":true}', timeout=300)
    finally:
        await conn.close()
    if answer.status != 200:
        raise RuntimeError(f"seek answered {answer.status}: {answer.body[:200]!r}")
    return {"seconds": round(time.monotonic() - start, 2)}


async def polls(url: str, queue: str, group: str, pollers: int, seconds: float,
                max_polls: int) -> dict[str, Any]:
    """Non-waiting pops of a caught-up group, back to back: latency and answers."""
    hist = Histogram()
    counts = {"polls": 0, "not_204": 0, "errors": 0}
    deadline = time.monotonic() + seconds
    path = _pop_path(queue, group, width=1)

    async def poller() -> None:
        conn = Connection(url)
        try:
            while time.monotonic() < deadline and counts["polls"] < max_polls:
                t0 = time.perf_counter()
                try:
                    answer = await conn.request("GET", path, timeout=30)
                except (TimeoutError, HttpError):
                    counts["errors"] += 1
                    continue
                hist.add((time.perf_counter() - t0) * 1000)
                counts["polls"] += 1
                if answer.status != 204:
                    counts["not_204"] += 1
        finally:
            await conn.close()

    await asyncio.gather(*(poller() for _ in range(pollers)))
    return {**counts, "p50_ms": _r(hist.percentile(50)), "p99_ms": _r(hist.percentile(99))}


async def long_polls(url: str, queue: str, group: str, consumers: int, seconds: float,
                     timeout_ms: int) -> dict[str, Any]:
    """Caught-up consumers long-polling until `seconds` are over (the last poll of each is
    cut to the time left)."""
    counts = {"answers": 0, "delivered": 0, "errors": 0}
    end = time.monotonic() + seconds

    async def consumer() -> None:
        conn = Connection(url)
        try:
            while (left := end - time.monotonic()) > 0.05:
                wait = max(50, min(timeout_ms, int(left * 1000)))
                try:
                    answer = await conn.request(
                        "GET", _pop_path(queue, group, width=1, wait_ms=wait),
                        timeout=wait / 1000 + 30)
                except (TimeoutError, HttpError):
                    counts["errors"] += 1
                    await asyncio.sleep(0.2)
                    continue
                counts["answers"] += 1
                if answer.status == 200:
                    counts["delivered"] += 1
        finally:
            await conn.close()

    await asyncio.gather(*(consumer() for _ in range(consumers)))
    return counts


def _r(v: float | None, digits: int = 3) -> float | None:
    return None if v is None else round(v, digits)


async def _vacuum(database_url: str) -> float:
    start = time.monotonic()
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("VACUUM (ANALYZE)")
    finally:
        await conn.close()
    return round(time.monotonic() - start, 2)


async def _claims(database_url: str, broker_url: str) -> dict[str, Any] | None:
    return await claims.snapshot(database_url, broker_url, flush_wait_s=1.2)


# ---------------------------------------------------------------- one count, one checkout


async def measure_count(srv_url: str, database_url: str, database: str, pg_pid: int | None,
                   broker_pid: int | None, n: int, args: argparse.Namespace,
                   queue: str | None = None) -> dict[str, Any]:
    queue = queue or f"scale-{n}"
    out: dict[str, Any] = {"partitions": n}

    def progress(what: str) -> None:
        print(f"  [{n} partitions] {what}", file=sys.stderr, flush=True)

    progress("seeding")
    out["seed"] = await seed(srv_url, queue, n)
    progress(f"seeded in {out['seed']['seconds']} s")
    out["drain"] = {}
    for width in args.widths:
        before = await _claims(database_url, srv_url)
        d = await drain(srv_url, queue, n, width, args.consumers, args.drain_seconds, "drain")
        d["claims"] = claims.between(before, await _claims(database_url, srv_url))
        out["drain"][str(width)] = d
        progress(f"drain width {width}: {d['msg_per_s']} msg/s "
                 f"({claims.describe(d['claims'])})")
    if not getattr(args, "no_vacuum", False):
        out["vacuum_seconds"] = await _vacuum(database_url)
    group = "caught-up"
    out["seek"] = await seek_to_end(srv_url, queue, group)
    await polls(srv_url, queue, group, 1, 2.0, 20)  # first contact, warm the plans
    pg = Cpu(pg_pid, database)
    broker = Cpu(broker_pid)
    before = await _claims(database_url, srv_url)
    pg.start()
    broker.start()
    p = await polls(srv_url, queue, group, args.pollers, args.poll_seconds, args.max_polls)
    p["postgres"], p["broker"] = pg.stop(), broker.stop()
    p["claims"] = claims.between(before, await _claims(database_url, srv_url))
    if p["polls"]:
        p["postgres_cpu_us_per_poll"] = round(p["postgres"]["cpu_s"] / p["polls"] * 1e6, 1)
        p["backends_cpu_us_per_poll"] = round(
            p["postgres"]["backends_cpu_s"] / p["polls"] * 1e6, 1)
        p["broker_cpu_us_per_poll"] = round(p["broker"]["cpu_s"] / p["polls"] * 1e6, 1)
    out["caught_up"] = p
    progress(f"caught-up polls: p50 {p['p50_ms']} ms p99 {p['p99_ms']} ms, "
             f"{p.get('postgres_cpu_us_per_poll')} us PostgreSQL CPU per poll")
    pg.start()
    broker.start()
    await asyncio.sleep(args.quiet_seconds)
    quiet = {"postgres": pg.stop(), "broker": broker.stop()}
    out["quiet"] = quiet | _per_wall(quiet)
    before = await _claims(database_url, srv_url)
    pg.start()
    broker.start()
    idle = await long_polls(srv_url, queue, group, args.idle_consumers, args.idle_seconds,
                            args.idle_timeout_ms)
    idle["postgres"], idle["broker"] = pg.stop(), broker.stop()
    idle["claims"] = claims.between(before, await _claims(database_url, srv_url))
    idle |= _per_wall(idle)
    idle["consumers"] = args.idle_consumers
    out["idle"] = idle
    progress(f"idle: {idle['postgres_cpu_per_wall_s']} PostgreSQL CPU s per s "
             f"(backends {idle['backends_cpu_per_wall_s']}, quiet "
             f"{out['quiet']['postgres_cpu_per_wall_s']})")
    return out


def _per_wall(phase: dict[str, Any]) -> dict[str, float | None]:
    pg, br = phase["postgres"], phase["broker"]
    wall = pg["wall_s"] or 1.0
    return {"postgres_cpu_per_wall_s": round(pg["cpu_s"] / wall, 4),
            "backends_cpu_per_wall_s": round(pg["backends_cpu_s"] / wall, 4),
            "broker_cpu_per_wall_s": round(br["cpu_s"] / (br["wall_s"] or 1.0), 4)}


def one(pg: launch.Postgres, root: Path | None, n: int, args: argparse.Namespace) -> dict[str, Any]:
    """Fresh database, fresh broker (from `root`, or this checkout), all phases at N."""
    own = root is None
    database_url = str(asyncio.run(launch.fresh_database(pg.dsn, migrate=own)))
    database = urlsplit(database_url).path.lstrip("/")
    with launch.broker(database_url, args.workers, root=root or launch.ROOT) as srv:
        assert srv.proc is not None
        return asyncio.run(measure_count(srv.url, database_url, database,
                                    pg.proc.pid if pg.proc else None, srv.proc.pid, n, args))


# ---------------------------------------------------------------- figures and ratios

# (label, path in a count's figures, higher is better)
FIGURES: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("seed msg/s", ("seed", "msg_per_s"), True),
    ("drain width 1 msg/s", ("drain", "1", "msg_per_s"), True),
    ("drain width 10 msg/s", ("drain", "10", "msg_per_s"), True),
    ("caught-up poll p50 ms", ("caught_up", "p50_ms"), False),
    ("caught-up poll p99 ms", ("caught_up", "p99_ms"), False),
    ("PostgreSQL CPU us per caught-up poll", ("caught_up", "postgres_cpu_us_per_poll"), False),
    ("  of it: the database's backends", ("caught_up", "backends_cpu_us_per_poll"), False),
    ("broker CPU us per caught-up poll", ("caught_up", "broker_cpu_us_per_poll"), False),
    ("quiet: PostgreSQL CPU s per s", ("quiet", "postgres_cpu_per_wall_s"), False),
    ("idle long-polls: PostgreSQL CPU s per s", ("idle", "postgres_cpu_per_wall_s"), False),
    ("  of it: the database's backends (idle)", ("idle", "backends_cpu_per_wall_s"), False),
    ("idle long-polls: broker CPU s per s", ("idle", "broker_cpu_per_wall_s"), False),
    ("claims found nothing: drain width 1", ("drain", "1", "claims", "found_nothing_share"), False),
    ("claims found nothing: drain width 10", ("drain", "10", "claims", "found_nothing_share"),
     False),
    ("claim statements per caught-up poll", ("caught_up", "claims_per_poll"), False),
    ("claim statements per s, idle", ("idle", "claims_per_s"), False),
)


def _get(d: Any, path: tuple[str, ...]) -> Any:
    for k in path:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _derive(fig: dict[str, Any]) -> None:
    p, idle = fig.get("caught_up") or {}, fig.get("idle") or {}
    if p.get("claims") and p.get("polls"):
        p["claims_per_poll"] = round(p["claims"]["runs"] / p["polls"], 3)
    if idle.get("claims") and idle["postgres"]["wall_s"]:
        idle["claims_per_s"] = round(idle["claims"]["runs"] / idle["postgres"]["wall_s"], 2)


def ratios_by_count(by_n: dict[int, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Each figure at each N divided by the same figure at the smallest N of the run."""
    low = min(by_n)
    out: dict[str, dict[str, float | None]] = {}
    for label, path, _ in FIGURES:
        base = _get(by_n[low], path)
        row = {}
        for n, fig in by_n.items():
            v = _get(fig, path)
            row[str(n)] = round(v / base, 3) if v is not None and base else None
        out[label.strip()] = row
    return out


def ratios_between(after: dict[int, dict[str, Any]],
                   before: dict[int, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """This checkout's figure / the compared checkout's, at each N."""
    out: dict[str, dict[str, float | None]] = {}
    for label, path, _ in FIGURES:
        row = {}
        for n, fig in after.items():
            a, b = _get(fig, path), _get(before.get(n, {}), path)
            row[str(n)] = round(a / b, 3) if a is not None and b else None
        out[label.strip()] = row
    return out


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
    return str(v)


def render(result: dict[str, Any]) -> str:
    lines = [(f"scale run {result['run_id']}  workers {result['workers']}  "
              f"load average at start {result['load_average']['start']} "
              f"end {result['load_average']['end']}  cpus {result['cpus']}"),
             f"command: {' '.join(result['argv'])}"]
    for side, data in result["sides"].items():
        by_n = {int(n): f for n, f in data["figures"].items()}
        counts = sorted(by_n)
        lines.append(f"\n== {side}: broker from {data['root']}")
        head = f"{'figure':44}" + "".join(f"{n:>14,}" for n in counts)
        lines.append(head + "   ratios to " + f"{counts[0]:,}")
        ratio = data["ratios_to_smallest"]
        for label, path, _ in FIGURES:
            row = f"{label:44}" + "".join(f"{_fmt(_get(by_n[n], path)):>14}" for n in counts)
            rs = [ratio[label.strip()].get(str(n)) for n in counts[1:]]
            lines.append(row + "   " + " ".join(f"{_fmt(r)}x" for r in rs))
        for n in counts:
            f = by_n[n]
            checks = []
            for w, d in f["drain"].items():
                checks.append(f"width {w}: {d['delivered']} delivered by {d['groups']} groups "
                              f"({d['groups_drained']} drained all), {d['duplicates']} twice, "
                              f"{d['empty_pops']} empty pops, {d['errors']} errors")
            c = f["caught_up"]
            checks.append(f"caught-up: {c['polls']} polls, {c['not_204']} not 204, "
                          f"{c['errors']} errors")
            i = f["idle"]
            checks.append(f"idle: {i['answers']} answers, {i['delivered']} delivered, "
                          f"{i['errors']} errors")
            lines.append(f"  {n:,}: " + "; ".join(checks))
            for phase, c in (("drain w" + w, d.get("claims")) for w, d in f["drain"].items()):
                lines.append(f"    {phase}: {claims.describe(c)}")
            lines.append(f"    caught-up polls: {claims.describe(f['caught_up'].get('claims'))}")
            lines.append(f"    idle long-polls: {claims.describe(f['idle'].get('claims'))}")
    if result.get("after_over_before"):
        lines.append(f"\n== {result['sides_order'][-1]} / {result['sides_order'][0]} "
                     "(same run, same N)")
        counts = sorted(int(n) for n in next(iter(result["after_over_before"].values())))
        lines.append(f"{'figure':44}" + "".join(f"{n:>14,}" for n in counts))
        for label, row in result["after_over_before"].items():
            lines.append(f"{label:44}" + "".join(f"{_fmt(row.get(str(n))):>14}"
                                                for n in counts))
    ok = result["verdict"]
    lines.append(f"\nverdict: {ok}")
    return "\n".join(lines) + "\n"


def conclude(result: dict[str, Any]) -> None:
    """Ratios (to the smallest N; after / before with two sides) and the verdict."""
    verdict = "ok"
    for data in result["sides"].values():
        by_n = {int(n): f for n, f in data["figures"].items()}
        for f in by_n.values():
            _derive(f)
        data["ratios_to_smallest"] = ratios_by_count(by_n)
        for f in by_n.values():
            if not all(d["gate_ok"] for d in f["drain"].values()) or f["caught_up"]["not_204"]:
                verdict = ("FAILURE (a drain delivered a message twice, or a caught-up poll "
                           "answered something)")
    if len(result["sides_order"]) == 2:
        b, a = (result["sides"][s]["figures"] for s in result["sides_order"])
        result["after_over_before"] = ratios_between({int(n): f for n, f in a.items()},
                                                     {int(n): f for n, f in b.items()})
    result["verdict"] = verdict


def command(args: argparse.Namespace) -> int:
    run_id = time.strftime("%Y%m%d-%H%M%S")
    sides: list[tuple[str, Path | None]] = []
    if args.compare_root:
        sides.append(("before", args.compare_root.resolve()))
    sides.append(("after" if args.compare_root else "this",
                  args.broker_root.resolve() if args.broker_root else None))
    result: dict[str, Any] = {
        "run_id": run_id, "argv": sys.argv, "workers": args.workers, "cpus": os.cpu_count(),
        "load_average": {"start": [round(x, 2) for x in os.getloadavg()]},
        "shape": {k: getattr(args, k) for k in (
            "partitions", "consumers", "widths", "drain_seconds", "pollers", "poll_seconds",
            "max_polls", "quiet_seconds", "idle_consumers", "idle_seconds", "idle_timeout_ms")},
        "sides": {name: {"root": str(root or launch.ROOT), "figures": {}}
                  for name, root in sides},
        "sides_order": [name for name, _ in sides]}
    counts = sorted(set(args.partitions))
    with launch.Postgres() as pg:
        for n in counts:
            for name, root in sides:
                print(f"{name} ({root or launch.ROOT}): {n:,} partitions", file=sys.stderr)
                result["sides"][name]["figures"][str(n)] = one(pg, root, n, args)
    result["load_average"]["end"] = [round(x, 2) for x in os.getloadavg()]
    conclude(result)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"scale-{run_id}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str))
    text = render(result)
    stem.with_suffix(".txt").write_text(text)
    print(text)
    print(f"written: {stem}.json, {stem}.txt")
    return 0 if result["verdict"] == "ok" else 1
