"""`python -m loadtest install-peer NAME`: an explicit, opt-in install of a comparison peer.

Never a test-suite dependency. RabbitMQ comes from Debian (`rabbitmq-server`) plus the
`aio-pika` client from PyPI; pgmq from PyPI (`pgmq`), whose wheel ships the extension's SQL
(`pgmq/sql/pgmq.sql`) so it installs into our own PostgreSQL without a server extension.
"""

from __future__ import annotations

import subprocess
import sys


def _run(cmd: list[str]) -> int:
    print("+ " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=False).returncode


def install(peer: str) -> int:
    if peer == "rabbitmq":
        env_cmd = ["env", "DEBIAN_FRONTEND=noninteractive"]
        for cmd in (env_cmd + ["apt-get", "update"],
                    env_cmd + ["apt-get", "install", "-y", "--no-install-recommends",
                               "rabbitmq-server"],
                    [sys.executable, "-m", "pip", "install", "aio-pika>=9.4"]):
            if _run(cmd):
                return 1
        # The Debian package may start a system service; we run our own node per cell.
        _run(["sh", "-c", ("command -v systemctl >/dev/null && systemctl stop rabbitmq-server "
                           "|| service rabbitmq-server stop || true")])
        return 0
    if peer == "pgmq":
        return _run([sys.executable, "-m", "pip", "install", "pgmq>=1.1"])
    print(f"unknown peer {peer}", file=sys.stderr)
    return 2
