"""How wide a table the page asks for will be drawn, estimated from its text (the drawn grid is a canvas, which
AppTest does not lay out): every st.dataframe call recorded, each column as wide as its longest text at about
7 px a character (the grid's 14 px font) plus its padding. A table wider than the page's main column is cut at the
right edge, its last columns out of sight behind a scroll bar most people never see."""
from __future__ import annotations

CHAR_PX = 7  # about, at the grid's font (tests/pages/test_readable_tables.py sizes columns the same way)
CELL_PAD_PX = 16  # the grid's padding either side of a cell's text
MAIN_PX = 780  # the main column of the app's wide layout in a 1280-px window, the sidebar open


def record_tables(monkeypatch) -> list:
    """[(data, keyword arguments)] of every st.dataframe call from now on, in the page or in a column."""
    import streamlit as st
    from streamlit.delta_generator import DeltaGenerator

    asked, draw, draw_in = [], st.dataframe, DeltaGenerator.dataframe
    monkeypatch.setattr(st, "dataframe", lambda data, **kw: asked.append((data, kw)) or draw(data, **kw))
    monkeypatch.setattr(DeltaGenerator, "dataframe",
                        lambda self, data, **kw: asked.append((data, kw)) or draw_in(self, data, **kw))
    return asked


def estimated_px(table, hide_index: bool = True) -> int:
    """The drawn width of a pandas DataFrame: each column (the index too, unless hidden) as wide as its header or its
    longest cell."""
    columns = [[str(c), *map(str, table[c])] for c in table.columns]
    if not hide_index:
        columns.append([str(i) for i in table.index])
    return sum(max(map(len, texts)) * CHAR_PX + 2 * CELL_PAD_PX for texts in columns)


def too_wide(asked: list, share: float = 1.0) -> list[tuple[list, int]]:
    """[(columns, estimated px)] of the recorded tables wider than `share` of the main column (0.5: a table in one
    of two columns)."""
    return [(list(d.columns), px) for d, kw in asked
            if (px := estimated_px(d, kw.get("hide_index", False))) > share * MAIN_PX]
