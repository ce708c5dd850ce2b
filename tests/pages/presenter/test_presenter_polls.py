"""Presenter mode's polls in AppTest on the tiny model (fast tier): the presenter opens a poll, three learner sessions
holding the follow link answer, the presenter sees a count and no answer, Reveal draws the class view beside the
model's real figure, a learner's second answer replaces the first; a learner never gets a poll control; the class
view's real figure is the one the Next token and Tokens pages show for the same request."""
import hashlib
import json
import secrets

import pytest
from kit.apptest import page_app
from kit.apptest import presenter_at as presenter
from kit.apptest import presenting_at as started

from pipeline.server.polls.store import poll_store
from ui.escape import html_text
from ui.session_summary import session_summary_html
from views.chrome.my_session import poll_answers_for
from views.pages.presenter.stages import stage_number

POLL_KEYS = {"pp_open", "pp_reveal", "pp_close"}




def send(learner, answer) -> None:
    """A learner types or picks an answer and presses Send my answer."""
    for key in ("pl_text", "pl_number"):
        if key in [w.key for w in [*learner.text_input, *learner.number_input]]:
            (learner.text_input if key == "pl_text" else learner.number_input)(key=key).set_value(answer)
    next(b for b in learner.button if b.label == "Send my answer").click().run()
    assert not learner.exception, learner.exception


def texts(at) -> str:
    return " | ".join([m.value for m in at.markdown] + [c.value for c in at.caption])


def test_a_poll_opened_answered_by_three_learners_and_revealed(tiny_app):
    at = started(8, req_question="Is a tomato a fruit?")
    room = at.session_state["pr_room"]
    at.selectbox(key="pp_kind").set_value("next_token")
    at.button(key="pp_open").click().run()
    assert "0 answered" in texts(at)
    poll = poll_store().current(room)
    assert poll.kind == "next_token" and poll.stage == 8
    learners = [presenter(1, pr_follow=room) for _ in range(3)]
    for learner in learners:
        assert poll.question in texts(learner)
        assert not POLL_KEYS & {b.key for b in learner.button}  # a learner has no poll control
    top = [c["text"] for c in poll.real["top"] if c["text"].strip()]  # a guess that can be typed
    send(learners[0], "<b>bold</b>")
    send(learners[1], top[1])
    send(learners[2], "x" * 10_000)
    send(learners[0], top[0])  # a second answer replaces the first
    assert poll_store().count(room, poll.id) == 3
    at.run()
    shown = texts(at)
    assert "3 answered" in shown and "bold" not in shown and "xxxx" not in shown  # a count, never the answers
    assert not at.get("plotly_chart") or "share of the class" not in json.dumps(
        [c.proto.spec for c in at.get("plotly_chart")])
    learners[0].run()
    assert "bold" not in texts(learners[0]).replace("Your answer", "")  # their own answer only: the first replaced
    at.button(key="pp_reveal").click().run()
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart") if "share of the class" in c.proto.spec]
    assert charts, "no class view after Reveal"
    bars, model = charts[0]["data"]
    assert sum(int(t) for t in bars["text"]) == 3 and model["name"] == "the model's probability"
    assert [round(p, 6) for p in model["y"]] == [round(c["probability"], 6) for c in poll.real["top"]]
    assert any("x" * 200 in x and "x" * 201 not in x for x in bars["x"])  # bounded at 200 characters
    for learner in learners:
        learner.run()  # what the learners' 3-second watch does once the poll is revealed
        assert [c for c in learner.get("plotly_chart") if "share of the class" in c.proto.spec]
        assert "The model's real answer" in texts(learner)
    at.button(key="pp_close").click().run()
    assert poll_store().current(room) is None
    learners[0].run()
    assert "The presenter asks" not in texts(learners[0])


def test_a_learner_with_the_follow_link_cannot_open_reveal_or_close(tiny_app):
    """Every way the room test tries: the code as the room with made-up or derived keys, the code both ways, and the
    poll's own widget keys set in the learner's session."""
    at = started(3)
    room, key = at.session_state["pr_room"], at.session_state["pr_key"]
    at.button(key="pp_open").click().run()
    poll = poll_store().current(room)
    tries = [dict(pr_room=room), dict(pr_room=room, pr_key=secrets.token_hex(16)),
             dict(pr_room=room, pr_key=hashlib.sha256(f"room:{room}".encode()).hexdigest()[:32]),
             dict(pr_room=room, pr_follow=room), dict(pr_follow=room, pr_key=key[::-1]),
             dict(pr_follow=room, pp_kind="tokens", pp_open=True, pp_reveal=True, pp_close=True)]
    for state in tries:
        learner = presenter(3, **state)
        assert not POLL_KEYS & {b.key for b in learner.button}, state
        current = poll_store().current(room)
        assert current.id == poll.id and current.status == "open", state
    assert len(poll_store().polls(room)) == 1


def open_kind(at, room: str, stage: int, kind: str):
    """The presenter moves to `stage`, closes the poll shown, opens one of `kind`; the poll as stored."""
    at.session_state["pr_stage"] = stage
    at.run()
    if "pp_close" in [b.key for b in at.button]:
        at.button(key="pp_close").click().run()
    at.selectbox(key="pp_kind").set_value(kind)
    at.button(key="pp_open").click().run()
    assert not at.exception, at.exception
    return poll_store().current(room)


def test_the_real_figures_are_the_pages_own(tiny_app):
    same_figures_as_the_pages("Why is the sky blue?")


@pytest.mark.app
def test_the_real_figures_are_the_pages_own_on_the_real_model():
    same_figures_as_the_pages("What is the capital of France?")


def same_figures_as_the_pages(question: str) -> None:
    """Each kind's real figure is the one its page shows for the same request: Next token's top candidates (its
    table at step 0) and first of 10 draws, the Tokens page's count, Presenter mode's attention heatmap, its
    prompt-caching screen's reused tokens."""
    from kit.apptest import chart_data

    at = started(stage_number("Logits: a score for every token"), req_question=question)
    room = at.session_state["pr_room"]
    poll = open_kind(at, room, stage_number("Logits: a score for every token"), "next_token")
    page = page_app("next_token", req_question=question, req_max_new_tokens=4, nt_draws=10).run()
    table = next(d.value for d in page.dataframe if "probability" in d.value.columns)
    assert list(table["id"][:8]) == [c["id"] for c in poll.real["top"]]
    assert list(table["probability"][:8]) == [f"{c['probability']:.2%}" for c in poll.real["top"]]
    first_draw = next(m.value for m in page.markdown if m.value.startswith("First draw with seed"))
    draws = open_kind(at, room, stage_number("Sampling"), "temperature").real
    assert f"seed {draws['seed']}: `" in first_draw and f" {draws['draws'][0]} `" in first_draw, (first_draw, draws)
    tokens_poll = open_kind(at, room, stage_number("Tokens"), "tokens")
    tokens_page = page_app("tokens", req_question=question, req_max_new_tokens=4).run()
    count = next(m.value for m in tokens_page.metric if m.label == "Tokens in the prompt")
    assert str(tokens_poll.real["count"]) == str(count)
    attention = open_kind(at, room, stage_number("Attention"), "attention").real
    heatmap = chart_data(at.get("plotly_chart")[-1])[0]["z"]  # the Attention screen: the last W tokens' rows
    last_row = [float(w) for w in heatmap[-1]]
    assert last_row == pytest.approx(attention["weights"][-len(last_row):], abs=1e-6)
    caching = open_kind(at, room, stage_number("The next request: prompt caching"), "prompt_caching").real
    said = [m.value for m in at.markdown if f"**{caching['label']}**" in m.value]
    assert said and f"**{caching['reused']} reused**" in said[0] and f"{caching['tokens']} tokens" in said[0], said


def test_a_learners_own_questions_are_counted_for_the_room_without_their_text(tiny_app):
    at = started(2, req_question="Is a tomato a fruit?")
    room = at.session_state["pr_room"]
    learner = presenter(1, pr_follow=room)
    learner.run()  # following: the room's own question is no learner's
    assert poll_store().questions_asked(room) == 0
    learner.button(key="pr_unfollow").click().run()
    learner.session_state["req_question"] = "Why do cats purr?"
    learner.run()
    learner.run()  # the same question again counts once
    assert poll_store().questions_asked(room) == 1
    folder = poll_store().rooms.folder / f"polls-{room}"
    assert not any("purr" in p.read_text() or "purr" in p.name for p in folder.rglob("*.json"))
    at.session_state["pr_stage"] = 3  # the presenter moving on is no learner's question either
    at.run()
    assert poll_store().questions_asked(room) == 1


def test_learners_pick_among_the_models_eight_best_shuffled(tiny_app):
    at = started(8, req_question="Is a tomato a fruit?")
    room = at.session_state["pr_room"]
    at.checkbox(key="pp_pick").check()
    at.button(key="pp_open").click().run()
    poll = poll_store().current(room)
    labels = [c["label"] for c in poll.real["top"]]
    assert sorted(poll.choices) == sorted(labels) and len(labels) == 8
    learner = presenter(1, pr_follow=room)
    picker = learner.radio(key="pl_pick")
    assert len(picker.options) == 8
    picker.set_value(labels[2])
    next(b for b in learner.button if b.label == "Send my answer").click().run()
    assert poll_store().answers(room, poll.id) == [labels[2]]
    at.button(key="pp_reveal").click().run()
    rows = [json.loads(c.proto.spec) for c in at.get("plotly_chart") if "share of the class" in c.proto.spec][0]
    assert rows["data"][0]["text"][2] == "1"  # counted on the model's third token, beside its probability


def test_my_session_shows_a_learners_answer_and_after_reveal_the_class_and_the_real_one(tiny_app):
    at = started(3, req_question="Is a tomato a fruit?")
    room = at.session_state["pr_room"]
    at.selectbox(key="pp_kind").set_value("tokens")
    at.button(key="pp_open").click().run()
    poll = poll_store().current(room)
    learner, other = presenter(1, pr_follow=room), presenter(1, pr_follow=room)
    send(learner, 7)
    send(other, 9)
    session = learner.session_state["ms_session_id"]  # the id My session's caller passes (learner_session_id)

    def my_session() -> str:
        return session_summary_html([], {}, poll_answers_for(session))

    before = my_session()
    assert f"<td>{html_text(poll.question)}</td><td>7</td><td></td><td></td></tr>" in before  # theirs only
    at.button(key="pp_reveal").click().run()
    real = f"{poll_store().poll(room, poll.id).real['count']:,} tokens"
    after = my_session()
    assert f"<td>7</td><td>7: 1, 9: 1 (2 answered)</td><td>{real}</td></tr>" in after
    assert "<td>9</td>" not in after  # the other learner's answer is counted, never theirs
    assert poll_answers_for(secrets.token_hex(16)) == []  # a session that answered nothing
