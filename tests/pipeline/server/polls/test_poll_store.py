"""A room's polls in plain Python (pipeline/server/polls/): who may open, reveal and close one, one answer per
learner session, the bounds, and what a second store on the same folder (another replica, a restarted server) reads."""
import hashlib
import secrets
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pipeline.server.polls.record import KINDS, MAX_ANSWER_CHARS, clean_answer, new_poll
from pipeline.server.polls.store import PollClosed, PollFull, PollStore
from pipeline.server.polls.summary import learner_rows
from pipeline.server.room import RoomStore

QUERY = {"q": "What is the capital of France?"}
NEXT_TOKEN_REAL = {"top": [{"id": 7, "label": "␣Paris", "text": " Paris", "probability": 0.6},
                           {"id": 9, "label": "␣The", "text": " The", "probability": 0.2}]}


def room(replicas, **bounds):
    """(the presenter's PollStore, code, key) of a new room; `replicas` makes the room stores (kit.redis_server)."""
    rooms = replicas()
    code, key, _ = rooms.create_room(8, QUERY, driver="presenter")
    return PollStore(rooms, **bounds), code, key


def test_the_five_kinds_are_named_as_lesson_files_name_them():
    assert KINDS == ("next_token", "tokens", "temperature", "attention", "prompt_caching")
    with pytest.raises(ValueError):
        new_poll("guess_the_weather", "?", QUERY)


def test_one_answer_per_session_and_a_second_replaces_the_first(replicas):
    polls, code, key = room(replicas)
    poll = polls.open_poll(code, key, "next_token", "What comes next?", QUERY, stage=8, real=NEXT_TOKEN_REAL)
    polls.answer(code, poll.id, "learner-1", "Paris")
    polls.answer(code, poll.id, "learner-2", "Rome")
    polls.answer(code, poll.id, "learner-1", "Lyon")  # learner 1 changes their mind
    assert polls.count(code, poll.id) == 2
    assert polls.answer_of(code, poll.id, "learner-1") == "Lyon"
    revealed = polls.reveal(code, key, poll.id)
    assert revealed.status == "revealed" and sorted(revealed.revealed_answers) == ["Lyon", "Rome"]
    with pytest.raises(PollClosed):  # Reveal freezes the answers
        polls.answer(code, poll.id, "learner-3", "Paris")
    assert not any("learner" in n for n in replicas.everything())  # no session id stored, only its digest


def test_answers_are_bounded_and_kept_as_text(replicas):
    polls, code, key = room(replicas)
    poll = polls.open_poll(code, key, "next_token", "", QUERY, real=NEXT_TOKEN_REAL)
    assert poll.question.startswith("What will the model write next")  # an empty question: the kind's own
    stored = polls.answer(code, poll.id, "s", "<img src=x onerror=alert(1)>" + "x" * 10_000)
    assert len(stored) == MAX_ANSWER_CHARS and stored.startswith("<img src=x")  # cut, kept as the text it is
    assert polls.answer(code, poll.id, "s2", "two\nlines\x00") == "two lines"
    with pytest.raises(ValueError):
        polls.answer(code, poll.id, "s3", "   ")
    number = polls.open_poll(code, key, "tokens", "How many tokens?", QUERY, real={"count": 30, "answer": "30"})
    assert polls.answer(code, number.id, "s", " 1,024 ") == "1024"
    for bad in ("many", "-3", "1e9", "9" * 20, "<b>3</b>"):
        with pytest.raises(ValueError):
            polls.answer(code, number.id, "s", bad)
    yes_no = polls.open_poll(code, key, "temperature", "", QUERY)
    assert polls.answer(code, yes_no.id, "s", "YES") == "yes"
    with pytest.raises(ValueError):
        polls.answer(code, yes_no.id, "s", "maybe")
    chips = polls.open_poll(code, key, "attention", "", QUERY, choices=["(0) <s>", "(1) ␣the"])
    assert polls.answer(code, chips.id, "s", "1") == "1"
    with pytest.raises(ValueError):
        polls.answer(code, chips.id, "s", "2")  # no such position offered


def test_a_poll_takes_a_bounded_count_of_answers_and_a_room_a_bounded_count_of_polls(replicas):
    polls, code, key = room(replicas, max_answers=3, max_polls=2)
    poll = polls.open_poll(code, key, "tokens", "", QUERY)
    for s in ("a", "b", "c"):
        polls.answer(code, poll.id, s, "5")
    with pytest.raises(PollFull):
        polls.answer(code, poll.id, "d", "5")
    polls.answer(code, poll.id, "a", "6")  # one who answered may still change their answer
    assert polls.count(code, poll.id) == 3
    polls.open_poll(code, key, "tokens", "", QUERY)
    with pytest.raises(PollFull):
        polls.open_poll(code, key, "tokens", "", QUERY)


def test_only_the_presenter_key_opens_reveals_or_closes(replicas):
    polls, code, key = room(replicas)
    guesses = ["", code, key.upper(), key[:-1] + ("0" if key[-1] != "0" else "1"), secrets.token_hex(16),
               hashlib.sha256(f"room:{code}".encode()).hexdigest()[:32], "\udcff" * 32]
    for guess in guesses:
        with pytest.raises(PermissionError):
            polls.open_poll(code, guess, "tokens", "hijacked", QUERY)
    poll = polls.open_poll(code, key, "tokens", "", QUERY)
    for guess in guesses:
        with pytest.raises(PermissionError):
            polls.reveal(code, guess, poll.id)
        with pytest.raises(PermissionError):
            polls.close(code, guess, poll.id)
    _, other_key, _ = polls.rooms.create_room(1, {}, driver="other")
    with pytest.raises(PermissionError):  # another room's key does not drive this one's polls
        polls.reveal(code, other_key, poll.id)
    assert polls.current(code).status == "open"
    with pytest.raises(PermissionError):  # a code that is no room's: nothing is read or written
        polls.open_poll("../x", key, "tokens", "", QUERY)


def test_polls_are_kept_for_another_replica_and_a_restarted_server(replicas):
    polls, code, key = room(replicas)
    poll = polls.open_poll(code, key, "tokens", "How many?", QUERY, stage=3, real={"count": 30, "answer": "30"})
    polls.answer(code, poll.id, "on-replica-1", "25")
    replica = PollStore(replicas())  # a fresh store on the same folder: another replica, or a restart
    assert replica.current(code).id == poll.id and replica.current(code).question == "How many?"
    replica.answer(code, poll.id, "on-replica-2", "31")
    replica.answer(code, poll.id, "on-replica-1", "30")  # the same session, its request served by the other replica
    assert polls.count(code, poll.id) == 2
    assert sorted(replica.reveal(code, key, poll.id).revealed_answers) == ["30", "31"]
    assert polls.current(code).status == "revealed" and polls.current(code).real == {"count": 30, "answer": "30"}
    polls.close(code, key, poll.id)
    assert replica.current(code) is None and [p.id for p in replica.polls(code)] == [poll.id]


def test_thirty_learners_on_two_replicas_answer_at_once_and_each_is_counted_once(replicas):
    polls, code, key = room(replicas)
    poll = polls.open_poll(code, key, "tokens", "", QUERY)
    replicas = [polls, PollStore(replicas())]
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda n: replicas[n % 2].answer(code, poll.id, f"learner-{n % 30}", str(n)), range(90)))
    assert polls.count(code, poll.id) == 30
    assert len(polls.reveal(code, key, poll.id).revealed_answers) == 30


def test_opening_a_poll_closes_the_one_before(replicas):
    polls, code, key = room(replicas)
    first = polls.open_poll(code, key, "tokens", "", QUERY)
    time.sleep(0.01)
    second = polls.open_poll(code, key, "temperature", "", QUERY)
    assert polls.current(code).id == second.id and polls.poll(code, first.id).status == "closed"
    with pytest.raises(PollClosed):
        polls.answer(code, first.id, "s", "3")
    assert [p.id for p in polls.polls(code)] == [first.id, second.id]


def test_a_removed_room_takes_its_polls_with_it(tmp_path):
    rooms = RoomStore(tmp_path, max_files=2)
    polls = PollStore(rooms)
    code, key, _ = rooms.create_room(1, QUERY, driver="p")
    polls.open_poll(code, key, "tokens", "", QUERY)
    entry = rooms.files.index.entries[f"room-{code}.json"]
    entry.mtime -= 4 * 3600  # left for four hours: no longer live
    import os
    os.utime(tmp_path / f"room-{code}.json", (entry.mtime, entry.mtime))
    for i in range(3):
        rooms.put_link({"q": f"link {i}"})
    assert rooms.room(code) is None and not (tmp_path / f"polls-{code}").exists()


def test_clean_answer_is_what_the_store_keeps():
    poll = new_poll("prompt_caching", "", QUERY)
    assert clean_answer(poll, "48") == "48"


def test_learners_questions_are_counted_once_each_and_never_kept(replicas):
    polls, code, _ = room(replicas)
    sky = "Why is the sky blue?"
    for session, question in [("a", sky), ("a", sky), ("b", sky), ("a", "What is a prime?")]:
        polls.note_question(code, session, question)
    assert polls.questions_asked(code) == 3 and PollStore(replicas()).questions_asked(code) == 3
    assert not any("sky" in text for text in replicas.everything())
    before = replicas.everything()
    polls.note_question("abcdef", "a", "no such room")
    assert replicas.everything() == before


def test_a_pick_among_the_models_tokens_takes_only_those():
    poll = new_poll("next_token", "", QUERY, real=NEXT_TOKEN_REAL, choices=["␣The", "␣Paris"])
    assert clean_answer(poll, "␣Paris") == "␣Paris"
    with pytest.raises(ValueError):
        clean_answer(poll, "Lyon")


def test_a_learners_answers_are_found_across_rooms_by_their_session_only(replicas):
    polls, code, key = room(replicas)
    other_code, other_key, _ = polls.rooms.create_room(3, QUERY, driver="presenter")
    first = polls.open_poll(code, key, "next_token", "What comes next?", QUERY, real=NEXT_TOKEN_REAL)
    polls.answer(code, first.id, "learner-1", "paris")
    polls.answer(code, first.id, "learner-2", "Rome")
    polls.reveal(code, key, first.id)
    second = polls.open_poll(other_code, other_key, "tokens", "How many?", QUERY, real={"count": 14})
    polls.answer(other_code, second.id, "learner-1", "12")
    polls.open_poll(code, key, "tokens", "Unanswered", QUERY)
    found = polls.answered_by("learner-1")
    assert [(c, p.id, a) for c, p, a in found] == [(code, first.id, "paris"), (other_code, second.id, "12")]
    assert learner_rows(found) == [
        {"question": "What comes next?", "yours": "paris", "class": "␣Paris: 1, Rome: 1 (2 answered)",
         "real": "␣Paris 60.0%, ␣The 20.0%"},
        {"question": "How many?", "yours": "12"}]  # not revealed: the class and the real answer left out
    assert polls.answered_by("learner-3") == []


class _Late(PollStore):
    """A server whose answer's write lands only after `meanwhile()` (another server's move) has run."""
    meanwhile = staticmethod(lambda: None)

    def _write(self, path, data):
        if path.rsplit("/", 2)[-2].startswith("answers-"):
            self.meanwhile()
        super()._write(path, data)


def test_an_answer_written_after_another_servers_reveal_is_taken_back(replicas):
    polls, code, key = room(replicas)
    poll = polls.open_poll(code, key, "next_token", "What comes next?", QUERY, real=NEXT_TOKEN_REAL)
    polls.answer(code, poll.id, "early", "Rome")
    late = _Late(replicas())  # a second store on the same folder
    late.answer(code, poll.id, "changed", "Paris")
    late.meanwhile = lambda: polls.reveal(code, key, poll.id)  # the open check passes, then Reveal, then the write
    with pytest.raises(PollClosed):
        late.answer(code, poll.id, "learner", "Lyon")
    late.meanwhile = lambda: None
    with pytest.raises(PollClosed):
        late.answer(code, poll.id, "changed", "Lyon")
    frozen = polls.poll(code, poll.id).revealed_answers
    assert sorted(frozen) == ["Paris", "Rome"]
    assert late.answer_of(code, poll.id, "learner") is None  # never "Your answer" while uncounted
    assert late.answer_of(code, poll.id, "changed") == "Paris"  # the counted answer, not the late change
    assert polls.count(code, poll.id) == len(frozen)


def test_the_answer_past_the_limit_from_a_racing_server_is_taken_back(replicas):
    polls, code, key = room(replicas, max_answers=2)
    poll = polls.open_poll(code, key, "next_token", "What comes next?", QUERY, real=NEXT_TOKEN_REAL)
    polls.answer(code, poll.id, "first", "Rome")
    late = _Late(replicas(), max_answers=2)
    late.meanwhile = lambda: polls.answer(code, poll.id, "second", "Paris")  # takes the last place meanwhile
    with pytest.raises(PollFull):
        late.answer(code, poll.id, "third", "Lyon")
    assert late.answer_of(code, poll.id, "third") is None and polls.count(code, poll.id) == 2
