"""Queue options: configure's merge/replace/null-reset rules, validation, namespace/task."""

from __future__ import annotations

from typing import Any

import pytest

from core import options
from core.errors import BadRequest


def test_apply_to_a_new_queue_fills_every_option_with_its_default_in_echo_order() -> None:
    effective = options.apply(None, {"leaseTime": 10}, replace=False)
    assert list(effective) == list(options.DEFAULTS)
    assert effective == {**options.DEFAULTS, "leaseTime": 10}


def test_merge_keeps_omitted_options_and_changes_given_ones() -> None:
    current = {**options.DEFAULTS, "leaseTime": 10, "retryLimit": 9}
    effective = options.apply(current, {"retryLimit": 1, "dedupWindowSeconds": 0},
                              replace=False)
    assert effective["leaseTime"] == 10
    assert effective["retryLimit"] == 1
    assert effective["dedupWindowSeconds"] == 0


def test_merge_with_explicit_null_resets_that_option_to_its_default() -> None:
    current = {**options.DEFAULTS, "leaseTime": 10, "retryLimit": 9}
    effective = options.apply(current, {"leaseTime": None}, replace=False)
    assert effective["leaseTime"] == 300
    assert effective["retryLimit"] == 9


def test_replace_resets_every_omitted_option() -> None:
    current = {**options.DEFAULTS, "leaseTime": 10, "retryLimit": 9, "priority": 4}
    effective = options.apply(current, {"priority": 2}, replace=True)
    assert effective == {**options.DEFAULTS, "priority": 2}


def test_stored_options_missing_a_newer_key_get_its_default() -> None:
    effective = options.apply({"leaseTime": 5}, {}, replace=False)
    assert effective == {**options.DEFAULTS, "leaseTime": 5}


def test_an_unknown_option_is_refused_naming_it() -> None:
    with pytest.raises(BadRequest, match="^unknown option leaseTme; the options are: leaseTime"):
        options.validate({"leaseTme": "typo", "retryLimit": 2})


def test_max_size_is_a_non_negative_whole_number() -> None:
    assert options.validate({"maxSize": 0}) == {"maxSize": 0}
    assert options.validate({"maxSize": None}) == {"maxSize": None}
    assert options.validate({"maxSize": 10}) == {"maxSize": 10}
    with pytest.raises(BadRequest, match="^option maxSize must not be negative"):
        options.validate({"maxSize": -1})


def test_whole_floats_become_ints_and_min_pop_wait_is_clamped() -> None:
    clean = options.validate({"leaseTime": 30.0, "minPopWaitTime": 999_999, "priority": -3})
    assert clean == {"leaseTime": 30, "minPopWaitTime": 60000, "priority": -3}
    assert isinstance(clean["leaseTime"], int)


@pytest.mark.parametrize(("given", "fragment"), [
    ({"leaseTime": "10"}, "option leaseTime must be a number"),
    ({"retryLimit": True}, "option retryLimit must be a number"),
    ({"retryLimit": [1]}, "option retryLimit must be a number"),
    ({"ttl": 1.5}, "option ttl must be a whole number"),
    ({"dedupWindowSeconds": -1}, "option dedupWindowSeconds must not be negative"),
    ({"leaseTime": 2**31}, "option leaseTime is too large"),
    ({"priority": -(2**31)}, "option priority is too large"),
    ({"encryptionEnabled": 1}, "option encryptionEnabled must be a boolean"),
    ({"deadLetterQueue": "false"}, "option deadLetterQueue must be a boolean"),
])
def test_validate_rejects_bad_values_naming_the_option(given: dict[str, Any],
                                                       fragment: str) -> None:
    with pytest.raises(BadRequest) as info:
        options.validate(given)
    assert fragment in info.value.message


def test_apply_validates_before_changing_anything() -> None:
    current = {**options.DEFAULTS, "leaseTime": 10}
    with pytest.raises(BadRequest):
        options.apply(current, {"retryLimit": 2, "leaseTime": -5}, replace=False)
    assert current["leaseTime"] == 10


@pytest.mark.parametrize(("flags", "enabled"), [
    ({}, True),
    ({"deadLetterQueue": False}, True),
    ({"dlqAfterMaxRetries": False}, True),
    ({"deadLetterQueue": False, "dlqAfterMaxRetries": False}, False),
])
def test_dlq_is_off_only_when_both_flags_are_false(flags: dict[str, bool], enabled: bool) -> None:
    assert options.dlq_enabled(flags) is enabled


@pytest.mark.parametrize(("queue", "expected"), [
    ("orders", ("orders", "")),
    ("billing.invoices", ("billing", "invoices")),
    ("billing.invoices.eu.west", ("billing", "invoices")),
    ("billing.", ("billing", "")),
    (".invoices", ("", "invoices")),
    ("a..b", ("a", "")),
    ("", ("", "")),
])
def test_derive_namespace_task_splits_on_the_first_two_dots(queue: str,
                                                            expected: tuple[str, str]) -> None:
    assert options.derive_namespace_task(queue) == expected


def test_the_lease_of_a_pop_is_the_request_s_then_the_queue_s_then_60_seconds() -> None:
    assert options.decode("{}").lease_time == 300  # a row missing the key: the default
    assert options.decode("{}").lease_seconds() == 300
    assert options.decode('{"leaseTime": 0}').lease_seconds() == 60  # §4.2 fallback
    assert options.decode('{"leaseTime": 0}').lease_seconds(15) == 15
    assert options.decode('{"leaseTime": 45}').lease_seconds() == 45
    assert options.decode(options.DEFAULTS_JSON) == options.EffectiveOptions()
