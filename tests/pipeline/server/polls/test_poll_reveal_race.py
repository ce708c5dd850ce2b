"""Reveal on one replica while a learner's answer is under way on another (pipeline/server/polls/store.py): an
answer told "kept" is among the answers Reveal froze, and an answer told "closed" is not. Each test pins one
interleaving of the two with events; before Reveal marked the poll first and waited for the answers under way,
both failed (the first answer was kept but left out of the frozen ones, the second was told "closed" but counted)."""
import threading
import time
from types import SimpleNamespace

import pytest

from pipeline.server.polls import store as store_module
from pipeline.server.polls.store import PollClosed, PollStore

QUERY = {"q": "How many tokens?"}


def open_room_poll(replicas):
    """(the presenter's store, another replica's (kit.redis_server.Replicas), code, key, poll id), two answers in."""
    presenter = PollStore(replicas())
    code, key, _ = presenter.rooms.create_room(3, QUERY, driver="presenter")
    poll = presenter.open_poll(code, key, "tokens", "How many tokens?", QUERY, real={"count": 5, "answer": "5"})
    presenter.answer(code, poll.id, "early-1", "4")
    presenter.answer(code, poll.id, "early-2", "6")
    return presenter, PollStore(replicas()), code, key, poll.id


def test_an_answer_arriving_while_reveal_lists_the_answers_is_refused(replicas, monkeypatch):
    presenter, replica, code, key, poll_id = open_room_poll(replicas)
    outcome = {}
    listing = PollStore.answers

    def list_then_a_learner_answers(self, code_, poll_id_):
        found = listing(self, code_, poll_id_)
        try:  # the other replica's learner, right after the listing and before Reveal's record is written
            outcome["told"] = replica.answer(code, poll_id, "late", "99")
        except PollClosed:
            outcome["told"] = "closed"
        return found

    monkeypatch.setattr(PollStore, "answers", list_then_a_learner_answers)
    frozen = presenter.reveal(code, key, poll_id).revealed_answers
    assert outcome["told"] == "closed"  # told so, and ...
    assert sorted(frozen) == ["4", "6"]  # ... not counted
    assert presenter.answer_of(code, poll_id, "late") is None


def test_an_answer_written_just_before_reveal_is_taken_back_before_the_listing(replicas, monkeypatch):
    presenter, replica, code, key, poll_id = open_room_poll(replicas)
    written, revealing = threading.Event(), threading.Event()
    writing = PollStore._write

    def write(self, path: str, data):
        writing(self, path, data)
        if self is replica and path.rsplit("/", 2)[-2] == f"answers-{poll_id}":
            written.set()  # the learner's file is on disk; hold before its second look at the poll ...
            assert revealing.wait(10)  # ... until the presenter's Reveal has marked the poll
        elif self is presenter and path.endswith(f"/poll-{poll_id}.json") and data.get("revealed_at"):
            revealing.set()

    monkeypatch.setattr(PollStore, "_write", write)
    told = {}

    def learner():
        try:
            told["late"] = replica.answer(code, poll_id, "late", "99")
        except PollClosed:
            told["late"] = "closed"

    thread = threading.Thread(target=learner)
    thread.start()
    assert written.wait(10)
    poll = presenter.reveal(code, key, poll_id)
    thread.join(10)
    assert told["late"] == "closed"  # the poll was no longer open at its second look: taken back ...
    assert sorted(poll.revealed_answers) == ["4", "6"]  # ... before Reveal listed the answers
    assert presenter.answer_of(code, poll_id, "late") is None


def test_a_reveal_cut_short_is_finished_by_the_next_and_refuses_answers_meanwhile(replicas, monkeypatch):
    presenter, replica, code, key, poll_id = open_room_poll(replicas)

    def the_server_dies(_seconds):
        raise KeyboardInterrupt  # the presenter's server killed between marking the poll and freezing its answers

    monkeypatch.setattr(store_module, "time", SimpleNamespace(time=time.time, sleep=the_server_dies))
    with pytest.raises(KeyboardInterrupt):
        presenter.reveal(code, key, poll_id)
    monkeypatch.undo()
    poll = replica.poll(code, poll_id)
    assert poll.status == "revealing" and poll.revealed_answers is None
    with pytest.raises(PollClosed):
        replica.answer(code, poll_id, "late", "99")
    assert replica.current(code).id == poll_id  # still the room's poll: the presenter's Reveal finishes it
    finished = replica.reveal(code, key, poll_id)
    assert finished.status == "revealed" and sorted(finished.revealed_answers) == ["4", "6"]


def test_a_close_during_reveals_wait_stays_closed(replicas, monkeypatch):
    """The presenter's second tab (or another replica) closes the poll while the first tab's Reveal waits: the poll
    stays closed, and learners' screens do not get it back."""
    presenter, replica, code, key, poll_id = open_room_poll(replicas)

    def another_tab_closes(_seconds):
        replica.close(code, key, poll_id)

    monkeypatch.setattr(store_module, "time", SimpleNamespace(time=time.time, sleep=another_tab_closes))
    assert presenter.reveal(code, key, poll_id).status == "closed"
    assert replica.poll(code, poll_id).status == "closed" and replica.current(code) is None
