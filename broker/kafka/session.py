"""What a handler knows of its connection and process: the broker, the address clients are
told, and who is on this connection: with auth on, who authenticated and what they may do,
and in which tenant (its token's, broker/kafka/sasl.py; the default tenant with auth off);
with mutual TLS, whose client certificate it showed."""

from __future__ import annotations

from dataclasses import dataclass

from broker.auth.access import Access, Role, grants
from core.service import Broker
from core.tenancy.scoped import scoped

CLUSTER_ID = "queen-broker"
# Kafka's "operations not asked for" marker in authorized-operations fields.
NO_OPERATIONS = -2147483648


@dataclass(slots=True)
class Session:
    broker: Broker
    host: str  # advertised host and port
    port: int
    max_request_bytes: int
    node_id: int = 0  # QUEEN_KAFKA_NODE_ID: this listener's node in its cluster
    peer: str = ""  # the client's address, as DescribeGroups shows it
    auth_required: bool = False  # SASL must succeed before anything but the handshake
    roles: frozenset[Role] | None = None  # None: auth is off
    principal: str | None = None  # the token's sub, stamped as producerSub
    expires: float | None = None  # the token's exp: the connection closes then
    certificate: str | None = None  # the verified client certificate's identity (mTLS)
    # A SaslHandshake v0 succeeded: the next frame is a bare PLAIN message, not a request.
    bare_sasl_next: bool = False
    # The tenant whose topics and groups the connection sees (docs/security/tenants.md).
    tenant: str = ""

    @property
    def authenticated(self) -> bool:
        return not self.auth_required or self.roles is not None

    @property
    def producer(self) -> str | None:
        """What produced records are stamped with (producerSub): the token's sub, else the
        client certificate's identity, as on the HTTP side (broker/auth/gate.py)."""
        return self.principal if self.principal is not None else self.certificate

    def group_key(self, group: str) -> str:
        """A group's key in the coordinator, which serves every tenant's groups."""
        return scoped(self.tenant, group)

    def may(self, level: Access) -> bool:
        """Whether this connection may do what an HTTP route of `level` does (auth off: all)."""
        return self.roles is None or grants(self.roles, level)
