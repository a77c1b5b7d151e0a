"""Settings.from_env: defaults, database selection, and errors that name the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.settings import Settings, SettingsError


def test_empty_environment_gives_the_defaults_and_the_embedded_database() -> None:
    s = Settings.from_env({})
    assert s == Settings()
    assert s.port == 6632 and s.host == "127.0.0.1"
    assert s.database_url is None and s.uses_embedded_database
    assert s.max_body_bytes == 16 * 1024 * 1024


def test_values_are_parsed_from_text() -> None:
    s = Settings.from_env({"PORT": " 7000 ", "WORKERS": "3", "MAX_BODY_BYTES": "2048",
                           "MAX_PUSH_ITEMS": "5", "POP_WAIT_BACKOFF_MULTIPLIER": "1.5",
                           "LOG_LEVEL": "DEBUG", "QUEEN_DATA_DIR": "/srv/q", "PORT_UNUSED": "x"})
    assert (s.port, s.workers, s.max_body_bytes, s.max_push_items) == (7000, 3, 2048, 5)
    assert s.pop_wait_backoff_multiplier == 1.5
    assert s.log_level == "debug"
    assert s.data_dir == Path("/srv/q")
    assert Settings().trace_retention_days == 7
    assert Settings.from_env({"TRACE_RETENTION_DAYS": "0"}).trace_retention_days == 0


@pytest.mark.parametrize(("cpus", "embedded", "external"), [(1, 1, 1), (2, 1, 2), (8, 7, 8)])
def test_by_default_a_web_worker_per_cpu_one_fewer_beside_the_embedded_database(
        monkeypatch: pytest.MonkeyPatch, cpus: int, embedded: int, external: int) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cpus)))
    assert Settings.from_env({}).web_workers == embedded
    assert Settings.from_env({"DATABASE_URL": "postgresql://h/db"}).web_workers == external
    assert Settings.from_env({"PG_HOST": "h"}).web_workers == external
    # WORKERS wins either way.
    assert Settings.from_env({"WORKERS": "3"}).web_workers == 3
    assert Settings.from_env({"WORKERS": "3", "PG_HOST": "h"}).web_workers == 3


def test_idle_keep_alive_connections_stay_open_75_seconds_unless_configured() -> None:
    """Longer than the 5 s httpx (and so the official client) keeps an idle connection for
    reuse; hypercorn's own default is exactly those 5 s."""
    from broker.worker import hypercorn_config

    assert Settings().keep_alive_timeout_s == 75
    assert hypercorn_config(Settings()).keep_alive_timeout == 75
    tuned = Settings.from_env({"KEEP_ALIVE_TIMEOUT_SECONDS": " 120 "})
    assert hypercorn_config(tuned).keep_alive_timeout == 120


def test_empty_value_means_default() -> None:
    assert Settings.from_env({"PORT": "", "DB_POOL_SIZE": "  "}).port == 6632


def test_alias_is_used_when_the_main_name_is_absent() -> None:
    assert Settings.from_env({"QUEEN_STMT_TIMEOUT_MS": "500"}).db_statement_timeout_ms == 500
    assert Settings.from_env({"QUEEN_STMT_TIMEOUT_MS": "500", "DB_STATEMENT_TIMEOUT": "700"}
                             ).db_statement_timeout_ms == 700
    assert Settings.from_env({"POP_DEFAULT_TIMEOUT_MS": "900"}).default_timeout_ms == 900


@pytest.mark.parametrize(("env", "fragment"), [
    ({"PORT": "http"}, "PORT='http': expected an integer"),
    ({"PORT": "70000"}, "PORT='70000': must be at most 65535"),
    ({"DB_POOL_SIZE": "0"}, "DB_POOL_SIZE='0': must be at least 1"),
    ({"MAX_BODY_BYTES": "100"}, "MAX_BODY_BYTES='100': must be at least 1024"),
    ({"MAX_PUSH_ITEMS": "1.5"}, "MAX_PUSH_ITEMS='1.5': expected an integer"),
    ({"POP_WAIT_BACKOFF_MULTIPLIER": "fast"}, "POP_WAIT_BACKOFF_MULTIPLIER='fast'"),
    ({"LOG_LEVEL": "loud"}, "LOG_LEVEL='loud': expected one of"),
    ({"TRACE_RETENTION_DAYS": "-1"}, "TRACE_RETENTION_DAYS='-1': must be at least 0"),
    ({"PG_PORT": "abc"}, "PG_PORT='abc': expected an integer"),
    ({"KEEP_ALIVE_TIMEOUT_SECONDS": "75s"},
     "KEEP_ALIVE_TIMEOUT_SECONDS='75s': expected an integer"),
    ({"KEEP_ALIVE_TIMEOUT_SECONDS": "0"}, "KEEP_ALIVE_TIMEOUT_SECONDS='0': must be at least 1"),
    ({"KEEP_ALIVE_TIMEOUT_SECONDS": "7200"},
     "KEEP_ALIVE_TIMEOUT_SECONDS='7200': must be at most 3600"),
    ({"DATABASE_URL": "mysql://u:secret@db/x"}, "DATABASE_URL='db/x' is not a postgres://"),
])
def test_bad_value_raises_settings_error_naming_the_variable(env: dict[str, str],
                                                            fragment: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env(env)
    assert fragment in str(info.value)


def test_bad_database_url_error_does_not_leak_the_password() -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"DATABASE_URL": "mysql://user:hunter2@db/x"})
    assert "hunter2" not in str(info.value)


def test_database_url_wins_over_pg_variables() -> None:
    s = Settings.from_env({"DATABASE_URL": "postgresql://a@h/d", "PG_HOST": "other"})
    assert s.database_url == "postgresql://a@h/d"
    assert not s.uses_embedded_database


def test_pg_variables_build_a_url_with_quoted_parts() -> None:
    s = Settings.from_env({"PG_HOST": "db.local", "PG_PORT": "6543", "PG_USER": "app",
                           "PG_PASSWORD": "p@ss/word", "PG_DATABASE": "queen"})
    assert s.database_url == "postgresql://app:p%40ss%2Fword@db.local:6543/queen"


def test_pg_db_is_the_fallback_name_and_defaults_fill_the_rest() -> None:
    assert Settings.from_env({"PG_DB": "legacy"}).database_url == \
        "postgresql://postgres:postgres@localhost:5432/legacy"
    assert Settings.from_env({"PG_DB": "legacy", "PG_DATABASE": "new"}).database_url == \
        "postgresql://postgres:postgres@localhost:5432/new"


def test_pg_host_that_is_a_directory_uses_the_unix_socket() -> None:
    url = Settings.from_env({"PG_HOST": "/run/pg", "PG_PASSWORD": ""}).database_url
    assert url == "postgresql://postgres@/postgres?host=/run/pg&port=5432"


def test_settings_are_frozen() -> None:
    s = Settings()
    with pytest.raises(AttributeError):
        s.port = 1  # type: ignore[misc]


def test_listen_address_defaults_to_loopback_with_auth_off_and_every_interface_with_it_on(
        ) -> None:
    assert Settings.from_env({}).host == "127.0.0.1"
    auth = {"JWT_ENABLED": "true", "JWT_SECRET": "s" * 32}
    assert Settings.from_env(auth).host == "0.0.0.0"
    assert Settings.from_env({"HOST": "0.0.0.0"}).host == "0.0.0.0"
    assert Settings.from_env({**auth, "HOST": "127.0.0.1"}).host == "127.0.0.1"
    assert Settings.from_env({"QUEEN_HOST": "::1", "HOST": "0.0.0.0"}).host == "::1"
    assert Settings.from_env({"QUEEN_HOST": " ", "HOST": ""}).host == "127.0.0.1"


def test_pg_host_lists_several_servers_as_libpq_does() -> None:
    url = Settings.from_env({"PG_HOST": "db1,db2", "PG_PORT": "5432,5433",
                             "PG_PASSWORD": ""}).database_url
    assert url == "postgresql://postgres@db1:5432,db2:5433/postgres"
    # One port serves every host; Unix-socket directories go in the host= list.
    assert Settings.from_env({"PG_HOST": "db1, db2", "PG_PASSWORD": ""}).database_url == \
        "postgresql://postgres@db1:5432,db2:5432/postgres"
    assert Settings.from_env({"PG_HOST": "/run/a,/run/b", "PG_PORT": "5432,5433",
                              "PG_PASSWORD": ""}).database_url == \
        "postgresql://postgres@/postgres?host=/run/a,/run/b&port=5432,5433"


@pytest.mark.parametrize(("env", "fragment"), [
    ({"PG_HOST": "db1,db2", "PG_PORT": "1,2,3"}, "PG_PORT lists 3 ports for 2 PG_HOST hosts"),
    ({"PG_HOST": "db1,,db2"}, "PG_HOST='db1,,db2' names an empty host"),
    ({"PG_HOST": "db1,db2", "PG_PORT": "1,x"}, "PG_PORT='1,x': expected an integer"),
    ({"PG_HOST": "db1,/run/pg"}, "PG_HOST mixes Unix-socket directories and network hosts"),
    ({"DATABASE_URL": "postgresql://u@/q?host=/a,/b&port=1,2,3"}, "2 hosts but 3 ports"),
])
def test_bad_pg_host_lists_are_refused_naming_the_problem(env: dict[str, str],
                                                          fragment: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env(env)
    assert fragment in str(info.value)
