"""docs/architecture.md names every module of views/, ui/ and pipeline/, and the top-level scripts: a module added,
moved or removed without the document fails here (fast tier, no model)."""
from pathlib import Path

import pytest
from kit.paths import ROOT

ROOT = Path(ROOT)
DOC = ROOT / "docs" / "architecture.md"


def modules(tree: str) -> list[Path]:
    return sorted(p.relative_to(ROOT) for p in (ROOT / tree).rglob("*.py")
                  if "__pycache__" not in p.parts and p.name != "__init__.py")


def unnamed(text: str, paths: list[Path]) -> list[str]:
    """The modules the text names neither by their path (`views/chrome/frame.py`) nor by their file name in the
    row of their folder (`| \\`views/chrome/\\` | ... \\`frame.py\\` ...`)."""
    rows = {line.split("|")[1].strip().strip("`"): line for line in text.splitlines() if line.startswith("| `")}
    missing = []
    for path in paths:
        folder = f"{path.parent.as_posix()}/"
        if f"`{path.as_posix()}`" not in text and f"`{path.name}`" not in rows.get(folder, ""):
            missing.append(path.as_posix())
    return missing


@pytest.mark.parametrize("tree", ["views", "ui", "pipeline"])
def test_the_architecture_names_every_module(tree):
    found = modules(tree)
    assert len(found) > 5
    assert unnamed(DOC.read_text(encoding="utf-8"), found) == []


def test_the_architecture_names_the_top_level_scripts():
    scripts = sorted(p.relative_to(ROOT) for p in ROOT.glob("*.py"))
    assert {"app.py", "server.py"} <= {p.as_posix() for p in scripts}
    assert unnamed(DOC.read_text(encoding="utf-8"), scripts) == []


def test_the_check_finds_a_module_the_document_leaves_out():
    text = "| `views/chrome/` | `frame.py` (the frame) |\n\nSee `views/pages/tokens.py`.\n"
    paths = [Path("views/chrome/frame.py"), Path("views/chrome/navigation.py"), Path("views/pages/tokens.py"),
             Path("views/links/frame.py")]
    assert unnamed(text, paths) == ["views/chrome/navigation.py", "views/links/frame.py"]
