"""MkDocs hooks (mkdocs.yml, `hooks:`).

The pages mark a code block that the docs test must not run with an info string such as
```` ```sh no-run: starts a long-running broker ````, and the output the test checks a
block's run against with ```` ```text output ```` (tests/doc_blocks.py). GitHub and
CommonMark read the first word as the language; Python-Markdown's fences do not accept the
words after it, so they are dropped here before the page is rendered."""

from __future__ import annotations

import re
from typing import Any

_NO_RUN_FENCE = re.compile(r"^(?P<fence>[ \t]*(?:`{3,}|~{3,}))(?P<lang>[\w+-]+)[ \t]+no-run[ \t]*:.*$",
                           re.MULTILINE)
_OUTPUT_FENCE = re.compile(r"^(?P<fence>[ \t]*(?:`{3,}|~{3,}))text[ \t]+output[ \t]*$",
                           re.MULTILINE)


def on_page_markdown(markdown: str, **_: Any) -> str:
    markdown = _NO_RUN_FENCE.sub(r"\g<fence>\g<lang>", markdown)
    return _OUTPUT_FENCE.sub(r"\g<fence>text", markdown)
