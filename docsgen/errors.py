"""The error reference: every error class with its HTTP status, and every refusal code the
code raises.

Statuses come from `broker.errors` (one table from error class to status); texts from the
classes' docstrings (the default message). The coded refusals of the extension routes
(`{"error": code, "reason": reason, "detail": text}`) are found by reading the source of
`core/` and `broker/`: every call that builds a `core.errors.Coded` error with a literal
reason, directly or through a helper that passes its own parameter on as the reason.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
from collections.abc import Iterator
from pathlib import Path

from broker.errors import status_of
from core.errors import Coded, QueenError
from docsgen import escape

PAGE = "reference/errors.md"
ROOT = Path(__file__).resolve().parent.parent
# The positions of a Coded error's arguments: Refused(code, reason, detail).
_CODE, _REASON, _DETAIL = 0, 1, 2


@dataclasses.dataclass(frozen=True)
class Param:
    """An argument that is a parameter of the enclosing function (by position)."""

    index: int


Value = str | Param | None  # a literal (or rendered template), a parameter, or unknown


@dataclasses.dataclass(frozen=True)
class Builder:
    """A callable that builds a Coded error: the class itself, or a helper function."""

    kind: type[Coded]
    args: tuple[Value, Value, Value]  # code, reason, detail as the builder fills them


@dataclasses.dataclass(frozen=True)
class Refusal:
    code: str
    reason: str
    status: int
    detail: str
    where: str  # module path


def render_errors() -> str:
    out = [
        "# Errors",
        "",
        ("Generated from the code: the statuses from `broker/errors.py`, the texts from the "
        "error classes, the refusal codes from the calls in `core/` and `broker/` that raise "
        "them."),
        "",
        ("Every error answer is JSON. Most are `{\"error\": text}` with a text naming the "
        "problem. The KV, lock and timer routes answer `{\"error\": code, \"reason\": "
        "reason, \"detail\": text}`, the ephemeral routes `{\"error\": text, \"code\": "
        "code}`. A 503 carries `Retry-After` (seconds). A client never gets a 500 for what it "
        "sent; a 500 is a bug (or a stored segment that fails authentication under the "
        "encryption key)."),
        "",
        "## Error classes and their status",
        "",
        "| status | error | default text | defined in |",
        "|---|---|---|---|",
    ]
    for kind in sorted(error_classes(), key=lambda k: (status_of(k), k.__name__)):
        out.append(f"| {status_of(kind)} | `{kind.__name__}` | {escape.text(_text(kind))} "
                   f"| `{kind.__module__}` |")
    out += ["", "## Refusal codes of the KV, lock and timer routes", "",
            "| `error` | `reason` | status | example `detail` | raised in |",
            "|---|---|---|---|---|"]
    for r in coded_refusals():
        out.append(f"| `{r.code}` | `{r.reason}` | {r.status} | {escape.text(r.detail)} | "
                   f"`{r.where}` |")
    out += ["", "## Codes of the ephemeral routes", "", "| `code` | status | meaning |",
            "|---|---|---|"]
    for kind in sorted(error_classes(), key=lambda k: str(getattr(k, "code", ""))):
        code = kind.__dict__.get("code")
        if isinstance(code, str):
            out.append(f"| `{code}` | {status_of(kind)} | {escape.text(_text(kind))} |")
    return "\n".join(out) + "\n"


def error_classes() -> list[type[QueenError]]:
    """Every QueenError subclass of the broker that can be answered (importing the app loads
    every module that defines one); a base without a status of its own, such as `Coded`,
    only marks its subclasses and is left out."""
    importlib.import_module("broker.app")
    importlib.import_module("core.reaper")
    seen: list[type[QueenError]] = []

    def walk(kind: type[QueenError]) -> None:
        for sub in kind.__subclasses__():
            if sub not in seen and sub.__module__.split(".")[0] in ("core", "broker"):
                seen.append(sub)
            walk(sub)

    walk(QueenError)
    return [k for k in seen if not (k.__subclasses__() and status_of(k) == 500)]


@functools.cache
def coded_refusals() -> list[Refusal]:
    """Every (code, reason) raised with a literal reason, sorted, with one example detail."""
    kinds = {k.__name__: k for k in error_classes() if issubclass(k, Coded)}
    sources = [(p, ast.parse(p.read_text(), str(p))) for p in _sources()]
    constants: dict[str, str] = {}
    for _, tree in sources:
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
                constants[node.targets[0].id] = node.value.value
    base = {name: Builder(kind, (Param(_CODE), Param(_REASON), Param(_DETAIL)))
            for name, kind in kinds.items()}
    # Every named call, by module and by enclosing function, found in one pass.
    scans = {path: _Scan(tree) for path, tree in sources}
    functions = [(path, name, params, calls) for path, scan in scans.items()
                 for name, params, calls in scan.functions]
    helpers: dict[Path, dict[str, Builder]] = {path: {} for path, _ in sources}
    changed = True
    while changed:  # a helper may call another helper: resolve until nothing new appears
        changed = False
        for path, name, params, calls in functions:
            if name in helpers[path]:
                continue
            known = {**base, **helpers[path]}
            for callee, call in calls:
                if callee not in known:
                    continue
                args = _bound(call, known[callee], params, constants)
                if isinstance(args[_REASON], Param):
                    helpers[path][name] = Builder(known[callee].kind, args)
                    changed = True
                    break
    found: dict[tuple[str, str], Refusal] = {}
    for path, _ in sources:
        known = {**base, **helpers[path]}
        for callee, call in scans[path].calls:
            if callee not in known:
                continue
            builder = known[callee]
            code, reason, detail = _bound(call, builder, [], constants)
            if isinstance(code, str) and isinstance(reason, str):
                where = str(path.relative_to(ROOT))
                found.setdefault((code, reason), Refusal(
                    code, reason, status_of(builder.kind),
                    detail if isinstance(detail, str) else "", where))
    return sorted(found.values(), key=lambda r: (r.code, r.reason))


def _sources() -> Iterator[Path]:
    for package in ("core", "broker"):
        yield from sorted((ROOT / package).rglob("*.py"))


class _Scan:
    """The named calls of a module (`f(...)`, `x.f(...)`): all of them, and per function
    (the innermost one enclosing each call), with the function's parameter names."""

    def __init__(self, tree: ast.AST) -> None:
        self.calls: list[tuple[str, ast.Call]] = []
        self.functions: list[tuple[str, list[str], list[tuple[str, ast.Call]]]] = []
        self._visit(tree, None)

    def _visit(self, node: ast.AST, calls: list[tuple[str, ast.Call]] | None) -> None:
        for child in ast.iter_child_nodes(node):
            inner = calls
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = []
                self.functions.append((child.name, [a.arg for a in child.args.args], inner))
            elif isinstance(child, ast.Call):
                name = (child.func.id if isinstance(child.func, ast.Name) else
                        child.func.attr if isinstance(child.func, ast.Attribute) else None)
                if name is not None:
                    self.calls.append((name, child))
                    if calls is not None:
                        calls.append((name, child))
            self._visit(child, inner)


def _bound(call: ast.Call, builder: Builder, params: list[str],
           constants: dict[str, str]) -> tuple[Value, Value, Value]:
    """The builder's code, reason and detail with the call's arguments put in."""
    given = [_value(a, params, constants) for a in call.args]

    def fill(slot: Value) -> Value:
        if isinstance(slot, Param):
            return given[slot.index] if slot.index < len(given) else None
        return slot

    code, reason, detail = (fill(s) for s in builder.args)
    return code, reason, detail


def _value(node: ast.expr, params: list[str], constants: dict[str, str]) -> Value:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in params:
            return Param(params.index(node.id))
        return constants.get(node.id)
    if isinstance(node, ast.JoinedStr):
        return "".join(str(part.value) if isinstance(part, ast.Constant) else "…"
                       for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _value(node.left, params, constants), _value(node.right, params, constants)
        return (left if isinstance(left, str) else "…") + (right if isinstance(right, str) else "…")
    return None


def _text(kind: type) -> str:
    """The default message: the docstring's first paragraph."""
    return (kind.__doc__ or "").strip().split("\n\n")[0]

