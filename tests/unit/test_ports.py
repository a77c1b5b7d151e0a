"""Ports for the servers our tools start (broker/ports.py): below the kernel's ephemeral
range, where no connection's source port can take one between its pick and its bind."""

from __future__ import annotations

import socket
from pathlib import Path

from broker.citus import CitusCluster
from broker.ports import ephemeral_low, free_block, free_ports


def test_a_new_citus_cluster_s_nodes_get_distinct_ports_below_the_ephemeral_range(
        tmp_path: Path) -> None:
    # Nothing is created or started: the layout alone (bin_dir given, so none is looked for).
    cluster = CitusCluster.load_or_new(tmp_path / "c", bin_dir=tmp_path, workers=6)
    ports = [node.port for node in cluster.nodes]
    assert len(set(ports)) == 7
    assert all(1024 <= port < ephemeral_low() for port in ports), (ports, ephemeral_low())


def test_the_ports_drawn_are_free_and_distinct() -> None:
    ports = free_ports(20)
    assert len(set(ports)) == 20
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # no SO_REUSEADDR: refused if anything holds it


def test_a_patroni_pair_s_ports_are_drawn_below_the_ephemeral_range() -> None:
    # The layout takes base+1 .. base+23; fifty draws, none of them reaching the range
    # (the old draw, from 20000 to 40000, reached it in about a third of the draws), each
    # block free.
    for _ in range(50):
        base = free_block(23)
        assert 1024 <= base + 1 and base + 23 < ephemeral_low(), (base, ephemeral_low())
    for offset in range(1, 24):
        with socket.socket() as s:
            s.bind(("127.0.0.1", base + offset))
