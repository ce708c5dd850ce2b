"""Imports point one way, down the floors app.py/views → ui → pipeline (fast tier, no model weights).

An AST scan of every import (inside functions too): pipeline/ never imports streamlit, ui or views;
ui/ never imports views; a stage never imports pipeline/trace.py (the run is built from the stages,
not the other way). And every page's module-level imports load without torch, so a fresh server can
draw a stored run before the network (and torch) has loaded.
"""
import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, source_tree

ROOT = Path(ROOT)

# (files under, imported module they must not reach, why)
RULES = [
    ("pipeline", "streamlit", "pipeline/ is plain Python"),
    ("pipeline", "ui", "presentation sits above pipeline/"),
    ("pipeline", "views", "the pages sit above pipeline/"),
    ("ui", "views", "the pages use ui/, not the other way"),
    ("pipeline/stages", "pipeline.trace", "the run is made of the stages"),
]
# Known exceptions, each with its reason (test_every_allowed_exception_is_still_needed fails once one is gone).
ALLOWED: set[tuple[str, str]] = set()


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, relative imports resolved: `from ..trace import x` in
    pipeline/stages/fast_path.py -> {'pipeline.trace', 'pipeline.trace.x'}."""
    package = module_of(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out = set()
    for node in ast.walk(source_tree(path)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out.add(module)
            out.update(f"{module}.{alias.name}" for alias in node.names)
    return out


def reaches(imported: str, target: str) -> bool:
    return imported == target or imported.startswith(target + ".")


@functools.cache  # the source tree does not change during a test run: one scan for every test of this file
def violations() -> frozenset[tuple[str, str]]:
    found = set()
    for under, target, _ in RULES:
        for path in sorted((ROOT / under).rglob("*.py")):
            for imported in imported_modules(path):
                if reaches(imported, target):
                    found.add((str(path.relative_to(ROOT)), target))
    return frozenset(found)


def test_the_scan_sees_relative_and_function_level_imports(tmp_path, monkeypatch):
    """The scanner itself, on a small package: relative imports inside functions resolve to absolute names."""
    stage = tmp_path / "pipeline" / "stages" / "late.py"
    stage.parent.mkdir(parents=True)
    (tmp_path / "pipeline" / "__init__.py").write_text("from . import trace\n")
    stage.write_text("import numpy as np\ndef f():\n    from ..trace import run_trace\n    from . import batch\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert imported_modules(stage) == {"numpy", "pipeline.trace", "pipeline.trace.run_trace", "pipeline.stages",
                                       "pipeline.stages.batch"}
    assert imported_modules(tmp_path / "pipeline" / "__init__.py") == {"pipeline", "pipeline.trace"}
    assert reaches("pipeline.trace.run_trace", "pipeline.trace") and not reaches("pipeline.tracer", "pipeline.trace")


@pytest.mark.parametrize("under,target,why", RULES, ids=[f"{u} -/-> {t}" for u, t, _ in RULES])
def test_imports_only_point_down(under, target, why):
    bad = sorted(f for f, t in violations() - ALLOWED if t == target and f.startswith(under + "/"))
    assert not bad, f"{', '.join(bad)} import {target} ({why})"


def test_every_allowed_exception_is_still_needed():
    assert ALLOWED <= violations(), f"remove {sorted(ALLOWED - violations())} from ALLOWED: it no longer imports"


# ---- no HTML below ui/ ---------------------------------------------------------------------------------

HTML_TAG = re.compile(r"</?(div|span|p|h[1-6]|table|thead|tbody|tr|td|th|br|hr|svg|script|style|img|a|b|i|em|strong|"
                      r"code|pre|ul|ol|li|html|body|head|details|summary|section|mark|small|sup|sub)\b[^<>]*>", re.I)


def html_literals(folder: str) -> list[str]:
    """'file:line' of every string literal (f-string parts too; docstrings left out) holding an HTML tag."""
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        tree = source_tree(path)
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        found += [f"{path.relative_to(ROOT)}:{node.lineno}" for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                  and HTML_TAG.search(node.value)]
    return found


def test_pipeline_writes_no_html():
    """README: pipeline/ holds no HTML (the report and every page's markup live in ui/). The scan does find
    ui/'s markup, so an empty answer for pipeline/ is not a blind scan."""
    assert html_literals("pipeline") == []
    assert len(html_literals("ui")) > 20


# ---- every page without torch --------------------------------------------------------------------------

PAGES = sorted(p for p in (ROOT / "views").glob("*.py"))

# Run in one fresh process: torch and transformers are refused by an import hook, so one page that
# imports them cannot hide another (nothing is ever loaded); each page's module-level imports run in turn.
NO_TORCH = r"""
import ast, importlib.abc, json, sys, traceback
HEAVY = ("torch", "transformers")

class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            raise ImportError(f"{name} imported at module level")
        return None

sys.meta_path.insert(0, Refuse())
failed = {}
for page in json.loads(sys.argv[1]):
    tree = ast.parse(open(page, encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            try:
                exec(compile(ast.Module([node], []), page, "exec"), {"__name__": "page"})
            except ImportError as e:
                chain = [f.name + ":" + f.filename.rsplit("/", 1)[-1] for f in traceback.extract_tb(e.__traceback__)
                         if "site-packages" not in f.filename and "<frozen" not in f.filename]
                failed[page] = f"{ast.unparse(node)} -> {e} via {' > '.join(chain[-4:])}"
                break
print(json.dumps({"failed": failed, "heavy": sorted(m for m in HEAVY if m in sys.modules)}))
"""


def test_every_page_imports_without_torch():
    """Each views/*.py page's module-level imports, in a fresh process: torch is imported only inside the
    functions that run the network, so a stored run draws before torch has loaded (~1 s of import)."""
    import json

    pages = [str(p.relative_to(ROOT)) for p in PAGES]
    out = subprocess.run([sys.executable, "-c", NO_TORCH, json.dumps(pages)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["failed"] == {}, "\n".join(f"{p}: {why}" for p, why in result["failed"].items())
    assert result["heavy"] == []
    assert len(pages) >= 17  # every page, the shared modules too
