"""The Faster decode page's speculative section (views/pages/faster_decode/drafts.py) on the tiny model, and its
chips."""
import re

from kit.apptest import page_app


def test_draft_chips_escape_token_text():
    from ui.chips import draft_rounds

    html = draft_rounds([(3, ("<b>", 1), [("&amp;", 2)], [("<img src=x onerror=alert(1)>", 3)])])
    assert "&lt;img src=x onerror=alert(1)&gt;" in html and "<img" not in html and "<b>" not in html
    assert "&amp;amp;" in html and html.count("#86efac") == 1 and html.count("#fca5a5") == 1  # 1 accepted, 1 rejected


def test_faster_decode_page_shows_both_examples_and_each_pass(tiny_app, monkeypatch):
    import views.pages.faster_decode.drafts as section

    monkeypatch.setattr(section, "EXAMPLE_TOKENS", 12)  # a cheaper page: the same code on shorter answers
    monkeypatch.setattr(section, "REPEATS", 1)
    at = page_app("faster_decode", req_max_new_tokens=12).run()
    assert not at.exception, at.exception
    assert any("Measure now" in i.value for i in at.info) and len(at.dataframe) == 0  # nothing measured on open
    at.button(key="fd_spec_measure").click().run()
    table, timing = at.dataframe[0].value, at.dataframe[1].value  # two tables, each whole in the page's width
    assert list(table["request"]) == ["Repeat a passage (drafting helps)", "A new answer (drafting barely helps)"]
    assert set(timing["same tokens"]) == {"yes"} and (table["passes"] <= table["answer tokens"]).all()
    assert max(len(table.columns), len(timing.columns)) <= 6, (list(table.columns), list(timing.columns))
    markdown = "\n".join(m.value for m in at.markdown)
    assert "median of 1 run each way" in "\n".join(c.value for c in at.caption)
    when = re.compile(r"Measured Repeat a passage \(drafting helps\) at \d\d:\d\d on this machine; A new answer")
    assert any(when.search(c.value) for c in at.caption), [c.value for c in at.caption]  # kept results are dated
    assert "step " in markdown or "Nothing in this request could be looked up" in "\n".join(i.value for i in at.info)
    later = page_app("faster_decode", req_max_new_tokens=12).run()  # another learner: what is measured shows at once
    assert list(later.dataframe[0].value["request"]) == list(table["request"])
    at.radio(key="fd_request").set_value("Your request (the sidebar's)").run()
    assert not at.exception and len(at.dataframe[0].value) == 3
    at.session_state["req_temperature"] = 0.8
    at.run()
    assert any("speculative" in e.value and "greedy" in e.value for e in at.error)  # sampling: a clear refusal
