"""The Patroni pair's layout and configuration (broker/patroni.py)."""

from __future__ import annotations

from pathlib import Path

from broker.patroni import NODES, Layout, node_config, witness_config
from core.storage.hosts import Host, dsn_hosts, with_read_write


def test_every_member_gets_its_own_ports_and_the_broker_both_hosts(tmp_path: Path) -> None:
    layout = Layout(tmp_path, base_port=7000)
    ports = [layout.pg_port(n) for n in NODES] + [layout.rest_port(n) for n in NODES] + [
        int(layout.raft_addr(m).rsplit(":", 1)[1]) for m in range(3)]
    assert len(set(ports)) == len(ports) == 7
    dsn = layout.dsn()
    assert dsn_hosts(dsn) == [Host("127.0.0.1", 7001), Host("127.0.0.1", 7002)]
    assert with_read_write(dsn) == dsn  # it asks for the read-write host itself


def test_nodes_replicate_synchronously_and_can_rewind(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    config = node_config(layout, "pg2")
    dcs = config["bootstrap"]["dcs"]  # type: ignore[index]
    assert dcs["synchronous_mode"] is True and dcs["ttl"] >= 20
    assert dcs["postgresql"]["use_pg_rewind"] is True
    assert dcs["postgresql"]["parameters"]["synchronous_commit"] == "on"
    assert config["postgresql"]["data_dir"] == str(tmp_path / "pg2" / "pg")  # type: ignore[index]
    # The three Raft members name each other.
    members = {node_config(layout, n)["raft"]["self_addr"] for n in NODES}  # type: ignore[index]
    members.add(witness_config(layout)["raft"]["self_addr"])  # type: ignore[index]
    assert members == set(node_config(layout, "pg1")["raft"]["partner_addrs"]) | {  # type: ignore[index]
        node_config(layout, "pg1")["raft"]["self_addr"]}  # type: ignore[index]
