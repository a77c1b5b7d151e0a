"""The code blocks of the README and of every docs page, each with its decision: run it
(shell, Python or JavaScript) against a broker, leave it (output shown as text or JSON), or
skip it for a stated reason.

The convention (docs/contributing/index.md, "Code blocks run"): a fenced block's info string is
- `sh` / `bash` / `python` / `js` / `javascript`: run, in page order, against one broker the
  test starts (JavaScript as an ES module with `node`);
- `text` / `json`: output or a document, never run;
- `text output`: what the run block just before it prints on stdout, checked when that block
  runs (`...` in a line stands for any text in it, such as an id or a time; a line that is
  only `...` for any number of lines; a run of spaces for any run of spaces);
- `<language> no-run: <reason>`: not run, and the reason says why (the set-up commands, long
  benchmarks, services the test cannot start).
Anything else has no decision and fails the test: an indented block, a fence without a
language, another language without `no-run: <reason>`, extra words after a language, or an
output block whose previous block does not run.
"""

from __future__ import annotations

import dataclasses
import itertools
import re

from markdown_it import MarkdownIt

RUN = {"sh": "shell", "bash": "shell", "python": "python", "js": "javascript",
       "javascript": "javascript"}
INERT = frozenset({"text", "json"})
OUTPUT = "text output"
ELLIPSIS = "..."
_NO_RUN = re.compile(r"^(?P<lang>[\w+-]+)\s+no-run\s*:\s*(?P<reason>\S.*)$")


@dataclasses.dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    info: str
    code: str
    decision: str  # "shell", "python", "javascript", "inert", "output" or "skip"
    reason: str = ""

    @property
    def runs(self) -> bool:
        return self.decision in RUN.values()


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
            block = decide(line, token.type, " ".join(token.info.split()), token.content)
        except Undecided as exc:
            problems.append(f"{name} line {line}: {exc}")
            continue
        if block.decision == "output" and not (found and found[-1].runs):
            problems.append(f"{name} line {line}: an output block must follow a sh, bash, "
                            "python or js block (the block whose output it shows)")
            continue
        found.append(block)
    return found, problems


def expected_outputs(found: list[Block]) -> dict[int, Block]:
    """The output block of each run block that has one, by the run block's line."""
    return {before.line: block for before, block in itertools.pairwise(found)
            if block.decision == "output"}


def output_mismatch(expected: str, printed: str) -> str | None:
    """None when `printed` is what `expected` shows, else the first line that differs.
    Trailing spaces and trailing empty lines do not count, a run of spaces matches any run of
    spaces; `...` inside a line matches any text in that line, and a line that is only `...`
    any number of whole lines."""
    want, got = _lines(expected), _lines(printed)
    if re.fullmatch(_pattern(want), "".join(f"{g}\n" for g in got)):
        return None
    for n, (w, g) in enumerate(zip(want, got), 1):
        if w == ELLIPSIS:
            return f"output differs after line {n - 1} (a `...` line)"
        if not re.fullmatch(_line_pattern(w), g):
            return f"line {n}: expected {w!r}, printed {g!r}"
    return f"expected {len(want)} line(s), printed {len(got)}"


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _line_pattern(line: str) -> str:
    """`...` matches any text; a run of spaces any run of spaces (a table pads its columns to
    what they hold, so a column shown with `...` may be wider or narrower than printed)."""
    return "[^\n]*".join(" +".join(re.escape(word) for word in re.split(" +", part))
                          for part in line.split(ELLIPSIS))


def _pattern(lines: list[str]) -> str:
    return "".join("(?:[^\n]*\n)*?" if line == ELLIPSIS else _line_pattern(line) + "\n"
                   for line in lines)


def decide(line: int, kind: str, info: str, code: str) -> Block:
    if kind == "code_block":
        raise Undecided("an indented code block has no decision; fence it with ```sh, "
                        "```python, ```js, ```text or ```<language> no-run: <reason>")
    if info in RUN:
        return Block(line, info, code, RUN[info])
    if info in INERT:
        return Block(line, info, code, "inert")
    if info == OUTPUT:
        return Block(line, info, code, "output")
    match = _NO_RUN.match(info)
    if match:
        return Block(line, info, code, "skip", match["reason"].strip())
    if not info:
        raise Undecided("a fence without a language has no decision; say ```sh, ```python, "
                        "```js, ```text or ```<language> no-run: <reason>")
    raise Undecided(f"```{info} has no decision: sh, bash, python and js blocks run; text and "
                    "json are never run, `text output` is checked against the block before "
                    "it; anything else needs `no-run: <reason>`")
