"""The project is an installed package (pyproject.toml; ./run.sh installs it editable), fast tier.

- No file of the repository edits the import path (inserting into sys.path and the like): tests, bench/ scripts and
  `python -m pipeline` import pipeline/, ui/ and views/ as the installed package, and the tests' helpers as the
  package tests/kit/ (pytest puts tests/, which has no __init__.py, on the path). No test file imports another.
- pyproject.toml names every package: each folder with an __init__.py, and each top-level folder app.py imports
  from (views/ has no __init__.py); and names none that is gone.
- pyproject.toml is the one place of pytest's and ruff's settings: a pytest.ini or ruff.toml beside it would
  silently win over it.
"""
import ast
import os
import re
import tomllib
from fnmatch import fnmatchcase
from pathlib import Path

from kit.paths import ROOT, source_tree

ROOT = Path(ROOT)
# what runs and tools make, git-ignored (.gitignore), and the virtual environment
SKIPPED_DIRS = {".git", ".venv", "__pycache__", ".cache", "artifacts", ".hypothesis", ".pytest_cache", ".ruff_cache",
                "build"}
# an insert, append or extend on sys.path, or an assignment to it, to a slice of it or with +=
PATH_EDIT = re.compile(rb"\bsys\.path\s*(\.\s*(insert|append|extend)\b|\[[^\]]*\]\s*=(?!=)|\+=|=(?!=))")


def repository_files() -> list[Path]:
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        found += [Path(folder, name) for name in files]
    return found


def package_finder() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]


def packages_in_tree() -> set[str]:
    """Every folder with an __init__.py, as a dotted name: {'pipeline', 'pipeline.model', 'ui', ...}; the tests'
    own kit (tests/kit/, imported as `kit` from tests/) is not the project's."""
    return {".".join(p.parent.relative_to(ROOT).parts) for p in repository_files()
            if p.name == "__init__.py" and p.parent.relative_to(ROOT).parts[0] != "tests"}


def folders_app_imports() -> set[str]:
    """The top-level folders of the repository that app.py imports from: {'pipeline', 'ui', 'views'}."""
    names = set()
    for node in ast.walk(source_tree(ROOT / "app.py")):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return {name for name in names if (ROOT / name).is_dir()}


def test_the_path_patterns_find_every_kind_of_edit():
    # written in two parts, so that this file itself holds no edit for test_no_file_edits_the_import_path
    edits = [b"sys.path" + tail for tail in (b".insert(0, ROOT)", b".append(x)", b".extend([a])", b"[:0] = [a, b]",
                                             b" += [a]", b" = [a]", b" .insert(0, a)")]
    reads = [b"if ROOT not in sys.path:", b"print(sys.path)", b"sys.path[0] == ROOT", b"x = sys.path[:]"]
    assert all(PATH_EDIT.search(text) for text in edits)
    assert not any(PATH_EDIT.search(text) for text in reads)


def test_no_file_edits_the_import_path():
    files = repository_files()
    assert any(p == ROOT / "bench" / "pipeline_bench.py" for p in files)  # the walk does reach the scripts
    editing = sorted(str(p.relative_to(ROOT)) for p in files if PATH_EDIT.search(p.read_bytes()))
    assert not editing, f"these edit sys.path; import the installed package instead: {editing}"


def test_pyproject_names_every_package():
    include = package_finder()["include"]
    packages = packages_in_tree() | folders_app_imports()
    assert {"pipeline", "pipeline.model", "ui", "views"} <= packages  # what the scan finds, checked on known ones
    missing = sorted(p for p in packages if not any(fnmatchcase(p, pattern) for pattern in include))
    assert not missing, f"pyproject.toml's [tool.setuptools.packages.find] include leaves out {missing}"
    stale = sorted(pattern for pattern in include if not any(fnmatchcase(p, pattern) for p in packages))
    assert not stale, f"pyproject.toml names packages that do not exist: {stale}"


def test_pyproject_holds_the_tools_settings_alone():
    beside = [name for name in ("pytest.ini", "ruff.toml", ".ruff.toml", "setup.cfg", "tox.ini", "setup.py")
              if (ROOT / name).exists()]
    assert not beside, f"settings outside pyproject.toml: {beside}"
    with open(ROOT / "pyproject.toml", "rb") as f:
        tool = tomllib.load(f)["tool"]
    assert "--strict-markers" in tool["pytest"]["ini_options"]["addopts"]
    assert tool["ruff"]["lint"]["select"] == ["E", "F", "W"]


def imported_test_files(path: Path) -> list[str]:
    """The test files (tests/**/test_*.py, tests/conftest.py) a file imports from."""
    local = {p.stem for p in (ROOT / "tests").rglob("test_*.py")} | {"conftest"}
    found = []
    for node in ast.walk(source_tree(path)):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
        found += [n for n in names if n.split(".")[0] in local]
    return found


def test_no_test_file_imports_another(tmp_path):
    """What tests share lives in tests/kit/ (helpers, and fixtures as plugins), never in a test file another one
    imports: that made a test's helpers depend on which file happened to hold them."""
    files = sorted((ROOT / "tests").rglob("*.py"))
    importing = {str(p.relative_to(ROOT)): imported for p in files if (imported := imported_test_files(p))}
    assert importing == {}
    probe = tmp_path / "probe.py"
    probe.write_text("from test_architectures import tiny_gemma3\nimport conftest\nfrom kit.texts import KOREAN\n")
    assert imported_test_files(probe) == ["test_architectures", "conftest"]
