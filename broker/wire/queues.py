"""`POST /api/v1/configure` (§4.9) and `DELETE /api/v1/resources/queues/{queue}` (§4.10)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Literal

import msgspec
from msgspec import UNSET, UnsetType

from broker.wire.types import Name, NameOrEmpty
from core import options

Number = int | float | None | UnsetType
Flag = bool | None | UnsetType


class QueueOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Every option of §4.9; `null` resets one to its default. Ranges are checked by
    `core.options` (its texts name the option). An unknown key is refused with 400."""

    leaseTime: Number = UNSET
    retryLimit: Number = UNSET
    dlqAfterMaxRetries: Flag = UNSET
    deadLetterQueue: Flag = UNSET
    dedupWindowSeconds: Number = UNSET
    retentionSeconds: Number = UNSET
    completedRetentionSeconds: Number = UNSET
    retentionEnabled: Flag = UNSET
    delayedProcessing: Number = UNSET
    windowBuffer: Number = UNSET
    maxSize: Number = UNSET
    retryDelay: Number = UNSET
    ttl: Number = UNSET
    priority: Number = UNSET
    encryptionEnabled: Flag = UNSET
    maxWaitTimeSeconds: Number = UNSET
    minPopWaitTime: Number = UNSET

    def given(self) -> dict[str, Any]:
        return {k: v for k in options.DEFAULTS if (v := getattr(self, k)) is not UNSET}


def _option_messages() -> dict[str, str]:
    out = {}
    for key, default in options.DEFAULTS.items():
        kind = "a boolean" if isinstance(default, bool) else "a number"
        for where in (key, f"options.{key}"):
            out[where] = f"option {key} must be {kind}"
    return out


class ConfigureBody(QueueOptions, kw_only=True):
    """Options may come nested in `options` or at top level (nested ones win); an unknown
    key in either place is refused, naming it."""

    MESSAGES: ClassVar[dict[str, str]] = {
        "queue": "queue is required", "mode": 'mode must be "merge" or "replace"',
        **_option_messages()}
    UNKNOWN_FIELD: ClassVar[Callable[[str], str]] = staticmethod(options.unknown_option)

    queue: Name
    namespace: NameOrEmpty | None = None
    task: NameOrEmpty | None = None
    options: QueueOptions | None = None
    mode: Literal["merge", "replace"] | None = None


class ConfigureAnswer(msgspec.Struct):
    configured: bool
    queueId: str
    partitionId: None
    queue: str
    namespace: str
    task: str
    options: dict[str, Any]


class DeleteQueueAnswer(msgspec.Struct):
    deleted: bool
    queue: str
    existed: bool
    message: str | UnsetType = UNSET
