"""PAGES (views/chrome/page_list.py) is the one list of pages: every page script under views/pages/ is in it, and
every page script the views name (a stage link, a presenter stage) is one of its scripts (fast tier, no model)."""
import ast
import re
from pathlib import Path

from kit.paths import ROOT, source_tree

from views.chrome.page_list import PAGES

ROOT = Path(ROOT)


def named_scripts() -> dict[str, str]:
    """'views/pages/...py' string literals in views/ -> the first file naming each."""
    found = {}
    for path in sorted((ROOT / "views").rglob("*.py")):
        for node in ast.walk(source_tree(path)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and re.fullmatch(r"views/pages/[\w/]+\.py", node.value):
                found.setdefault(node.value, str(path.relative_to(ROOT)))
    return found


def test_every_page_script_named_in_the_views_is_a_page():
    named = named_scripts()
    assert len(named) > 10
    scripts = {p.script for p in PAGES}
    assert {s: f for s, f in named.items() if s not in scripts} == {}


def test_every_page_script_is_in_pages():
    """A page's script: a file of views/pages/, or the page.py of a page package (its other modules are parts)."""
    pages = ROOT / "views" / "pages"
    on_disk = {f"views/pages/{p.name}" for p in pages.glob("*.py")} | \
        {f"views/pages/{p.parent.name}/page.py" for p in pages.glob("*/page.py")}
    assert on_disk == {p.script for p in PAGES}
    assert all((pages / p.name).is_dir() == p.file.endswith("/page.py") for p in PAGES)
