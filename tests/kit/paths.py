"""Where things are: the repository, a page's script, app.py's pages, a parsed source file."""
import os
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository (a str)


def app_page_table() -> list[tuple]:
    """The pages (views/chrome/page_list.py's PAGES): (file, title, icon, url, section) per page, in the app's
    order; file is the script under views/pages/ ('tokens.py', 'why_token/page.py')."""
    from views.chrome.page_list import PAGES

    return [(p.file, p.title, p.icon, p.url, p.section) for p in PAGES]


def app_pages() -> list[str]:
    """The name of every page in PAGES (its module or package under views/pages/: 'tokens', 'why_token'), in the
    app's order."""
    from views.chrome.page_list import PAGES

    return [p.name for p in PAGES]


_source_trees: dict = {}


def source_tree(path):
    """The parsed source (ast.Module) of a file, parsed once per version of it (path, modification time, size) in a
    test run: several tests scan the same ~200 project files, and ast.parse was ~3 % of the fast tier's CPU.
    Shared: callers walk the tree and never change it."""
    import ast

    path = os.path.abspath(path)
    stat = os.stat(path)
    key = (path, stat.st_mtime_ns, stat.st_size)
    if key not in _source_trees:
        with open(path, encoding="utf-8") as f:
            _source_trees[key] = ast.parse(f.read(), filename=path)
    return _source_trees[key]

def page_file(name: str) -> str:
    """The script of the page named `name`: 'tokens' -> views/pages/tokens.py, 'why_token' (a page with parts) ->
    views/pages/why_token/page.py; 'why_token/page' is that script too."""
    pages = Path(ROOT) / "views" / "pages"
    return str(pages / name / "page.py" if (pages / name).is_dir() else pages / f"{name}.py")
