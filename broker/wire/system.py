"""`/api/v1/system/maintenance` and `/api/v1/system/maintenance/pop` (wire-protocol §11)."""

from __future__ import annotations

from typing import ClassVar

import msgspec
from msgspec import UNSET, UnsetType


class SwitchBody(msgspec.Struct):
    """Turn a maintenance switch on or off."""

    MESSAGES: ClassVar[dict[str, str]] = {"enabled": "enabled (true or false) is required"}

    enabled: bool


class MaintenanceAnswer(msgspec.Struct):
    """Both switches as the answering worker applies them, and the push spool: messages
    waiting in this host's spool directory, whether the worker last found the database
    reachable, and the records it refused because the spool could not take them."""

    maintenanceMode: bool  # pushes go to the spool and answer `buffered`
    popMaintenanceMode: bool  # pops answer 204
    bufferedMessages: int
    bufferHealthy: bool
    bufferFailed: int
    message: str | UnsetType = UNSET  # after a change: what it does
