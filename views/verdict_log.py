"""Every speed verdict this server has shown, per question, dated (pipeline/costs/verdicts.py): a page adds each
measurement it shows, and shows all of them with what they agree on, so a later measurement never silently
stands in for an earlier one."""
from __future__ import annotations

import threading

import streamlit as st

from pipeline.core.timing import Comparison
from pipeline.costs.verdicts import History, add
from ui.escape import markdown_text


@st.cache_resource
def _log() -> tuple[dict, threading.Lock]:
    """(key -> History, its lock): one per server, shared by every session."""
    return {}, threading.Lock()


def kept(key: tuple, comparison: Comparison, at: float) -> History:
    """The history of `key` with this measurement in it (added once, however often it is shown)."""
    log, lock = _log()
    with lock:
        log[key] = add(log.get(key, ()), comparison, at)
        return log[key]


def history_lines(history: History, a: str, b: str) -> str:
    """A markdown list: each measurement, dated, with its medians and verdict."""
    return "\n".join(f"  - {d.when()}: {d.comparison.a_median * 1e3:,.0f} vs {d.comparison.b_median * 1e3:,.0f} ms, "
                     f"{markdown_text(d.comparison.verdict(a, b))}" for d in history)
