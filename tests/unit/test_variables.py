"""Every environment variable the settings read has a meaning (its declaration, or
core/variables.py for one read by code of its own), and the generated configuration reference
lists each with the default the code reads it with."""

from __future__ import annotations

import re

from core.env import Described, EnvironmentRecord, EnvReader
from core.settings import Settings, meanings, variables_read
from docsgen.configuration import operator_variables, render_configuration

DESCRIBED = {name: meaning for topic in meanings().values() for name, meaning in topic.items()}


def test_every_variable_read_has_a_meaning_and_every_meaning_is_read() -> None:
    read = set(variables_read())
    assert read - set(DESCRIBED) == set(), "declare these, or describe them in core/variables.py"
    assert set(DESCRIBED) - read == set(), "core/variables.py describes variables nobody reads"


def test_reading_an_empty_environment_gives_the_defaults_and_notes_every_read() -> None:
    record = EnvironmentRecord()
    assert Settings.from_env(record) == Settings()  # nothing set: every default applies
    reads = record.reads
    assert reads["PORT"].default == 6632 and (reads["PORT"].low, reads["PORT"].high) == (0, 65535)
    assert reads["LOG_LEVEL"].choices == ("debug", "info", "warning", "error", "critical")
    assert reads["JWT_ROLE_ADMIN"].default == "admin"
    assert "DATABASE_URL" in reads and reads["DATABASE_URL"].default is None


def test_a_typed_read_after_a_bare_lookup_keeps_its_default() -> None:
    record = EnvironmentRecord()
    assert record.get("X") is None
    assert EnvReader(record).integer("X", 7, low=1) == 7
    assert (record.reads["X"].default, record.reads["X"].low) == (7, 1)


def test_the_configuration_reference_lists_every_variable_with_its_default() -> None:
    page = render_configuration()
    rows = dict(re.findall(r"^\| `([A-Z0-9_]+)` \| ([^|]*) \|", page, re.MULTILINE))
    for name, read in variables_read().items():
        assert name in rows, f"{name} is missing from the configuration reference"
        described = DESCRIBED[name]
        if isinstance(described, Described) and described.default is not None:
            assert rows[name].strip() == described.default
        elif read.default not in (None, ""):
            assert f"`{read.default}`" in rows[name], (name, rows[name])
    for name, _, _ in operator_variables():
        assert name in rows
    assert {"QUEEN_URL", "QUEEN_TOKEN"} <= {name for name, _, _ in operator_variables()}
