"""The architecture, checked on the import graph (fast tier, no model weights).

An AST scan of every import (inside functions and under TYPE_CHECKING too) of pipeline/, ui/ and views/:
- the floors app.py/views -> ui -> pipeline: pipeline/ never imports streamlit, ui or views; ui/ never views;
- inside pipeline/, packages stand on floors (FLOORS, lowest first) and import only from lower floors;
  pipeline/'s top level holds no module but __init__ and __main__;
- no import cycle between modules anywhere; no page (views/pages/) imported by another module, and a page
  package's parts imported only inside it; views/'s top level a few packages, each shared by two or more pages;
- no module of pipeline/, ui/ or views/ over MAX_LINES lines.
And every page's module-level imports load without torch, so a fresh server can draw a stored run before the
network (and torch) has loaded.
"""
import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest
from kit.paths import ROOT, source_tree

ROOT = Path(ROOT)
TREES = ("pipeline", "ui", "views")
MAX_LINES = 400

# (files under, imported module they must not reach, why)
RULES = [
    ("pipeline", "streamlit", "pipeline/ is plain Python"),
    ("pipeline", "ui", "presentation sits above pipeline/"),
    ("pipeline", "views", "the pages sit above pipeline/"),
    ("ui", "views", "the pages use ui/, not the other way"),
]
# pipeline/'s packages, lowest floor first; a package imports only from floors below its own
FLOORS = [
    ["core"],  # errors, checks, maths, files, timing, long jobs' chunks
    ["text"],  # token text: byte-level pieces, graphemes, the streaming detokenizer
    ["model"],  # loading, the handle, dimensions, RoPE, decoders
    ["stages"],  # the request's stages, one module each
    ["attribution", "training", "faster"],  # built on the stages, beside each other
    ["costs"],  # what a pass costs (FLOPs, bytes), this machine's ceilings, measured passes
    ["prompt_cache"],  # K/V blocks reused across requests, priced by costs
    ["run"],  # a whole run: the Trace record, run_trace, comparisons
    ["server", "lessons"],  # the queue, its engines and stores, rooms; lesson files checked
    ["cli", "api"],  # the command line; the HTTP API's bodies (server.py serves them)
]
FLOOR_OF = {package: i for i, floor in enumerate(FLOORS) for package in floor}


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


def source_files() -> list[Path]:
    return sorted(p for tree in TREES for p in (ROOT / tree).rglob("*.py") if "__pycache__" not in p.parts)


@functools.cache  # the source tree does not change during a test run: one scan for every test of this file
def import_graph() -> dict[str, frozenset[str]]:
    """{module: the modules of pipeline/, ui/, views/ it imports}. `from package import submodule` is an edge to
    the submodule alone (as import-linter counts it), not to the package's __init__ as well."""
    modules = {module_of(p): p for p in source_files()}
    return {m: frozenset(i for i in imported_modules(p) if i in modules and i != m and not any(
        other.startswith(i + ".") for other in imported_modules(p) if other in modules)) for m, p in modules.items()}


@functools.cache
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
    (tmp_path / "pipeline" / "__init__.py").write_text("from . import run\n")
    stage.write_text("import numpy as np\ndef f():\n    from ..run import trace\n    from . import batch\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert imported_modules(stage) == {"numpy", "pipeline.run", "pipeline.run.trace", "pipeline.stages",
                                       "pipeline.stages.batch"}
    assert imported_modules(tmp_path / "pipeline" / "__init__.py") == {"pipeline", "pipeline.run"}
    assert reaches("pipeline.run.trace", "pipeline.run") and not reaches("pipeline.runner", "pipeline.run")


@pytest.mark.parametrize("under,target,why", RULES, ids=[f"{u} -/-> {t}" for u, t, _ in RULES])
def test_imports_only_point_down(under, target, why):
    bad = sorted(f for f, t in violations() if t == target and f.startswith(under + "/"))
    assert not bad, f"{', '.join(bad)} import {target} ({why})"


def floor_of(module: str) -> int | None:
    parts = module.split(".")
    return FLOOR_OF.get(parts[1]) if parts[0] == "pipeline" and len(parts) > 2 else None


def floor_violations(graph: dict[str, frozenset[str]]) -> list[str]:
    """'a -> b' for every import inside pipeline/ from a package to one on its own floor (another package) or
    above, and for every package of pipeline/ on no floor."""
    bad = []
    for module, imports in sorted(graph.items()):
        if module.startswith("pipeline.") and module.count(".") >= 1 and module.split(".")[1] not in FLOOR_OF \
                and module not in ("pipeline.__main__",):
            bad.append(f"{module} is in no floor of FLOORS")
        here = floor_of(module)
        for imported in sorted(imports):
            there = floor_of(imported)
            if here is not None and there is not None and module.split(".")[1] != imported.split(".")[1] \
                    and there >= here:
                bad.append(f"{module} -> {imported}")
    return bad


def test_pipeline_packages_import_only_from_lower_floors():
    assert floor_violations(import_graph()) == []


def test_the_floor_rule_finds_an_up_arrow_and_a_same_floor_import():
    graph = {"pipeline.stages.fast_path": frozenset({"pipeline.faster.verify"}),
             "pipeline.faster.verify": frozenset({"pipeline.costs.sweep", "pipeline.stages.request"}),
             "pipeline.loose": frozenset()}
    assert floor_violations(graph) == ["pipeline.faster.verify -> pipeline.costs.sweep",
                                       "pipeline.loose is in no floor of FLOORS",
                                       "pipeline.stages.fast_path -> pipeline.faster.verify"]


def test_pipeline_top_level_holds_packages_only():
    loose = sorted(p.name for p in (ROOT / "pipeline").glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert loose == []
    assert set(FLOOR_OF) == {p.name for p in (ROOT / "pipeline").iterdir() if (p / "__init__.py").exists()}


def cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_import_cycle_anywhere():
    """Lazy imports inside functions count too: a cycle they hide is still two modules that need each other."""
    assert cycles(import_graph()) == []
    assert cycles({"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}) \
        == [["a", "b", "c"]]


def page_of(module: str) -> str | None:
    """The page a module of views/pages/ belongs to: 'views.pages.why_token.qk' -> 'views.pages.why_token',
    'views.pages.tokens' -> itself; None outside views/pages/."""
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["views", "pages"] and len(parts) > 2 else None


def page_import_violations(graph: dict[str, frozenset[str]]) -> list[str]:
    """'a -> b' for every import of a page's script (a page file, or a page package's page.py) and for every import
    of a page package's part from outside that package."""
    return sorted(f"{m} -> {i}" for m, imports in graph.items() for i in imports if page_of(i) is not None
                  and (page_of(i) == i or i.endswith(".page") or page_of(m) != page_of(i)))


def test_no_module_imports_a_page_and_a_page_package_only_its_own_page():
    """Pages (views/pages/) are leaves, and a page package's parts are its page's own: what two pages share lives
    in views/'s shared packages."""
    pages = {m for m in import_graph() if m.startswith("views.pages.")}
    assert len(pages) >= 20
    assert page_import_violations(import_graph()) == []


def test_the_page_rule_finds_a_page_import_and_another_pages_part():
    graph = {"views.pages.why_token.page": frozenset({"views.pages.why_token.qk"}),
             "views.pages.why_token.qk": frozenset({"views.pages.attention.answer"}),
             "views.chrome.frame": frozenset({"views.pages.tokens"}),
             "views.links.controls": frozenset({"views.pages.faster_decode.drafts"}),
             "views.pages.tokens": frozenset({"views.pages.why_token.page"})}
    assert page_import_violations(graph) == ["views.chrome.frame -> views.pages.tokens",
                                             "views.links.controls -> views.pages.faster_decode.drafts",
                                             "views.pages.tokens -> views.pages.why_token.page",
                                             "views.pages.why_token.qk -> views.pages.attention.answer"]


MAX_VIEWS_TOP_LEVEL = 8


def test_views_top_level_holds_a_few_packages_each_shared_by_pages():
    """views/'s top level: the pages and a few named packages, each imported by two or more pages (a helper of one
    page lives in that page's package)."""
    top = sorted(p.name for p in (ROOT / "views").iterdir() if p.name != "__pycache__")
    assert len(top) <= MAX_VIEWS_TOP_LEVEL and all((ROOT / "views" / name).is_dir() for name in top), top
    graph = import_graph()
    for name in top:
        if name == "pages":
            continue
        users = {page_of(m) for m, imports in graph.items() if page_of(m)
                 and any(i.startswith(f"views.{name}.") for i in imports)}
        assert len(users) >= 2, f"views/{name}/ is used by {sorted(users)}: move it into that page's package"


def test_no_module_over_the_line_limit():
    long = {str(p.relative_to(ROOT)): n for p in source_files()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


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

PAGES = sorted(p for p in (ROOT / "views").rglob("*.py") if "__pycache__" not in p.parts)

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
    """The module-level imports of each views/ module (pages and shared ones), in a fresh process: torch is
    imported only inside the functions that run the network, so a stored run draws before torch has loaded."""
    import json

    pages = [str(p.relative_to(ROOT)) for p in PAGES]
    out = subprocess.run([sys.executable, "-c", NO_TORCH, json.dumps(pages)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["failed"] == {}, "\n".join(f"{p}: {why}" for p, why in result["failed"].items())
    assert result["heavy"] == []
    assert len(pages) >= 17  # every page, the shared modules too
