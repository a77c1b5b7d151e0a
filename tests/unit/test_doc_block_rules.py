"""The code-block convention of the README and the docs: every block gets a decision, or a
problem naming its page and line."""

from __future__ import annotations

from tests.doc_blocks import blocks

DOC = """# t

```sh
echo run
```

```python
print("run")
```

```text
output
```

```sh no-run: starts a server that never exits
queen-broker serve
```
"""


def test_decided_blocks_are_classified_with_their_lines_and_reasons() -> None:
    found, problems = blocks(DOC)
    assert problems == []
    assert [(b.line, b.decision) for b in found] == [
        (3, "shell"), (7, "python"), (11, "inert"), (15, "skip")]
    assert found[3].reason == "starts a server that never exits"
    assert found[0].code == "echo run\n"


def test_blocks_without_a_decision_are_problems_naming_their_line() -> None:
    doc = ("intro\n\n    indented command\n\n```\nbare\n```\n\n```js\nx()\n```\n\n"
           "```sh no-run:\nno reason\n```\n\n```python title\nx = 1\n```\n")
    found, problems = blocks(doc, "docs/guide/x.md")
    assert found == []
    assert len(problems) == 5
    assert problems[0].startswith("docs/guide/x.md line 3: an indented code block")
    assert problems[1].startswith("docs/guide/x.md line 5: a fence without a language")
    assert problems[2].startswith("docs/guide/x.md line 9: ```js has no decision")
    assert "line 13: ```sh no-run: has no decision" in problems[3]
    assert "line 17: ```python title has no decision" in problems[4]
