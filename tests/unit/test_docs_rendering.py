"""The docs as the site shows them: every page under docs/ and every generated reference page,
rendered with Python-Markdown and the extensions of mkdocs.yml (what `mkdocs build` renders
with), after the site's hook. Markdown fails quietly, so this looks at the HTML: a `\\|` that
a table shows inside code, a name from the code turned into bold or italics, a fence the
site does not take for a code block."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import markdown
import pytest
import yaml

from docsgen import api, configuration, errors, escape, queue_options
from docsgen.hooks import on_page_markdown
from tests.support import ROOT

DOCS = ROOT / "docs"
# mkdocs-click's directive appears only on the generated CLI page, which is not rendered here.
_SKIPPED_EXTENSIONS = {"mkdocs-click"}
_CODE = re.compile(r"<code[^>]*>(.*?)</code>", re.DOTALL)
_PRE = re.compile(r"<pre[^>]*>.*?</pre>", re.DOTALL)


def _extensions() -> tuple[list[str], dict[str, Any]]:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    names: list[str] = []
    options: dict[str, Any] = {}
    for entry in config["markdown_extensions"]:
        name, settings = (entry, None) if isinstance(entry, str) else next(iter(entry.items()))
        if name in _SKIPPED_EXTENSIONS:
            continue
        names.append(name)
        if settings:
            options[name] = dict(settings)
    if "pymdownx.snippets" in options:  # relative to the repository, wherever pytest runs
        options["pymdownx.snippets"]["base_path"] = [str(ROOT)]
    return names, options


def render(page: str) -> str:
    names, options = _extensions()
    return markdown.markdown(on_page_markdown(page), extensions=names,
                             extension_configs=options)


def _written_pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _generated_pages() -> dict[str, str]:
    document = api.document()
    return {api.API_PAGE: api.render_api(document), api.SCHEMAS_PAGE: api.render_schemas(document),
            configuration.PAGE: configuration.render_configuration(),
            errors.PAGE: errors.render_errors(), queue_options.PAGE: queue_options.render_queue_options()}


@pytest.fixture(scope="module")
def rendered() -> dict[str, str]:
    pages = {str(p.relative_to(ROOT)): render(p.read_text()) for p in _written_pages()}
    pages.update({name: render(text) for name, text in _generated_pages().items()})
    return pages


def test_no_code_on_the_site_shows_a_backslash_before_a_pipe(rendered: dict[str, str]) -> None:
    """In a table, GitHub wants `\\|` inside code; Python-Markdown shows it as written."""
    shown = [f"{page}: <code>{code}</code>" for page, html in rendered.items()
             for code in _CODE.findall(html) if "\\|" in code]
    assert not shown, "\n".join(shown)


def test_every_fence_is_a_code_block_on_the_site(rendered: dict[str, str]) -> None:
    """A fence whose info string Python-Markdown does not accept comes out as text with its
    backticks (the hook drops the words the docs test reads: `no-run: ...`, `output`)."""
    broken = [page for page, html in rendered.items() if "```" in _CODE.sub("", _PRE.sub("", html))]
    assert not broken


def test_the_generated_reference_shows_names_from_the_code_as_written(
        rendered: dict[str, str]) -> None:
    """The generator's own bold labels are the only emphasis on its pages: names such as
    `__QUEUE_MODE__` in a description stay names."""
    for page in _generated_pages():
        html = rendered[page]
        assert set(re.findall(r"<strong>(.*?)</strong>", html)) <= {"Access:", "Body"}, page
        assert "<em>" not in html, page
    assert "absent or empty: __QUEUE_MODE__, one shared cursor" in rendered[api.API_PAGE]


@pytest.mark.parametrize(("source", "shown"), [
    ("absent: __QUEUE_MODE__ (a *group*)", "absent: __QUEUE_MODE__ (a *group*)"),
    ("`a|b` or a|b, `x_y` [1] <tag> & 2\\3", "a|b or a|b, x_y [1] <tag> & 2\\3"),
    ("a lone ` backtick", "a lone ` backtick"),
])
def test_escaped_text_renders_as_its_source_in_a_table_cell(source: str, shown: str) -> None:
    html = render(f"| a |\n|---|\n| {escape.text(source)} |\n")
    cell = re.search(r"<td>(.*)</td>", html, re.DOTALL)
    assert cell is not None, html
    text = re.sub(r"<[^>]+>", "", cell.group(1))
    assert text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&") == shown


def test_escaped_text_keeps_code_spans_and_joins_lines() -> None:
    assert escape.text("the `__x__`\n  and  __y__") == "the `__x__` and \\_\\_y\\_\\_"
