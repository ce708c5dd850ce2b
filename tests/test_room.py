"""A room of learners: the address their laptops reach, short links, the presenter's stage
(pipeline/room.py, plain Python), and presenter mode itself in AppTest: on the tiny model (fixture `tiny_app`),
and on the real one (marker `app`) where the real answer's first token is checked."""
import json

import pytest
import segno

from pipeline.room import RoomStore, is_loopback, public_base

KOREAN_SYSTEM = "항상 한국어로만 대답하세요."  # SmolLM2 then starts its answer with <0xED>, the first byte of 토
KOREAN = "토마토는 과일이야?"


# ---- the address learners open -------------------------------------------------------------------
def test_a_configured_public_url_wins():
    assert public_base("http://localhost:8501/presenter", "localhost", "https://room.example.org/") == \
        ("https://room.example.org", None)


def test_a_server_on_every_network_gives_its_lan_address_with_the_presenters_port():
    assert public_base("http://localhost:8500/presenter", "0.0.0.0", None, lan="192.168.1.20") == \
        ("http://192.168.1.20:8500", None)


def test_a_server_bound_to_one_address_gives_that_address():
    assert public_base("http://127.0.0.1:8501/presenter", "10.0.0.5") == ("http://10.0.0.5:8501", None)


def test_a_presenter_on_a_lan_address_keeps_it():
    assert public_base("http://192.168.1.20:8501/presenter", "0.0.0.0") == ("http://192.168.1.20:8501", None)


def test_a_server_on_localhost_only_says_so():
    base, note = public_base("http://localhost:8501/presenter", "localhost")
    assert base == "http://localhost:8501"
    assert "only listens on this computer" in note and "--server.address 0.0.0.0" in note


@pytest.mark.parametrize("host,loop", [("localhost", True), ("127.0.0.1", True), ("[::1]", True),
                                       ("192.168.1.2", False), ("room.example.org", False)])
def test_loopback_hosts(host, loop):
    assert is_loopback(host) is loop


# ---- short links and rooms -----------------------------------------------------------------------
def test_a_short_link_gives_back_its_query_in_another_process(tmp_path):
    query = {"q": "토마토 " * 600, "max_new_tokens": "8"}
    code = RoomStore(tmp_path).put_link(query)
    assert len(code) == 10 and RoomStore(tmp_path).put_link(dict(reversed(query.items()))) == code
    assert RoomStore(tmp_path).link(code) == query  # a fresh store: what a second replica reads
    assert RoomStore(tmp_path).link("0000000000") is None
    assert RoomStore(tmp_path).link("../../etc/passwd") is None  # codes are checked before any file is read


def test_a_room_keeps_the_presenters_stage_and_request(tmp_path):
    rooms = RoomStore(tmp_path)
    assert rooms.room("abc123") is None
    rooms.set_stage("abc123", 4, {"q": KOREAN})
    rooms.set_stage("abc123", 5, {"q": KOREAN})
    assert RoomStore(tmp_path).room("abc123") == {"stage": 5, "query": {"q": KOREAN}}
    (tmp_path / "room-bad000.json").write_text("{not json")
    assert rooms.room("bad000") is None
    with pytest.raises(ValueError):
        rooms.set_stage("../x", 1, {})


# ---- presenter mode in AppTest -------------------------------------------------------------------
def presenter(stage: int, **state):
    from conftest import page_app

    at = page_app("presenter", pr_stage=stage, **{"req_max_new_tokens": 4, **state}).run()
    assert not at.exception, at.exception
    return at


@pytest.mark.app
def test_presenter_names_a_korean_first_token_by_its_character():
    at = presenter(8, req_question=KOREAN, req_system=KOREAN_SYSTEM)
    bars = json.loads(at.get("plotly_chart")[0].proto.spec)["data"][0]["y"]
    assert "(0) &lt;0xED&gt; (byte 1 of 3)" in bars  # as Journey names a candidate that starts a character
    at = presenter(9, req_question=KOREAN, req_system=KOREAN_SYSTEM)
    chosen = [m.value for m in at.markdown if m.value.startswith("Chosen")]
    assert chosen and "토 (1/3)" in chosen[0] and "(id 184)" in chosen[0], chosen


def test_presenter_survives_a_question_too_long_for_a_qr_code(tiny_app):
    question = "Tell me everything about tomatoes, please. " * 68  # ~2,900 characters, ~600 tokens
    with pytest.raises(segno.DataOverflowError):  # what the page used to put in its QR code
        segno.make(f"http://localhost:8501/journey?q={question}", error="m")
    at = presenter(1, req_question=question)
    links = [c.value for c in at.code if "/journey?" in c.value]
    assert links and "link=" in links[0] and len(links[0]) < 100, links
    assert len(at.get("image")) == 1  # the QR code of the follow-along link
    code = links[0].split("link=")[1]
    from pipeline.room import room_store
    assert room_store().link(code)["q"] == question  # the server resolves the short link


def test_stage_12_keeps_the_token_ids_on_one_line(tiny_app):
    at = presenter(12, req_max_new_tokens=8)
    event = [c.value for c in at.code if '"completed"' in c.value][0]
    assert "generated_token_ids" in event and len(event.splitlines()) < 14, event


def test_a_learner_follows_the_presenters_stage_and_request(tiny_app):
    from pipeline.room import room_of

    at = presenter(3, req_question=KOREAN)
    room = room_of(at.session_state["pr_room"])  # the code learners get; the presenter's key stays theirs
    learner = presenter(1, pr_follow=room)  # a fresh session: default request, stage 1
    assert learner.title[0].value == "3. Tokens"
    assert learner.session_state["req_question"] == KOREAN
    assert [b.key for b in learner.button] == ["pr_unfollow"]  # no previous / next: the presenter turns pages
    at.session_state["pr_stage"] = 7
    at.run()
    learner.run()  # what its 3-second fragment does when the presenter's stage changed
    assert learner.title[0].value == "7. Attention"
    learner.button(key="pr_unfollow").click().run()  # and back to presenting on their own
    assert "pr_follow" not in learner.session_state and learner.button(key="pr_next").label == "Next"
    presenter(2, pr_room=room)  # a learner who puts the room's code in /presenter?room= opens a room of their own
    learner2 = presenter(1, pr_follow=room)
    assert learner2.title[0].value == "7. Attention"  # the presenter's room did not move


def test_a_folder_that_takes_no_file_keeps_no_links_or_rooms_and_raises_nothing(tmp_path):
    """A read-only or full cache folder: no short link (the presenter shows the long one), no room kept."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    store = RoomStore(blocker / "room")  # mkdir fails here even as root (NotADirectoryError)
    assert store.put_link({"q": "Are tomatoes fruit?"}) is None
    store.set_stage("abc123", 3, {"q": "hi"})
    assert store.room("abc123") is None
