"""What a handler knows of its connection and process: the broker, the address clients are
told, and (with auth on) who authenticated on this connection."""

from __future__ import annotations

from dataclasses import dataclass, field

from core.service import Broker

NODE_ID = 0  # every listener presents itself as node 0 of a one-node cluster (docs/kafka.md)
CLUSTER_ID = "queen-broker"


@dataclass(slots=True)
class Session:
    broker: Broker
    host: str  # advertised host and port
    port: int
    max_request_bytes: int
    peer: str = ""  # the client's address, as DescribeGroups shows it
    principal: str | None = None  # the token's subject once SASL succeeded
    access: str | None = None  # its access level (auth on)
    extra: dict[str, object] = field(default_factory=dict)
