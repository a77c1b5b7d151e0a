"""No two classes of the product share a name.

A name that means two things costs whoever reads a traceback, a type error or a search
result: two `Lane`s or three `Record`s make them open each to learn which is meant, and an
import under another name (`as PoppedClaim`) hides the collision instead of ending it. The
wire's Structs count too: the OpenAPI document names its schemas by class, and two Structs
of one name come out under their module paths. Every class defined anywhere in these
packages (nested and private ones included) is counted."""

from __future__ import annotations

import ast
from collections import defaultdict

from tests.support import ROOT

PACKAGES = ("core", "broker", "loadtest", "docsgen")


def _classes() -> dict[str, list[str]]:
    where: dict[str, list[str]] = defaultdict(list)
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    where[node.name].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return where


def test_the_packages_define_classes() -> None:
    # The walk reads the product: a wrong root would find nothing and pass below.
    assert len(_classes()) > 300


def test_no_two_classes_share_a_name() -> None:
    shared = {name: places for name, places in _classes().items() if len(places) > 1}
    assert not shared, "\n".join(f"{name}: {', '.join(places)}"
                                 for name, places in sorted(shared.items()))
