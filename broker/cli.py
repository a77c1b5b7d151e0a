"""The `queen-broker` command: the server's own commands (serve, web, postgres, migrate),
which read the environment, and the operator's commands (broker/ctl/), which talk to a
broker over HTTP."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from core.settings import Settings

F = TypeVar("F", bound=Callable[..., Any])


def _version() -> str:
    try:
        return version("queen-broker")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


# The operator commands, imported when one is run: `serve` and `web` (which the supervisor
# starts again after a crash) do not pay for the HTTP client and the table library.
_OPERATOR_COMMANDS = {
    "status": "broker.ctl.queues:status", "queues": "broker.ctl.queues:queues",
    "lag": "broker.ctl.groups:lag", "groups": "broker.ctl.groups:groups",
    "dlq": "broker.ctl.dlq:dlq", "maintenance": "broker.ctl.maintenance:maintenance",
    "push": "broker.ctl.messages:push", "pop": "broker.ctl.messages:pop",
    "token": "broker.ctl.token:token", "tenants": "broker.ctl.tenants:tenants",
}


class _Commands(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *_OPERATOR_COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _OPERATOR_COMMANDS.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module, _, attr = target.partition(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"],
                               "max_content_width": 100})
@click.version_option(_version(), "--version", "-V", prog_name="queen-broker",
                      message="%(prog)s %(version)s")
def main() -> None:
    """A partitioned message broker on PostgreSQL speaking the Queen MQ HTTP API.

    `serve`, `web`, `postgres` and `migrate` run the broker (settings from the
    environment); `token` mints a token from the broker's JWT_SECRET (environment too);
    the other commands operate a running broker over its HTTP API (--url / QUEEN_URL,
    --token / QUEEN_TOKEN)."""


def _data_dir(command: F) -> F:
    return click.option(
        "--data-dir", type=click.Path(file_okay=False, path_type=Path),
        help="embedded database directory (env QUEEN_DATA_DIR, default ./.queen-data); "
             "unused when DATABASE_URL or PG_* is set")(command)


def _listen(command: F) -> F:
    command = click.option("--workers", type=click.IntRange(1, 256),
                           help="web worker processes (env WORKERS, default: CPU count)")(command)
    command = click.option("--port", type=click.IntRange(0, 65535),
                           help="listen port (env PORT, default 6632)")(command)
    return click.option(
        "--host", help="listen address (env QUEEN_HOST or HOST); default 127.0.0.1 with "
                       "auth off, 0.0.0.0 with auth on")(command)


@main.command()
@_listen
@_data_dir
@click.option("--kafka-port", type=click.IntRange(0, 65535),
              help="also serve Kafka clients on this port (env QUEEN_KAFKA_PORT; default off)")
def serve(**options: Any) -> None:
    """Run the whole broker in the foreground, restarting any of its processes that dies."""
    from broker.supervisor import serve as run

    sys.exit(run(_settings(options)))


@main.command()
@_listen
@_data_dir
def web(**options: Any) -> None:
    """Run only the web workers, restarting any that dies (for a Procfile)."""
    from broker.supervisor import serve as run

    sys.exit(run(_settings(options), web_only=True))


@main.command()
@_data_dir
@click.option("--print-dsn", is_flag=True,
              help="print the address of the data directory's PostgreSQL (a Unix socket) as "
                   "a DATABASE_URL for another broker on this machine, and exit")
def postgres(print_dsn: bool, **options: Any) -> None:
    """Run the embedded PostgreSQL in the foreground (for a Procfile)."""
    from core.embedded import EmbeddedPostgres

    embedded = EmbeddedPostgres.for_broker(_settings(options))
    if print_dsn:
        click.echo(embedded.dsn)
        return
    sys.exit(embedded.run_foreground())


@main.command()
@_data_dir
def migrate(**options: Any) -> None:
    """Apply schema migrations and exit. On the embedded default, starts the embedded
    PostgreSQL for the time it takes (or uses the one already running)."""
    from core.migrate import run

    sys.exit(run(_settings(options)))


def _settings(options: dict[str, Any]) -> Settings:
    """Command-line options win over the environment; children inherit them through it."""
    from core.logs import configure_logging
    from core.settings import from_env_or_exit

    for name, env in (("host", "QUEEN_HOST"), ("port", "PORT"), ("workers", "WORKERS"),
                      ("data_dir", "QUEEN_DATA_DIR"), ("kafka_port", "QUEEN_KAFKA_PORT")):
        value = options.get(name)
        if value is not None:
            os.environ[env] = str(value)
    settings = from_env_or_exit("queen-broker")
    configure_logging(settings.log_level)
    return settings


if __name__ == "__main__":
    main(prog_name="queen-broker")
