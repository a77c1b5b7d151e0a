"""`queen-broker migrate`: apply the schema and exit, with an answer within seconds.

On the embedded default it needs its PostgreSQL: it uses the one running on the data
directory (`serve` or the Procfile's `postgres`), or starts it for the time of the migration
and stops it again. A server it cannot start or reach is one line naming what to run, not
a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys

from core.embedded import EmbeddedPostgres, running_postmaster, stop_process
from core.engine.key_check import verify_encryption_key
from core.settings import Settings
from core.storage.database import admitted_connections, migrate

log = logging.getLogger("queen.migrate")
# An external server gets this long to answer (it may be starting next to us, under a
# process manager); the embedded one is started here, so it is ready or it has failed.
EXTERNAL_WAIT_SECONDS = 30.0
EMBEDDED_WAIT_SECONDS = 30.0


def run(settings: Settings) -> int:
    if settings.database_url is not None:
        return _migrate(settings, settings.database_url, EXTERNAL_WAIT_SECONDS,
                        hint="check DATABASE_URL / PG_* and that the server is up")
    embedded = EmbeddedPostgres.for_broker(settings)
    proc: subprocess.Popen[bytes] | None = None
    try:
        if not embedded.is_ready():
            owner = running_postmaster(embedded.pgdata)
            if owner is not None:
                log.info("waiting for the embedded PostgreSQL (pid %d) in %s", owner,
                         embedded.pgdata)
                embedded.wait_ready(None, EMBEDDED_WAIT_SECONDS)
            else:
                log.info("starting the embedded PostgreSQL in %s for the migration",
                         embedded.pgdata)
                proc = embedded.start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        print(f"queen-broker migrate: the embedded PostgreSQL in {embedded.pgdata} could not "
              f"be started: {exc}\nStart it yourself with `queen-broker postgres "
              f"--data-dir {settings.data_dir}` (or run `queen-broker serve`), or set "
              "DATABASE_URL to use another server.", file=sys.stderr)
        return 1
    try:
        return _migrate(settings, embedded.dsn, 5.0,
                        hint=f"see {embedded.log_file}")
    finally:
        if proc is not None:
            stop_process(proc, signal.SIGINT)


async def prepare_database(settings: Settings, dsn: str) -> None:
    """`serve`'s start-up step before its workers: apply the schema, check
    QUEEN_ENCRYPTION_KEY against the database (core/engine/key_check.py), and warn when the
    workers' pools can ask for more connections than the server admits."""
    await migrate(settings, dsn)
    await verify_encryption_key(settings, dsn)
    if (warning := pool_warning(settings, await admitted_connections(settings, dsn))):
        log.warning("%s", warning)


def pool_warning(settings: Settings, admitted: int) -> str | None:
    """What to say when the web workers' pools together exceed what the server admits:
    under load the server refuses the extra connections ("too many clients") and requests
    answer 503 although the database is up. None when they fit."""
    wanted = settings.web_workers * settings.db_pool_size
    if wanted <= admitted:
        return None
    return (f"the {settings.web_workers} web workers may open {wanted} database connections "
            f"(WORKERS x DB_POOL_SIZE {settings.db_pool_size}), more than the {admitted} the "
            f"database admits (max_connections less its reserved slots), and other brokers "
            f"and processes need some too: under load, requests will answer 503. Lower "
            f"DB_POOL_SIZE or WORKERS, or raise max_connections")


def _migrate(settings: Settings, dsn: str, wait_seconds: float, *, hint: str) -> int:
    try:
        changes = asyncio.run(migrate(settings, dsn, wait_seconds=wait_seconds))
    except Exception as exc:  # noqa: BLE001 - one line for the operator, whatever it was
        print(f"queen-broker migrate: {type(exc).__name__}: {exc} ({hint})", file=sys.stderr)
        return 1
    if changes.unknown:
        log.warning("the database was migrated by newer code (migrations %s are not in this "
                    "version): this version's functions were not applied, they would undo "
                    "the newer ones", changes.unknown)
        return 0
    done = [f"{len(changes.migrations)} migration(s)" if changes.migrations else "",
            f"{len(changes.functions)} function file(s)" if changes.functions else ""]
    log.info("schema up to date (%s)", "applied " + " and ".join(d for d in done if d)
             if any(done) else "nothing to apply")
    return 0
