"""Free text from the code (descriptions, docstrings, meanings, summaries) placed into the
generated Markdown.

The text is written for people and for the OpenAPI document, not as Markdown: a name such as
`__QUEUE_MODE__` written outside backticks would come out as bold `QUEUE_MODE`, a `<` would
open an HTML tag, a `|` would split a table cell. So everything Markdown would read as markup
is escaped, except inside code spans (backticks), which the texts use on purpose and which
Markdown shows as written. Python-Markdown's tables (mkdocs) do not split a row at a `|`
inside a code span, and show a `\\|` there literally: a pipe is escaped outside code only.
"""

from __future__ import annotations

import re

# A code span: a run of backticks, then anything up to the same run (CommonMark's rule).
_CODE_SPAN = re.compile(r"(`+)(?:.+?)\1")
# Characters that start emphasis, links, code or escapes; Python-Markdown undoes a backslash
# before each of them (before `|` with the tables extension). A backtick left outside the
# spans has no partner.
_BACKSLASHED = re.compile(r"([\\`*_\[\]|])")
_ENTITIES = {"&": "&amp;", "<": "&lt;"}


def text(source: str) -> str:
    """`source` on one line, shown as written: markup characters outside code spans escaped
    (a table cell's pipes too)."""
    line = " ".join(source.split())
    out: list[str] = []
    start = 0
    for span in _CODE_SPAN.finditer(line):
        out.append(_escape(line[start:span.start()]))
        out.append(span.group(0))
        start = span.end()
    out.append(_escape(line[start:]))
    return "".join(out)


def _escape(plain: str) -> str:
    plain = _BACKSLASHED.sub(r"\\\1", plain)
    return "".join(_ENTITIES.get(ch, ch) for ch in plain)
