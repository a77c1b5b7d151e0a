"""Schemathesis hooks (loaded with SCHEMATHESIS_HOOKS=tests.fuzz.hooks).

- A long poll may wait up to an hour (`timeout`, §4.2; fetch `maxWaitMs` up to 30 s). The
  fuzzer would then wait that long for an answer, so generated waits are cut to one second
  before the request is sent; every other value, and every invalid wait, goes out as
  generated.
- The binary push and transaction bodies (`application/x-queen-push`, wire-protocol §7)
  are documented as bytes; they go out as the bytes schemathesis generates, like
  `application/octet-stream` (random bytes: every one must be refused with a 4xx).
- A valid request to turn a maintenance switch on (`POST /api/v1/system/maintenance[/pop]`,
  wire-protocol §11) goes out turning it off instead: left on, push maintenance would make
  every later transaction and DLQ replay of the run answer its documented 503, which the
  fuzzer counts as a server error. The route is still fuzzed with every invalid body.
- With QUEEN_FUZZ_TALLY=<file>, every answer's status, every request's body type and the
  answers of each documented operation (`op:<METHOD> <path template>`) are counted and the
  tally written there when the run ends: the figures the suite reports (requests, 5xx) and
  checks (every operation exercised).
"""

from __future__ import annotations

import atexit
import json
import os
import threading
from collections import Counter
from typing import Any

import schemathesis

MAX_FUZZ_WAIT_MS = 1000
_TRUE = (True, "true", "True", "1", 1)

_tally: Counter[str] = Counter()
_lock = threading.Lock()

schemathesis.serializer.alias("application/x-queen-push", "application/octet-stream")


def _wait_ms(value: Any) -> int | None:
    """A generated wait as a number, whether it was generated as one or as text."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    if (case.method.upper() == "POST" and case.path.startswith("/api/v1/system/maintenance")
            and isinstance(case.body, dict) and case.body.get("enabled") is True):
        case.body["enabled"] = False
    query = case.query
    if isinstance(query, dict):
        timeout = _wait_ms(query.get("timeout"))
        if timeout is not None and timeout > MAX_FUZZ_WAIT_MS:
            query["timeout"] = MAX_FUZZ_WAIT_MS
        elif query.get("timeout") in (None, "") and query.get("wait") in _TRUE:
            query["timeout"] = MAX_FUZZ_WAIT_MS  # absent: the broker's default is 30 s
    body = case.body
    if isinstance(body, dict):
        wait = _wait_ms(body.get("maxWaitMs"))
        if wait is not None and wait > MAX_FUZZ_WAIT_MS and not isinstance(
                body["maxWaitMs"], str):
            body["maxWaitMs"] = MAX_FUZZ_WAIT_MS


@schemathesis.hook
def after_call(context: Any, case: Any, response: Any) -> None:
    with _lock:
        _tally["requests"] += 1
        _tally[f"{response.status_code // 100}xx"] += 1
        _tally[str(response.status_code)] += 1
        _tally[f"{response.request.method} {response.status_code}"] += 1
        _tally[f"body:{case.media_type or 'none'}"] += 1  # which bodies were sent
        _tally[f"op:{response.request.method} {case.path}"] += 1  # the path template


def _write_tally() -> None:
    path = os.environ.get("QUEEN_FUZZ_TALLY")
    if path:
        with open(path, "w") as out:
            json.dump(dict(_tally), out, sort_keys=True)


atexit.register(_write_tally)
