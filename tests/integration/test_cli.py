"""`queen-broker`'s operator commands against real brokers (auth off and on), over HTTP:
every command, its --json answer parsed, and the exit statuses scripts branch on."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result

from broker.cli import main
from tests.support import PYTHON, ROOT, BrokerProcess, free_port
from tests.tokens import AUTH_ENV, AUTH_SECRET, Signer

SIGNER = Signer(AUTH_SECRET, "HS256")


class Cli:
    """Runs `queen-broker ARGS` in process against one broker; answers (status, stdout,
    stderr)."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.env = {"QUEEN_URL": url, "QUEEN_TOKEN": token or ""}

    def __call__(self, *args: str, stdin: str | None = None) -> Result:
        return CliRunner().invoke(main, list(args), env=self.env, input=stdin,
                                  catch_exceptions=False)

    def json(self, *args: str) -> Any:
        result = self(*args, "--json")
        assert result.exit_code == 0, (args, result.output)
        return json.loads(result.stdout)


@pytest.fixture
def cli(broker: BrokerProcess) -> Cli:
    return Cli(broker.url)


@pytest.fixture
def maintenance_restored(broker: BrokerProcess) -> Iterator[None]:
    """Both switches off again whatever the test did: they hold for the whole session's
    broker."""
    yield
    for path in ("/api/v1/system/maintenance", "/api/v1/system/maintenance/pop"):
        httpx.post(broker.url + path, json={"enabled": False}, timeout=30).raise_for_status()


def test_status_reports_health_totals_and_switches(cli: Cli) -> None:
    answer = cli.json("status")
    assert answer["health"]["status"] == "healthy"
    assert answer["status"]["queues"] >= 0 and "deadLetters" in answer["status"]
    assert answer["maintenance"]["maintenanceMode"] is False
    human = cli("status")
    assert human.exit_code == 0
    assert "healthy, database connected" in human.stdout and "push off, pop off" in human.stdout


def test_queues_create_list_show_and_delete(cli: Cli, queue_name: str) -> None:
    created = cli.json("queues", "create", queue_name, "--retry-limit", "2", "--lease-time",
                       "60", "--no-dlq", "-o", "ttl=600", "--namespace", "shop")
    assert created["configured"] is True and created["namespace"] == "shop"
    assert (created["options"]["retryLimit"], created["options"]["leaseTime"],
            created["options"]["ttl"], created["options"]["deadLetterQueue"]) == (2, 60, 600,
                                                                                  False)
    listed = cli.json("queues", "list", "--search", queue_name)
    assert [q["name"] for q in listed["queues"]] == [queue_name]
    # The table form (the session database holds other tests' queues: past one page).
    assert queue_name in cli("queues", "list", "--limit", "10000").stdout
    cli.json("push", queue_name, '{"n": 1}', "-p", "a")
    shown = cli.json("queues", "show", queue_name)
    assert shown["totals"]["total"] == 1 and shown["options"]["retryLimit"] == 2
    assert [p["name"] for p in shown["partitions"]] == ["a"]
    assert "retryLimit" in cli("queues", "show", queue_name).stdout
    # A deletion from a script without --yes is refused (exit 2) and deletes nothing.
    refused = cli("queues", "delete", queue_name)
    assert refused.exit_code == 2 and "--yes" in refused.stderr
    assert cli("queues", "show", queue_name).exit_code == 0
    deleted = cli.json("queues", "delete", queue_name, "--yes")
    assert deleted["deleted"] is True and deleted["existed"] is True
    missing = cli("queues", "show", queue_name)
    assert missing.exit_code == 4 and f"queue '{queue_name}' not found" in missing.stderr
    assert cli("queues", "create", queue_name, "-o", "nonsense").exit_code == 2
    bad = cli("queues", "create", queue_name, "-o", "noSuchOption=1")
    assert bad.exit_code == 1 and "noSuchOption" in bad.stderr
    assert cli("queues", "show", queue_name).exit_code == 4  # the refused configure made nothing


def test_push_and_pop_with_a_group_ack_fail_and_leave_leased(cli: Cli, queue_name: str) -> None:
    pushed = cli.json("push", queue_name, '{"id": 1}', "plain text", '{"id": 3}', "-p", "eu")
    assert [r["status"] for r in pushed] == ["queued"] * 3
    again = cli.json("push", queue_name, "{}", "--transaction-id", "tx-1")
    assert again[0]["status"] == "queued"
    assert cli.json("push", queue_name, "{}", "--transaction-id", "tx-1")[0]["status"] == \
        "duplicate"
    first = cli.json("pop", queue_name, "-p", "eu", "-g", "g1", "--batch", "2")
    assert [m["data"] for m in first["messages"]] == [{"id": 1}, "plain text"]
    assert all(a["success"] for a in first["acks"]) and len(first["acks"]) == 2
    left = cli.json("pop", queue_name, "-p", "eu", "-g", "g1", "--no-ack")
    assert [m["data"] for m in left["messages"]] == [{"id": 3}] and left["acks"] == []
    # Leased: nothing more to pop from that partition now (exit 0, "no messages").
    empty = cli("pop", queue_name, "-p", "eu", "-g", "g1")
    assert empty.exit_code == 0 and "no messages" in empty.stdout
    # Another group reads the same partition from the start, with a long poll that answers.
    other = cli.json("pop", queue_name, "-p", "eu", "-g", "g2", "--wait", "1")
    assert other["messages"][0]["data"] == {"id": 1}
    assert cli("push", queue_name).exit_code == 2  # nothing to push
    from_file = cli("push", queue_name, "--file", "-", "--json", stdin='{"a": 1}\n\n"b"\n')
    assert [r["status"] for r in json.loads(from_file.stdout)] == ["queued", "queued"]


def test_dlq_list_show_replay_and_purge(cli: Cli, queue_name: str) -> None:
    cli.json("queues", "create", queue_name, "--retry-limit", "0")
    cli.json("push", queue_name, '{"n": 1}', '{"n": 2}', '{"n": 3}')
    # A failure dead-letters its message (retry limit 0) and hands the rest of the batch back.
    failed = cli.json("pop", queue_name, "-g", "billing", "--batch", "3", "--fail", "boom")
    assert [a["dlq"] for a in failed["acks"]] == [True, False, False]
    human = cli("pop", queue_name, "-g", "billing", "--fail", "boom")
    assert "acknowledged 1 of 1 as failed: 1 dead-lettered, 0 to be delivered again" in \
        human.stdout
    cli.json("pop", queue_name, "-g", "billing", "--fail", "boom")
    rows = cli.json("dlq", "list", "--queue", queue_name)
    assert rows["total"] == 3
    assert {m["errorMessage"] for m in rows["messages"]} == {"boom"}
    assert "boom" in cli("dlq", "list", "-q", queue_name).stdout
    one = rows["messages"][0]
    shown = cli.json("dlq", "show", one["id"], "--queue", queue_name)
    assert shown["data"] == one["data"] and shown["consumerGroup"] == "billing"
    replayed = cli.json("dlq", "replay", one["id"])
    assert replayed[0]["dlqId"] == one["id"] and replayed[0]["replayedAs"]["offset"] == 3
    gone = cli("dlq", "show", one["id"], "-q", queue_name)
    assert gone.exit_code == 4
    assert cli("dlq", "replay", one["id"]).exit_code == 4  # already replayed
    # The replayed copy is a new message the group pops again.
    assert cli.json("pop", queue_name, "-g", "billing")["messages"][0]["data"] == one["data"]
    # --all replays the rest into another queue.
    target = queue_name + "-replays"
    rest = cli.json("dlq", "replay", "--all", "-q", queue_name, "--to-queue", target)
    assert len(rest) == 2 and {r["queue"] for r in rest} == {target}
    assert cli.json("dlq", "list", "-q", queue_name)["total"] == 0
    assert cli("dlq", "replay", "-q", queue_name).exit_code == 2  # neither ids nor --all
    # Purge: refused without --yes, then everything of the queue goes.
    cli.json("pop", target, "-g", "billing", "--batch", "2", "--fail", "again")
    assert cli.json("dlq", "list", "-q", target)["total"] == 0  # target has its own retry
    cli.json("queues", "create", target, "--retry-limit", "0")
    cli.json("push", target, '{"late": true}')
    cli.json("pop", target, "-g", "late", "--fail", "late")
    assert cli("dlq", "purge", "-q", target).exit_code == 2
    assert cli.json("dlq", "list", "-q", target)["total"] >= 1
    purged = cli.json("dlq", "purge", "-q", target, "--yes")
    assert purged["deleted"] >= 1 and cli.json("dlq", "list", "-q", target)["total"] == 0


def test_lag_groups_list_and_seek(cli: Cli, queue_name: str) -> None:
    before = datetime.now(UTC) - timedelta(seconds=5)
    cli.json("push", queue_name, "1", "2", "3", "-p", "a")
    cli.json("push", queue_name, "4", "-p", "b")
    cli.json("pop", queue_name, "-p", "a", "-g", "readers", "--batch", "3")
    cli.json("pop", queue_name, "-p", "b", "-g", "readers", "--no-ack")  # a cursor, leased
    rows = {(r["group"], r["partition"]): r for r in cli.json("lag", "-q", queue_name)}
    assert rows[("readers", "a")]["offsetLag"] == 0 and rows[("readers", "a")]["committedOffset"] == 2
    assert rows[("readers", "b")]["offsetLag"] == 1 and rows[("readers", "b")]["leaseActive"]
    lagging = cli.json("lag", "-q", queue_name, "--lagging")
    assert [(r["group"], r["partition"]) for r in lagging] == [("readers", "b")]
    by_group = cli.json("lag", "-g", "readers", "-q", queue_name)
    assert [(r["partition"], r["offsetLag"]) for r in by_group] == [("a", 0), ("b", 1)]
    assert "readers" in cli("lag", "-q", queue_name).stdout
    listed = cli.json("groups", "list")
    assert any(g["name"] == "readers" and g["queueName"] == queue_name for g in listed)
    # To the end: nothing left behind.
    moved = cli.json("groups", "seek", "readers", queue_name, "--to-end")
    assert moved["partitionsUpdated"] == 2
    assert cli.json("lag", "-q", queue_name, "--lagging") == []
    assert "no lagging partitions" in cli("lag", "-q", queue_name, "--lagging").stdout
    # Back to a time before the pushes: everything again, on one partition only.
    back = cli.json("groups", "seek", "readers", queue_name, "--to",
                    before.isoformat().replace("+00:00", "Z"), "-p", "a")
    assert back["updated"] is True
    assert [(r["partition"], r["offsetLag"]) for r in cli.json("lag", "-q", queue_name,
                                                                "--lagging")] == [("a", 3)]
    assert cli("groups", "seek", "readers", queue_name).exit_code == 2
    assert cli("groups", "seek", "readers", queue_name, "--to-end", "--to", "2026-01-01"
               ).exit_code == 2
    assert cli("groups", "seek", "readers", queue_name, "--to", "yesterday").exit_code == 2


@pytest.mark.usefixtures("maintenance_restored")
def test_maintenance_show_and_switch_push_and_pop(cli: Cli, queue_name: str) -> None:
    assert cli.json("maintenance")["maintenanceMode"] is False
    on = cli.json("maintenance", "pop", "on")
    assert on["popMaintenanceMode"] is True and on["maintenanceMode"] is False
    cli.json("push", queue_name, "x")
    assert cli.json("pop", queue_name)["messages"] == []  # pops paused
    assert cli.json("maintenance", "pop", "off")["popMaintenanceMode"] is False
    assert cli.json("maintenance", "push", "on")["maintenanceMode"] is True
    assert cli.json("push", queue_name, "y")[0]["status"] == "buffered"
    assert "push maintenance  on" in cli("maintenance").stdout
    assert cli.json("maintenance", "push", "off")["maintenanceMode"] is False
    assert cli("maintenance", "push").exit_code == 2
    assert cli("maintenance", "push", "maybe").exit_code == 2


def test_exit_statuses_for_an_unreachable_broker_and_bad_usage(broker: BrokerProcess) -> None:
    nobody = Cli(f"http://127.0.0.1:{free_port()}")
    result = nobody("status")
    assert result.exit_code == 3 and "cannot reach the broker" in result.stderr
    assert nobody("queues", "list", "--json").stdout == ""  # nothing half-printed for a script
    assert Cli(broker.url)("queues", "show").exit_code == 2  # missing argument
    assert Cli(broker.url)("no-such-command").exit_code == 2


def test_a_queue_or_group_the_operator_names_that_does_not_exist_is_exit_4(
        cli: Cli, queue_name: str) -> None:
    """A typo must not read as "nothing to do": the routes answer an unknown queue with
    nothing (a pop's 204, an empty list), so the command asks whether the queue exists."""
    unknown = "no-such-queue-" + queue_name
    missing = f"Error: queue '{unknown}' not found"
    for args in (("pop", unknown), ("pop", unknown, "-g", "billing", "--json"),
                 ("lag", "--queue", unknown), ("lag", "--queue", unknown, "--lagging"),
                 ("dlq", "list", "--queue", unknown), ("dlq", "list", "-q", unknown, "--json"),
                 ("dlq", "replay", "--all", "-q", unknown), ("dlq", "purge", "-q", unknown),
                 ("dlq", "purge", "-q", unknown, "--yes"), ("dlq", "show", "1", "-q", unknown),
                 ("queues", "show", unknown)):
        result = cli(*args)
        assert (result.exit_code, result.stderr.strip(), result.stdout) == (4, missing, ""), \
            args
    deleted = cli("queues", "delete", unknown, "--yes")
    assert (deleted.exit_code, deleted.stderr.strip()) == (4, missing + "; nothing deleted")
    lost = cli("lag", "--group", "no-such-group-" + queue_name)
    assert lost.exit_code == 4
    assert lost.stderr.strip() == f"Error: consumer group 'no-such-group-{queue_name}' not found"
    # An existing queue with nothing to pop, nothing lagging, no dead letters: exit 0.
    cli.json("push", queue_name, "1")
    cli.json("pop", queue_name, "-g", "g")
    for args, says in ((("pop", queue_name, "-g", "g"), "no messages"),
                       (("lag", "-q", queue_name, "--lagging"), "no lagging partitions"),
                       (("dlq", "list", "-q", queue_name), "no dead letters")):
        result = cli(*args)
        assert result.exit_code == 0 and says in result.stdout, args


def test_a_url_that_is_not_an_http_url_is_a_usage_error(broker: BrokerProcess) -> None:
    for url in ("not-a-url", "ftp://127.0.0.1:6632", "http://", "127.0.0.1:6632"):
        result = Cli(url)("status")
        assert result.exit_code == 2, (url, result.output)
        assert "--url" in result.stderr and "is not an http(s) URL" in result.stderr, url
    flagged = CliRunner().invoke(main, ["lag", "--url", "not-a-url"], env={"QUEEN_URL": ""})
    assert flagged.exit_code == 2
    assert "Invalid value for '--url': 'not-a-url' is not an http(s) URL" in flagged.stderr


def test_with_auth_on_the_token_decides(auth_broker: BrokerProcess, queue_name: str) -> None:
    anonymous = Cli(auth_broker.url)
    refused = anonymous("queues", "list")
    assert refused.exit_code == 5 and "401" in refused.stderr
    reader = Cli(auth_broker.url, SIGNER.token(role="read-only"))
    assert reader.json("queues", "list")["total"] >= 0
    # The switches are ADMIN: a reader's status shows the rest.
    assert reader.json("status")["maintenance"] is None
    assert "(an admin token shows it)" in reader("status").stdout
    denied = reader("queues", "create", queue_name)
    assert denied.exit_code == 5 and "403" in denied.stderr
    admin = Cli(auth_broker.url, SIGNER.token(role="admin"))
    assert admin.json("status")["health"]["status"] == "healthy"
    admin.json("queues", "create", queue_name, "--retry-limit", "0")
    assert admin.json("push", queue_name, '{"a": 1}')[0]["status"] == "queued"
    popped = admin.json("pop", queue_name, "-g", "ops", "--fail", "x")
    assert popped["messages"][0]["producerSub"] == "alice"
    assert admin.json("dlq", "list", "-q", queue_name)["total"] == 1
    assert admin.json("lag", "-q", queue_name)[0]["group"] == "ops"
    assert admin.json("maintenance")["maintenanceMode"] is False
    # --token on the command line works like QUEEN_TOKEN.
    flagged = CliRunner().invoke(main, ["queues", "delete", queue_name, "--yes", "--json",
                                        "--url", auth_broker.url, "--token",
                                        SIGNER.token(role="admin")], env={"QUEEN_TOKEN": ""})
    assert flagged.exit_code == 0 and json.loads(flagged.stdout)["deleted"] is True


def _minted(role: str, sub: str, **env: str) -> str:
    """`queen-broker token` with the auth broker's settings (AUTH_ENV) in its environment."""
    result = CliRunner().invoke(main, ["token", "--role", role, "--sub", sub],
                                env={**AUTH_ENV, **env})
    assert result.exit_code == 0, result.output
    return result.stdout.strip()


def test_a_minted_token_is_accepted_at_its_level_and_refused_above(
        auth_broker: BrokerProcess, queue_name: str) -> None:
    writer = Cli(auth_broker.url, _minted("read-write", "billing-svc"))
    assert writer.json("push", queue_name, '{"n": 1}')[0]["status"] == "queued"
    popped = writer.json("pop", queue_name, "-g", "billing")
    assert popped["messages"][0]["producerSub"] == "billing-svc" and popped["acks"][0]["success"]
    assert writer.json("lag", "-q", queue_name)[0]["offsetLag"] == 0
    above = writer("maintenance")  # ADMIN
    assert above.exit_code == 5 and "403" in above.stderr
    reader = Cli(auth_broker.url, _minted("read-only", "dashboard"))
    assert reader.json("queues", "show", queue_name)["totals"]["total"] == 1
    denied = reader("push", queue_name, "x")  # WRITE_ONLY
    assert denied.exit_code == 5 and "403" in denied.stderr
    admin = Cli(auth_broker.url, _minted("admin", "ops"))
    assert admin.json("maintenance")["maintenanceMode"] is False
    # Another secret (of the right length) mints tokens this broker refuses.
    stranger = Cli(auth_broker.url, _minted("admin", "ops", JWT_SECRET="another-secret-" * 3))
    refused = stranger("status")
    assert refused.exit_code == 5 and "401" in refused.stderr


def test_the_installed_command_prints_its_version_and_exits_with_the_status(
        broker: BrokerProcess) -> None:
    """The real process, as a script would run it (python -m broker.cli is what the
    `queen-broker` entry point calls)."""
    version = subprocess.run([PYTHON, "-m", "broker.cli", "--version"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60,
                             check=False)
    assert version.returncode == 0 and version.stdout.startswith("queen-broker ")
    missing = subprocess.run([PYTHON, "-m", "broker.cli", "queues", "show", "no-such-queue-x",
                              "--url", broker.url], cwd=ROOT, capture_output=True, text=True,
                             timeout=60, check=False)
    assert missing.returncode == 4
    assert missing.stderr.strip() == "Error: queue 'no-such-queue-x' not found"


def _on_a_terminal(argv: list[str], url: str, answer: bytes = b"") -> tuple[int, str]:
    """`queen-broker ARGV` with a pseudo-terminal as stdin, stdout and stderr (as a person
    runs it); `answer` is typed in. Answers (exit status, everything it showed)."""
    import os
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen([PYTHON, "-m", "broker.cli", *argv, "--url", url], cwd=ROOT,
                            stdin=slave, stdout=slave, stderr=slave,
                            env={**os.environ, "QUEEN_TOKEN": "", "COLUMNS": "120"})
    os.close(slave)
    if answer:
        os.write(master, answer)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal closed: the process is gone
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    return proc.wait(timeout=60), shown.decode(errors="replace")


def test_on_a_terminal_long_operations_show_progress_and_deletions_ask(
        broker: BrokerProcess, queue_name: str) -> None:
    status, shown = _on_a_terminal(["push", queue_name, "x", "--count", "3000"], broker.url)
    assert status == 0 and "3000 message(s)" in shown
    assert "pushing" in shown  # the progress bar (stderr, terminal only)
    status, shown = _on_a_terminal(["queues", "delete", queue_name], broker.url, b"n\n")
    assert status == 2 and "Delete queue" in shown and "cancelled" in shown
    assert Cli(broker.url).json("queues", "show", queue_name)["totals"]["total"] == 3000
    status, shown = _on_a_terminal(["queues", "delete", queue_name], broker.url, b"y\n")
    assert status == 0 and f"queue {queue_name} deleted" in shown
    assert Cli(broker.url)("queues", "show", queue_name).exit_code == 4
