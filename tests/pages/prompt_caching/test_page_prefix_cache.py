"""AppTest for the Prompt caching page: it runs, shows the blocks, and a scenario button plays that scenario.
On the tiny random-weight model (fixture `tiny_app`, fast tier): which blocks hit depends on token ids only.
The first test also runs on the real model (marker `app`)."""
from pathlib import Path

from kit.paths import page_file
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[3]


def run_page() -> AppTest:
    at = AppTest.from_file(page_file("prompt_caching"),
                           default_timeout=600)  # a busy shared machine
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def page_text(at: AppTest) -> str:
    return "\n".join([m.value for m in at.markdown] + [c.value for c in at.caption] + [s.value for s in at.subheader])


def test_page_shows_the_conversation_blocks_and_timings(page_lm):
    at = run_page()
    assert at.title[0].value == "Prompt caching"
    text = page_text(at)
    assert "Partial blocks are not cached" in text
    assert "A conversation, turn by turn" in text
    for turn in range(1, 5):
        assert f"**Turn {turn}**" in text
    assert text.count("#0 hit") >= 3  # turns 2-4 start with a cached block
    assert "computed, " in text and " reused**" in text and "GFLOP" in text  # the work first, load-free
    # every request that reuses something timed again through the cache and cold, interleaved: a verdict
    verdicts = [c.value for c in at.caption if c.value.startswith("Time to first token, with the cache")]
    assert len(verdicts) == 3 + 1  # turns 2-4, then request B of the free comparison
    assert all(("faster" in v and "ranges do not overlap" in v) or "no clear difference" in v or "noise" in v
               for v in verdicts)
    assert all("measured at" in v for v in verdicts)
    same_work = [c.value for c in at.caption if "there is no speed difference to measure" in c.value]
    assert len(same_work) == 1 + 1 and not any("faster" in c for c in same_work)  # turn 1 and request A
    assert len(at.get("plotly_chart")) == 1
    assert len(at.text_area) == 2  # the two free-edit requests
    assert any("Request B" in m.value for m in at.markdown)


def test_clicking_a_trap_then_its_fix(tiny_app):
    at = run_page()
    at.button(key="pc_btn_date_trap").click().run()
    assert not at.exception, [e.message for e in at.exception]
    text = page_text(at)
    assert "Date and user name on the first line" in text
    assert "differs" in text
    trap_rows = [m.value for m in at.markdown if "blocks hit" in m.value]
    assert " 0 blocks hit" in trap_rows[1]  # request 2 of the trap reuses nothing
    captions = [c.value for c in at.caption]
    scenario = captions[:next(i for i, c in enumerate(captions) if "do not depend on how busy" in c)]
    assert not any(c.startswith("Time to first token, with the cache") for c in scenario), \
        "a trap reuses nothing: both runs do the same work, so no speed verdict"
    assert sum("there is no speed difference to measure" in c for c in scenario) == 2
    at.button(key="pc_btn_date_fixed").click().run()
    assert not at.exception
    text = page_text(at)
    assert "Date and user name moved to the end" in text
    assert "#0 hit" in text  # the second request now starts with cached blocks


def test_compare_two_edited_requests(tiny_app):
    at = run_page()
    text_a = at.text_area(key="pc_text_a").value
    changed = text_a.replace("You are Tilly", "You are Tomas", 1)
    assert changed != text_a
    at.text_area(key="pc_text_b").set_value(changed)
    at.button(key="pc_compare_go").click().run()
    assert not at.exception, [e.message for e in at.exception]
    rows = [m.value for m in at.markdown if m.value.startswith("**Request B**")]
    assert rows and " 0 blocks hit" in rows[-1]  # a name in the first line: nothing reused
    assert any("Token" in c.value and "differs" in c.value for c in at.caption)
    from views.server.state import result_store
    from views.server.waiting import model_result_key

    block_size = at.select_slider(key="pc_block_size").value  # the comparison ran through the queue, kept for all
    assert result_store().peek(model_result_key(("compare", text_a, changed, block_size))) is not None


def test_timing_a_scenario_again_replaces_the_shared_measurement(tiny_app):
    """One stored measurement was shown to every session; a visitor can time it again, for everyone."""
    at = run_page()
    before = [c.value for c in at.caption if "measured at" in c.value]
    from views.server.scenarios import scenario_key
    from views.server.state import result_store
    from views.server.waiting import model_result_key

    stored = result_store().peek(model_result_key(scenario_key("conversation")))  # the default model's
    at.button(key="pc_time_again").click().run()
    assert not at.exception, [e.message for e in at.exception]
    again = result_store().peek(model_result_key(scenario_key("conversation")))
    assert again is not stored and again[1]["measured_at"] > stored[1]["measured_at"]
    assert len([c.value for c in at.caption if "measured at" in c.value]) == len(before) == 3 + 1


def test_timing_a_scenario_again_keeps_the_earlier_measurement_beside_it(tiny_app, monkeypatch):
    """The new times lead, and each timed request lists both measurements with what they agree on."""
    import time
    from types import SimpleNamespace

    from pipeline.model.weights_cache import cache_root

    # The verdicts are kept in the cache folder (a restart keeps them): start from none, whatever the tests before
    # this one measured there. And a replay is shared by every click in the same minute: this click gets a minute
    # of its own, so it times again even right after another test's click (it passed before only by reading the
    # history that click had left).
    (cache_root() / "verdicts.json").unlink(missing_ok=True)
    own_minute = time.time() + 60 * 10**6
    monkeypatch.setattr("views.server.scenarios.time", SimpleNamespace(time=lambda: own_minute))
    at = run_page()
    at.button(key="pc_time_again").click().run()
    assert not at.exception, [e.message for e in at.exception]
    kept = [c.value for c in at.caption if c.value.startswith("All ")]
    timed = [c.value for c in at.caption if c.value.startswith("Time to first token, with the cache")]
    # the scenario's 3 requests timed against cold were timed again; section 3's own request B was not
    assert (len(kept), len(timed)) == (3, 3 + 1), (kept, timed)
    for said in kept:  # at least this page's first and second measurement, each listed with its time
        n = int(said.split()[1])
        assert n >= 2 and said.count("\n  - ") == n, said


def test_a_restarted_server_shows_the_stored_scenario_and_where_it_was_timed(tiny_app, monkeypatch):
    """The scenario's rows are kept on disk beside the runs: a restarted server (or a second replica on the same
    folder) shows them without playing the scenario again, and says when and on which machine they were timed."""
    import time

    from kit.apptest import clear_streamlit_caches

    import views.server.scenarios
    from views.server.scenarios import scenario_key
    from views.server.state import result_store
    from views.server.waiting import model_result_key

    run_page()
    key = model_result_key(scenario_key("conversation"))
    rows = result_store().disk.get(key)
    assert rows is not None and len(rows) == 4  # written through to the folder
    yesterday = time.time() - 86_400
    for row in rows:
        if row["measured_at"]:
            row.update(measured_at=yesterday, measured_on="room-b")
    result_store().disk.put(key, rows)
    clear_streamlit_caches()  # the server restarts: its memory is gone, the folder is not

    def replay(*_args):
        raise AssertionError("the stored scenario was played again")

    monkeypatch.setattr(views.server.scenarios, "play_scenario_now", replay)
    at = run_page()
    timed = [c.value for c in at.caption if c.value.startswith("Time to first token, with the cache")]
    day = time.strftime("%Y-%m-%d", time.localtime(yesterday))
    assert sum(f"measured at {day} " in v and "on host room-b" in v for v in timed) == 3  # turns 2-4
    assert "on this machine" in timed[-1]  # request B of the free comparison, measured now


def test_a_scenarios_stored_rows_are_keyed_by_its_text(monkeypatch):
    """Rows kept on disk or in Redis outlive the code that made them: a scenario whose requests change gets a new
    key, so a page never shows the rows of the old text."""
    from dataclasses import replace

    import pipeline.prompt_cache.scenarios as defined
    from views.server.scenarios import scenario_key

    before = scenario_key("conversation")
    original = defined.scenarios

    def edited():
        out = original()
        first = out["conversation"].prompts[0]
        out["conversation"] = replace(out["conversation"], prompts=(replace(first, note="edited"),
                                                                    *out["conversation"].prompts[1:]))
        return out

    monkeypatch.setattr(defined, "scenarios", edited)
    assert scenario_key("conversation") != before and scenario_key("conversation")[:3] == before[:3]
    assert scenario_key("conversation", 32) != scenario_key("conversation")


def compare_rows(at: AppTest) -> dict[str, str]:
    """Section 3's rows by request ('Request A', 'Request B'): the row's line of counts."""
    return {label: m.value for m in at.markdown for label in ("Request A", "Request B")
            if m.value.startswith(f"**{label}**")}


def test_compare_runs_the_picked_model(tiny_app, tiny_app_gemma):
    """With Gemma picked, section 3 ran the server's default model: its queue work called get_model() in the
    queue's thread, where no session says which model is picked."""
    import pytest

    if tiny_app_gemma is None:
        pytest.skip("Gemma's tokenizer is not converted yet: ./run.sh converts it")
    from pipeline.prompt_cache.playback import prompt_tokens
    from pipeline.prompt_cache.scenarios import Prompt
    from pipeline.stages.request import parse_turns

    at = AppTest.from_file(page_file("prompt_caching"), default_timeout=600)
    at.session_state["req_model"] = "gemma-3-270m"
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    text_a = at.text_area(key="pc_text_a").value
    prompt = Prompt("Request A", parse_turns(text_a, "request A", first_role="user"))
    gemma_n, smol_n = len(prompt_tokens(tiny_app_gemma, prompt)[0]), len(prompt_tokens(tiny_app, prompt)[0])
    assert gemma_n != smol_n  # the two tokenizers tell the models apart
    assert compare_rows(at)["Request A"].split("\n")[-1].startswith(f"{gemma_n} tokens:"), compare_rows(at)


def test_your_own_requests_are_not_pooled_with_other_sessions_measurements(tiny_app):
    """Section 3 is one visitor's own comparison: another session that compares the same text later (after the
    page's cache of comparisons has moved on) measures it anew, and sees its own measurement, not 'All 2
    measurements of this request here'."""
    from kit.apptest import clear_streamlit_caches

    first = run_page()
    assert "Request B" in compare_rows(first)
    clear_streamlit_caches()  # the comparisons' cache forgot it (16 entries), as a busy room's does
    second = run_page()
    captions = [c.value for c in second.caption]
    timed = [i for i, c in enumerate(captions) if c.startswith("Time to first token, with the cache")]
    assert len(timed) == 3 + 1  # turns 2-4 of the scenario, then request B
    after_b = captions[timed[-1] + 1:timed[-1] + 2]
    assert not [c for c in after_b if c.startswith("All ")], after_b
