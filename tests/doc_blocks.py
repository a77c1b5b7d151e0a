"""The code blocks of the README and of every docs page, each with its decision: run it
(shell or Python) against a broker, leave it (output shown as text or JSON), or skip it for a
stated reason.

The convention (docs/contributing/index.md, "Code blocks run"): a fenced block's info string is
- `sh` / `bash` / `python`: run, in page order, against one broker the test starts;
- `text` / `json`: output or a document, never run;
- `<language> no-run: <reason>`: not run, and the reason says why (the set-up commands, long
  benchmarks, services the test cannot start).
Anything else has no decision and fails the test: an indented block, a fence without a
language, another language without `no-run: <reason>`, or extra words after a language.
"""

from __future__ import annotations

import dataclasses
import re

from markdown_it import MarkdownIt

RUN = {"sh": "shell", "bash": "shell", "python": "python"}
INERT = frozenset({"text", "json"})
_NO_RUN = re.compile(r"^(?P<lang>[\w+-]+)\s+no-run\s*:\s*(?P<reason>\S.*)$")


@dataclasses.dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    info: str
    code: str
    decision: str  # "shell", "python", "inert" or "skip"
    reason: str = ""


class Undecided(ValueError):
    """A block the page does not say what to do with."""


def blocks(markdown: str, name: str = "README.md") -> tuple[list[Block], list[str]]:
    """Every code block of the document with its decision, and a problem per block that
    has none (naming the document `name` and the line)."""
    found: list[Block] = []
    problems: list[str] = []
    for token in MarkdownIt("commonmark").parse(markdown):
        if token.type not in ("fence", "code_block"):
            continue
        line = (token.map[0] + 1) if token.map else 0
        try:
            found.append(decide(line, token.type, token.info.strip(), token.content))
        except Undecided as exc:
            problems.append(f"{name} line {line}: {exc}")
    return found, problems


def decide(line: int, kind: str, info: str, code: str) -> Block:
    if kind == "code_block":
        raise Undecided("an indented code block has no decision; fence it with ```sh, "
                        "```python, ```text or ```<language> no-run: <reason>")
    if info in RUN:
        return Block(line, info, code, RUN[info])
    if info in INERT:
        return Block(line, info, code, "inert")
    match = _NO_RUN.match(info)
    if match:
        return Block(line, info, code, "skip", match["reason"].strip())
    if not info:
        raise Undecided("a fence without a language has no decision; say ```sh, ```python, "
                        "```text or ```<language> no-run: <reason>")
    raise Undecided(f"```{info} has no decision: sh, bash and python blocks run; text and "
                    "json are output; anything else needs `no-run: <reason>`")
