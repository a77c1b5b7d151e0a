"""The code-block convention of the README and the docs: every block gets a decision, or a
problem naming its page and line."""

from __future__ import annotations

from tests.doc_blocks import blocks, expected_outputs, output_mismatch

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
    doc = ("intro\n\n    indented command\n\n```\nbare\n```\n\n```ruby\nx()\n```\n\n"
           "```sh no-run:\nno reason\n```\n\n```python title\nx = 1\n```\n")
    found, problems = blocks(doc, "docs/guide/x.md")
    assert found == []
    assert len(problems) == 5
    assert problems[0].startswith("docs/guide/x.md line 3: an indented code block")
    assert problems[1].startswith("docs/guide/x.md line 5: a fence without a language")
    assert problems[2].startswith("docs/guide/x.md line 9: ```ruby has no decision")
    assert "line 13: ```sh no-run: has no decision" in problems[3]
    assert "line 17: ```python title has no decision" in problems[4]


def test_js_and_javascript_blocks_run_and_may_have_an_output_block() -> None:
    doc = ("```js\nconsole.log(1)\n```\n\n```text output\n1\n```\n\n"
           "```javascript\nconsole.log(2)\n```\n\n"
           "```javascript no-run: needs a package\nimport x from 'x'\n```\n")
    found, problems = blocks(doc, "docs/x.md")
    assert problems == []
    assert [(b.line, b.decision, b.runs) for b in found] == [
        (1, "javascript", True), (5, "output", False), (9, "javascript", True),
        (13, "skip", False)]
    assert expected_outputs(found) == {1: found[1]}


def test_an_output_block_belongs_to_the_run_block_before_it() -> None:
    doc = ("```sh\necho 1\n```\n\nIt prints:\n\n```text output\n1\n```\n\n"
           "```text\nnot output\n```\n\n```text output\n2\n```\n\n"
           "```sh no-run: a server\nserve\n```\n\n```text output\n3\n```\n")
    found, problems = blocks(doc, "docs/x.md")
    assert [b.decision for b in found] == ["shell", "output", "inert", "skip"]
    assert expected_outputs(found) == {1: found[1]}
    assert len(problems) == 2
    assert problems[0].startswith("docs/x.md line 15: an output block must follow")
    assert problems[1].startswith("docs/x.md line 23: an output block must follow")


def test_an_output_matches_line_by_line_with_ellipses_for_what_varies() -> None:
    shown = ("partition ┃ transactionId ┃ payload\n"
             "Default   │ ...           │ {\"refund\": 2}\n"
             "acknowledged 1 of 1 as completed\n")
    printed = ("partition ┃ transactionId ┃ payload   \n"
               "Default   │ 01a2-c442     │ {\"refund\": 2}\n"
               "acknowledged 1 of 1 as completed\n\n")
    assert output_mismatch(shown, printed) is None
    assert output_mismatch(shown, printed.replace("2}", "1}")) == (
        "line 2: expected 'Default   │ ...           │ {\"refund\": 2}', printed "
        "'Default   │ 01a2-c442     │ {\"refund\": 1}'")
    assert output_mismatch(shown, printed.rstrip() + "\none more\n") == (
        "expected 3 line(s), printed 4")
    assert output_mismatch("[1, 2]\n", "[1, 2, 3]\n") is not None  # no ... no wildcard


def test_a_line_of_its_own_ellipsis_stands_for_any_number_of_lines() -> None:
    shown = "queue q configured (id ...)\n...\nretryLimit │ 0\n...\n"
    printed = "queue q configured (id 7)\nleaseTime │ 300\nretryLimit │ 0\nttl │ 3600\n"
    assert output_mismatch(shown, printed) is None
    assert output_mismatch(shown, "queue q configured (id 7)\nretryLimit │ 0\n") is None
    assert output_mismatch(shown, printed.replace("│ 0", "│ 3")) is not None
