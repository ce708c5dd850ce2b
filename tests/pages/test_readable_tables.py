"""Tables that show every row and their first column whole (found in the walk of every page in Chromium): How it
learned's table of model sizes scrolled its last row out of sight in a box of default height and cut the loaded
model's name ("SmolLM2-135M-Instruct (loa"). What the page asks st.dataframe for is recorded (the drawn grid is a
canvas)."""
from kit.apptest import page_app
from kit.table_width import record_tables

ROW_PX = 35  # Streamlit's dataframe row (and header) height


def test_how_it_learned_memory_table_shows_every_model_whole(tiny_app, monkeypatch):
    asked = record_tables(monkeypatch)
    at = page_app("how_it_learned").run()
    assert not at.exception, at.exception
    table, kw = next((d, kw) for d, kw in asked if "training ÷ inference" in d.columns)
    assert len(table) >= 10 and isinstance(kw.get("height"), int) and kw["height"] >= ROW_PX * (len(table) + 1), kw
    width = kw["column_config"]["model"]["width"]
    longest = max(len(name) for name in table["model"])
    assert width >= 7 * longest, (width, longest)  # about 7 px a character at the table's font


def test_generation_event_table_shows_a_korean_token_and_its_bytes_whole(tiny_app, monkeypatch):
    """Its token column read '토 (3/3) · bytes <0x' in a column sized to the header."""
    asked = record_tables(monkeypatch)
    at = page_app("generation", req_question="토마토는 과일이야?").run()
    assert not at.exception, at.exception
    table, kw = next((d, kw) for d, kw in asked if "ms after the last" in d.columns)
    longest = max(len(t) for t in table["token"])
    assert kw["column_config"]["token"]["width"] >= 7 * longest, (kw, longest)


def test_cache_audit_side_by_side_tables_fit_the_page(tiny_app, monkeypatch):
    """Its one table of 15 columns showed the first 7 in the page's width: 'vLLM cached' was cut, the divergence,
    cause, trap and the three bills out of sight."""
    asked = record_tables(monkeypatch)
    at = page_app("cache_audit").run()
    assert not at.exception, at.exception
    side = [(d, kw) for d, kw in asked if "#" in d.columns]
    columns = [c for d, _ in side for c in d.columns]
    assert {"vLLM cached", "diverges at", "cause", "trap", "request"} <= set(columns)
    assert all(len(d.columns) <= 8 for d, _ in side), [list(d.columns) for d, _ in side]
    assert all(kw["column_config"]["request"]["width"] <= 300 for d, kw in side if "request" in d.columns)
