"""The `queen-broker` command."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from core.logs import configure_logging
from core.settings import from_env_or_exit


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="queen-broker",
        description="A partitioned message broker on PostgreSQL speaking the Queen MQ HTTP API.")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the whole broker in the foreground, restarting "
                                         "any of its processes that dies")
    web = sub.add_parser("web", help="run only the web workers, restarting any that dies "
                                     "(for a Procfile)")
    for p in (serve, web):
        p.add_argument("--host", help="listen address (env HOST, default 0.0.0.0)")
        p.add_argument("--port", type=int, help="listen port (env PORT, default 6632)")
        p.add_argument("--workers", type=int,
                       help="web worker processes (env WORKERS, default: CPU count)")
    for p in (serve, web, sub.add_parser("postgres", help="run the embedded PostgreSQL "
                                                          "in the foreground (for a Procfile)"),
              sub.add_parser("migrate", help="apply schema migrations and exit")):
        p.add_argument("--data-dir",
                       help="embedded database directory (env QUEEN_DATA_DIR, default "
                            "./.queen-data); unused when DATABASE_URL or PG_* is set")
    return parser


def _apply_overrides(args: argparse.Namespace) -> None:
    """Command-line options win over the environment; children inherit them through it."""
    for attr, env in (("host", "HOST"), ("port", "PORT"), ("workers", "WORKERS"),
                      ("data_dir", "QUEEN_DATA_DIR")):
        value = getattr(args, attr, None)
        if value is not None:
            os.environ[env] = str(value)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _apply_overrides(args)
    settings = from_env_or_exit("queen-broker")
    configure_logging(settings.log_level)
    if args.command == "serve":
        from broker.supervisor import serve
        return serve(settings)
    if args.command == "web":
        from broker.supervisor import serve
        return serve(settings, web_only=True)
    if args.command == "postgres":
        from core.embedded import EmbeddedPostgres
        return EmbeddedPostgres(settings.data_dir).run_foreground()
    if args.command == "migrate":
        from core.embedded import database_dsn
        from core.storage.database import migrate
        asyncio.run(migrate(settings, database_dsn(settings)))
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
