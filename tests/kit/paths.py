"""Where things are: the repository, a page's script, app.py's pages, a parsed source file."""
import os
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository (a str)


def app_page_table() -> list[tuple]:
    """app.py's PAGES as written: (file, title, icon, url, section) per page, in the app's order (read from the
    source: importing app.py would run the app)."""
    import ast

    with open(os.path.join(ROOT, "app.py")) as f:
        tree = ast.parse(f.read())
    table = next(node.value for node in tree.body if isinstance(node, ast.Assign)
                 and any(getattr(t, "id", None) == "PAGES" for t in node.targets))
    return ast.literal_eval(table)


def app_pages() -> list[str]:
    """The views/pages/ file names (without .py) of every page in app.py's PAGES, in the app's order."""
    return [file.removesuffix(".py") for file, *_ in app_page_table()]


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
    """The script of the page named `name` (as app.py's PAGES names its file, without .py)."""
    return str(Path(ROOT) / "views" / "pages" / f"{name}.py")
