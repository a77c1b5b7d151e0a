"""RabbitMQ quorum queue peer (Debian `rabbitmq-server`, driven with aio-pika).

Durability matches the broker's: persistent messages, publisher confirms awaited before a
push counts as acknowledged (a quorum queue confirms after its Raft log is fsynced). A "pop"
is up to `batch` deliveries under a prefetch of `batch`; the "ack" is one basic.ack with
multiple=true for the last of them, the closest thing to one ack per popped batch.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

from broker.ports import free_port
from core.waiting import within
from loadtest.launch import ServerProcess

QUEUE = "loadtest-w2"


class RabbitNode(ServerProcess):
    """Our own node in a temp dir on a free 127.0.0.1 port; stopped and removed on exit."""

    stop_after = 30

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="loadtest-rabbit-")
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def __enter__(self) -> Self:
        plugins = Path(self.dir) / "enabled_plugins"
        plugins.write_text("[].\n")
        env = {**os.environ, "HOME": self.dir, "RABBITMQ_NODE_PORT": str(self.port),
               "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
               "RABBITMQ_NODENAME": f"loadtest{self.port}@localhost",
               "RABBITMQ_DIST_PORT": str(self.port + 20000 if self.port < 45000 else self.port - 20000),
               "RABBITMQ_MNESIA_BASE": f"{self.dir}/mnesia", "RABBITMQ_LOG_BASE": f"{self.dir}/log",
               "RABBITMQ_ENABLED_PLUGINS_FILE": str(plugins),
               "RABBITMQ_CONFIG_FILE": f"{self.dir}/rabbitmq", "ERL_EPMD_ADDRESS": "127.0.0.1"}
        Path(f"{self.dir}/rabbitmq.conf").write_text("loopback_users = none\n")
        binary = "/usr/lib/rabbitmq/bin/rabbitmq-server"
        proc = subprocess.Popen([binary], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        # A booting node fails in many driver-specific ways: any exception is "not yet".
        self.started(proc, lambda: asyncio.run(_ping(self.url)), Exception,
                     name=f"rabbitmq-server (logs in {self.dir}/log)", seconds=90, every=0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__()
        shutil.rmtree(self.dir, ignore_errors=True)


async def _ping(url: str) -> None:
    import aio_pika

    conn = await aio_pika.connect(url, timeout=2)
    await conn.close()


async def declare(url: str) -> None:
    import aio_pika

    conn = await aio_pika.connect(url)
    async with conn:
        ch = await conn.channel()
        await ch.declare_queue(QUEUE, durable=True, arguments={"x-queue-type": "quorum"})


class _Rabbit:
    def __init__(self, url: str, role: str) -> None:
        self.url, self.role = url, role
        self.conn: Any = None
        self.inbox: asyncio.Queue[Any] = asyncio.Queue()

    async def open(self) -> None:
        import aio_pika

        self.conn = await aio_pika.connect(self.url)
        self.channel = await self.conn.channel(publisher_confirms=True)
        self.exchange = self.channel.default_exchange
        if self.role == "consumer":
            await self.channel.set_qos(prefetch_count=100)
            queue = await self.channel.get_queue(QUEUE, ensure=False)
            await queue.consume(self.inbox.put, no_ack=False)

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()

    async def push(self, items: Sequence[tuple[str, bytes]]) -> bool:
        import aio_pika

        await asyncio.gather(*(self.exchange.publish(
            aio_pika.Message(body, message_id=txid,
                             delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
            routing_key=QUEUE) for txid, body in items))
        return True

    async def take(self, limit: int, wait_s: float) -> tuple[list[bytes], Any]:
        try:
            first = await within(wait_s, self.inbox.get())
        except TimeoutError:
            return [], None
        got = [first]
        while len(got) < limit and not self.inbox.empty():
            got.append(self.inbox.get_nowait())
        return [m.body for m in got], got[-1]

    async def ack(self, handle: Any) -> None:
        await handle.ack(multiple=True)


def make_client(url: str, role: str) -> _Rabbit:
    return _Rabbit(url, role)
