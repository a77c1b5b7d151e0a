"""This listener's place in its Kafka cluster: whether it coordinates groups, and where the
coordinator is (core/kafka/election.py elects it; docs/kafka.md, "Several hosts")."""

from __future__ import annotations

from broker.kafka.session import Session
from core.kafka.election import Election


class Cluster:
    def __init__(self) -> None:
        self.election: Election | None = None  # None: alone, so the coordinator

    def coordinates(self) -> bool:
        return self.election is None or self.election.holding

    def coordinator(self, session: Session) -> tuple[int, str, int] | None:
        """(node id, host, port) of the group coordinator; None while none is known."""
        if self.coordinates():
            return session.node_id, session.host, session.port
        assert self.election is not None
        node = self.election.coordinator
        return None if node is None else (node.node_id, node.host, node.port)

    def brokers(self, session: Session) -> list[dict[str, object]]:
        """The nodes Metadata lists: this one (at the address the client reached, unless
        one is advertised), every other listener of the cluster seen lately, and the
        coordinator."""
        nodes = {session.node_id: (session.host, session.port)}
        if self.election is not None:
            for node in self.election.nodes:
                nodes.setdefault(node.node_id, (node.host, node.port))
        other = self.coordinator(session)
        if other is not None:
            nodes.setdefault(other[0], (other[1], other[2]))
        return [{"node_id": n, "host": h, "port": p} for n, (h, p) in sorted(nodes.items())]


CLUSTER = Cluster()  # the process's (set up by broker/kafka/process.py)
