"""The Kafka listener process: `python -m broker.kafka`, started by `queen-broker serve`
when QUEEN_KAFKA_PORT (or --kafka-port) is set, or by its own Procfile line.

With TLS_CERT_FILE set, the socket speaks TLS with the HTTP listener's certificate (Kafka's
SSL, or SASL_SSL with auth on), reloaded on SIGHUP or when the files change
(broker/tls/rotation.py).

One asyncio process (uvloop) with its own `Broker` on the database: the HTTP workers never
share anything with it but PostgreSQL, so its crash (or a restart by the supervisor) never
touches them. SIGTERM/SIGINT stop it: no new connections, idle connections close, requests
in flight finish (a parked Fetch answers at once) and their connections close, then the
broker closes (writes accepted are flushed first).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import sys

import uvloop

from broker.auth.gate import Gate
from broker.collector import tune_garbage_collector
from broker.descriptors import raise_open_files_limit
from broker.kafka.cluster import CLUSTER
from broker.kafka.groups import COORDINATOR
from broker.kafka.server import Listener
from broker.tls.rotation import CertificateRotation
from core.env import SettingsError
from core.kafka.election import Node
from core.logs import configure_logging
from core.service import Broker
from core.settings import Settings, from_env_or_exit
from core.waiting import within

log = logging.getLogger("queen.kafka")
_STOP_GRACE = 20.0  # seconds requests in flight get to finish


def advertised_address(settings: Settings) -> tuple[str, int] | None:
    """QUEEN_KAFKA_ADVERTISED as (host, port); None: each connection is told the address
    it reached us at (right on one host; several hosts set it, docs/kafka.md)."""
    text = settings.kafka_advertised.strip()
    if not text:
        return None
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        return (text, settings.kafka_port or 9092)
    return (host.strip("[]"), int(port))


def bind(settings: Settings, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.host, port))
    sock.listen(1024)
    return sock


def security_protocol(settings: Settings) -> str:
    """The `security.protocol` a Kafka client sets for this listener: TLS on the socket
    (TLS_CERT_FILE) and SASL (auth on) are each on or off."""
    return {(False, False): "PLAINTEXT", (False, True): "SASL_PLAINTEXT",
            (True, False): "SSL", (True, True): "SASL_SSL"}[
        (settings.tls.enabled, settings.auth.enabled)]


async def run(settings: Settings, port: int, stop: asyncio.Event) -> None:
    sock = bind(settings, port)
    rotation = CertificateRotation(settings.tls) if settings.tls.enabled else None
    if rotation is not None:
        rotation.reload_on_hangup()  # from now: start-up may wait a while for the database
    stop_waiting = asyncio.Event()
    gate = await Gate.start(settings.auth) if settings.auth.enabled else None
    # Like a web worker: wait for the database (a Procfile starts every line at once) and
    # apply any migration not yet applied (under the migrations' lock: harmless twice).
    async with Broker.open(settings, stop_waiting=stop_waiting, role="kafka") as broker:
        advertised = advertised_address(settings)
        listener = Listener(broker, advertised=advertised, node_id=settings.kafka_node_id,
                            max_request_bytes=settings.max_body_bytes, gate=gate,
                            idle_seconds=settings.kafka_idle_seconds)
        host, bound_port = sock.getsockname()[:2]
        if advertised is None:
            advertised = (socket.getfqdn() if host in ("0.0.0.0", "::") else host, bound_port)
        election = broker.kafka.election(
            cluster=settings.kafka_cluster, on_lost=COORDINATOR.reset,
            me=Node(settings.kafka_node_id, advertised[0], advertised[1]))
        CLUSTER.election = election
        elect = asyncio.create_task(election.run_forever(), name="coordinator-election")
        with contextlib.suppress(TimeoutError):  # serve groups from the first request on
            await within(5.0, election.changed.wait())
        server = await asyncio.start_server(
            listener.serve, sock=sock, ssl=rotation.context if rotation is not None else None)
        tune_garbage_collector()  # as a web worker does: a produce allocates per record
        log.info("Kafka listener on %s:%d, %s (node %d of cluster %r)", host, bound_port,
                 security_protocol(settings), settings.kafka_node_id, settings.kafka_cluster)
        expiry = asyncio.create_task(COORDINATOR.expire_forever(), name="group-sessions")
        watching = (asyncio.create_task(rotation.watch(stop), name="tls-watch")
                    if rotation is not None else None)
        try:
            await stop.wait()
        finally:
            if watching is not None:
                watching.cancel()
            expiry.cancel()
            election.close()
            elect.cancel()
            server.close()
            stop_waiting.set()
            listener.close_idle()  # idle connections must not hold the stop for the grace
            pending = list(listener.connections)
            if pending:
                await asyncio.wait(pending, timeout=_STOP_GRACE)
            for task in pending:
                task.cancel()
            if gate is not None:
                await gate.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m broker.kafka")
    parser.add_argument("--port", type=int, help="listen port (env QUEEN_KAFKA_PORT)")
    args = parser.parse_args(argv)
    settings = from_env_or_exit("queen-kafka")
    configure_logging(settings.log_level)
    raise_open_files_limit()  # each Kafka connection is a descriptor
    port = args.port if args.port is not None else settings.kafka_port
    if port is None:
        print("queen-kafka: set QUEEN_KAFKA_PORT or --port", file=sys.stderr)
        sys.exit(2)

    async def main_task() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run(settings, port, stop)

    try:
        uvloop.run(main_task())
    except SettingsError as exc:  # the TLS files changed for the worse since the check
        print(f"queen-kafka: {exc}", file=sys.stderr)
        sys.exit(2)
