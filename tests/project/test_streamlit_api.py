"""No call Streamlit has announced it removes: `use_container_width` (after 2025-12-31: `width="stretch"`) and
`st.components.v1.html` (after 2026-06-01: `st.html`, with `unsafe_allow_javascript` for the app's own fixed
scripts). Both dates have passed, so each such call logged a deprecation warning on every page."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GONE = re.compile(r"use_container_width|components\.v1|components\.html")


def test_no_deprecated_streamlit_call_remains():
    found = [f"{p.relative_to(ROOT)}:{n}" for p in [ROOT / "app.py", *(ROOT / "views").rglob("*.py"),
                                                   *(ROOT / "ui").rglob("*.py")]
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if GONE.search(line)]
    assert not found, found
