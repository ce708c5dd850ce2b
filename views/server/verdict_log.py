"""Every speed verdict shown, per question, dated (pipeline/costs/verdicts.py): a page adds each measurement it
shows, and shows all of them with what they agree on, so a later measurement never silently stands in for an
earlier one. They are kept in the cache folder (pipeline/server/store/verdict_file.py): a restart keeps them, and
every server sharing the folder shows the same ones."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from pipeline.core.timing import Comparison
from pipeline.costs.verdicts import History
from pipeline.model.weights_cache import cache_root
from pipeline.server.store.verdict_file import VerdictFile
from pipeline.server.wiring import speed_verdicts
from ui.escape import markdown_text


@st.cache_resource
def _store(folder: str) -> VerdictFile:
    """One per cache folder per server, shared by every session."""
    return speed_verdicts(Path(folder))


def kept(key: tuple, comparison: Comparison, at: float) -> History:
    """The history of `key` with this measurement in it (added once, however often it is shown)."""
    return _store(str(cache_root())).add(key, comparison, at)


def history_lines(history: History, a: str, b: str) -> str:
    """A markdown list: each measurement, dated, with its medians and verdict."""
    return "\n".join(f"  - {d.when()}: {d.comparison.a_median * 1e3:,.0f} vs {d.comparison.b_median * 1e3:,.0f} ms, "
                     f"{markdown_text(d.comparison.verdict(a, b))}" for d in history)
