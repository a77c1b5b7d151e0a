"""`GET /`: the dashboard, one self-contained HTML page over the JSON API.

The page is plain HTML, CSS and JavaScript kept as files in `static/` (package data, so an
installed wheel has them; nothing is built and nothing is fetched from anywhere at run time).
It is assembled once per process: the stylesheet and the scripts are inlined into
`index.html`, so the browser makes a single request for the whole dashboard. That matters
with auth on: a browser cannot attach a bearer token to `<script src>`, and only `/` is in
the default JWT_SKIP_PATHS. The page then asks for a token and calls `/api/v1/...` with it.

A Content-Security-Policy allows exactly the inlined style and script (by hash), requests to
this origin only, and nothing else: no external script, frame or form target.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from importlib.resources import files

from starlette.requests import Request
from starlette.responses import Response

# The scripts, in load order: each may use what the ones before it define.
SCRIPTS = ("api.js", "dom.js", "charts.js", "actions.js", "overview.js", "queues.js",
           "messages.js", "groups.js", "dlq.js", "traces.js", "analytics.js", "kv.js", "timers.js",
           "streams.js", "app.js")
STYLE = "style.css"
_STYLE_MARK = "<!-- style -->"
_SCRIPT_MARK = "<!-- script -->"


def _static(name: str) -> str:
    return (files(__package__) / "static" / name).read_text(encoding="utf-8")


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


@functools.cache
def assembled() -> tuple[bytes, str]:
    """The page and its Content-Security-Policy."""
    style = "\n" + _static(STYLE)
    script = "\n".join(f"// --- {name}\n{_static(name)}" for name in SCRIPTS)
    script = '\n"use strict";\n' + script
    for text, closing in ((style, "</style"), (script, "</script")):
        if closing in text.lower():  # it would end the inline element early
            raise ValueError(f"a dashboard file contains {closing!r}")
    page = _static("index.html")
    if page.count(_STYLE_MARK) != 1 or page.count(_SCRIPT_MARK) != 1:
        raise ValueError("index.html needs exactly one style and one script mark")
    page = page.replace(_STYLE_MARK, f"<style>{style}</style>")
    page = page.replace(_SCRIPT_MARK, f"<script>{script}</script>")
    policy = "; ".join((
        "default-src 'none'", f"script-src {_digest(script)}", f"style-src {_digest(style)}",
        "connect-src 'self'", "img-src 'self' data:", "base-uri 'none'", "form-action 'none'",
        "frame-ancestors 'none'"))
    return page.encode(), policy


async def serve(request: Request) -> Response:
    page, policy = assembled()
    return Response(page, media_type="text/html; charset=utf-8", headers={
        "Content-Security-Policy": policy, "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"})
