"""The name rule (queue, partition, consumer group, namespace, task), shared by the HTTP
edge (`broker/wire/types.py`, which explains the rule) and the core's own validation of
bodies it decodes itself (timers, core/timers/ops.py)."""

from __future__ import annotations

import re

MAX_NAME_BYTES = 255
CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f]")
_NAME_FORBIDDEN_RE = re.compile(r"[/\\?#%]")


def text_of(value: object) -> str:
    if value is None:
        raise ValueError("is required")
    if not isinstance(value, str):
        raise TypeError("must be a string")
    return value


def utf8_bytes(value: str) -> int:
    # msgspec refuses unpaired surrogates in JSON and Starlette decodes paths with
    # replacement characters, so a str here always encodes; keep the check anyway.
    try:
        return len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("is not valid UTF-8") from None


def check_text(value: object, max_bytes: int, *, empty: bool = False,
               control: re.Pattern[str] = CONTROL_RE,
               control_text: str = "contains control characters") -> str:
    """A string of at most `max_bytes` of UTF-8 without the characters `control` matches,
    empty only when `empty` allows it; raises ValueError/TypeError with the reason."""
    text = text_of(value)
    if text == "" and not empty:
        raise ValueError("must not be empty")
    if utf8_bytes(text) > max_bytes:
        raise ValueError(f"is longer than {max_bytes} bytes")
    if control.search(text):
        raise ValueError(control_text)
    return text


def check_name(value: object) -> str:
    """The name rule; raises ValueError/TypeError with the reason."""
    text = check_text(value, MAX_NAME_BYTES)
    found = _NAME_FORBIDDEN_RE.search(text)
    if found:
        raise ValueError(f"must not contain {found.group()!r}")
    if text in (".", ".."):
        raise ValueError(f"must not be {text!r}")
    return text
