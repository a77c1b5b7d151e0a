"""Queue options: defaults, validation and the merge/replace rules of configure (§4.9)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.errors import BadRequest

# Every option with its default, in the order configure echoes them.
DEFAULTS: dict[str, Any] = {
    "leaseTime": 300,
    "retryLimit": 3,
    "dlqAfterMaxRetries": True,
    "deadLetterQueue": True,
    "dedupWindowSeconds": 3600,
    "retentionSeconds": 0,
    "completedRetentionSeconds": 0,
    "retentionEnabled": False,
    "delayedProcessing": 0,
    "windowBuffer": 0,
    "maxSize": 0,
    "retryDelay": 1000,
    "ttl": 3600,
    "priority": 0,
    "encryptionEnabled": False,
    "maxWaitTimeSeconds": 0,
    "minPopWaitTime": 0,
}

_BOOLEAN = {k for k, v in DEFAULTS.items() if isinstance(v, bool)}
# Integers that may not be negative; `priority` is a free label and may be.
_NON_NEGATIVE = {k for k, v in DEFAULTS.items() if not isinstance(v, bool)} - {"priority"}
_CLAMPS = {"minPopWaitTime": (0, 60000)}
_MAX_INT = 2**31 - 1


def validate(given: Mapping[str, Any]) -> dict[str, Any]:
    """Known options with checked types; `None` values are kept (they mean "reset").

    Unknown keys are ignored: the official client forwards whatever a user passes to
    `create()`, and a typo there should not make queue creation fail.
    """
    clean: dict[str, Any] = {}
    for key, value in given.items():
        if key not in DEFAULTS:
            continue
        if value is None:
            clean[key] = None
        elif key in _BOOLEAN:
            if not isinstance(value, bool):
                raise BadRequest(f"option {key} must be a boolean")
            clean[key] = value
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise BadRequest(f"option {key} must be a number")
            if isinstance(value, float):
                if not value.is_integer():
                    raise BadRequest(f"option {key} must be a whole number")
                value = int(value)
            if key in _NON_NEGATIVE and value < 0:
                raise BadRequest(f"option {key} must not be negative")
            if abs(value) > _MAX_INT:
                raise BadRequest(f"option {key} is too large")
            if key in _CLAMPS:
                low, high = _CLAMPS[key]
                value = min(max(value, low), high)
            clean[key] = value
    return clean


def apply(current: Mapping[str, Any] | None, given: Mapping[str, Any], *,
          replace: bool) -> dict[str, Any]:
    """Effective options after a configure: merge keeps omitted values, replace resets them."""
    base = dict(DEFAULTS) if replace or current is None else {**DEFAULTS, **current}
    for key, value in validate(given).items():
        base[key] = DEFAULTS[key] if value is None else value
    return {key: base[key] for key in DEFAULTS}


def dlq_enabled(options: Mapping[str, Any]) -> bool:
    """The DLQ is off only when both flags are explicitly false (§13.3)."""
    return bool(options.get("deadLetterQueue", True) or options.get("dlqAfterMaxRetries", True))


def derive_namespace_task(queue: str) -> tuple[str, str]:
    """namespace = text before the first '.', task = text between the first and second '.'."""
    parts = queue.split(".", 2)
    if len(parts) == 1:
        return queue, ""
    return parts[0], parts[1]
