"""The queue options reference: every option `POST /api/v1/configure` accepts, with its
default and meaning, from `core/options.py` (DEFAULTS and MEANINGS)."""

from __future__ import annotations

import json

from core.options import DEFAULTS, MEANINGS
from docsgen import escape

PAGE = "reference/queue-options.md"


def render_queue_options() -> str:
    missing = sorted(set(DEFAULTS) - set(MEANINGS))
    if missing:
        raise KeyError(f"options without a meaning in core/options.py: {missing}")
    out = ["# Queue options", "",
           ("Every option a queue has, as `POST /api/v1/configure` takes it (nested in "
           "`options` or at the top level) and echoes it. Generated from "
           "`core/options.py`, the one place a default is written."), "",
           ("A configure merges by default: options it leaves out keep their values, and one "
           "sent as `null` goes back to its default; `\"mode\": \"replace\"` resets every "
           "option it leaves out. An unknown option is refused with 400 and changes nothing. "
           "How to change them: [Queues and their options](../guide/queues.md)."), "",
           "| option | default | meaning |", "|---|---|---|"]
    for name, default in DEFAULTS.items():
        out.append(f"| `{name}` | `{json.dumps(default)}` | {escape.text(MEANINGS[name])} |")
    return "\n".join(out) + "\n"
