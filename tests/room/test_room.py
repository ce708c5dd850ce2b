"""A room of learners: the address their laptops reach, short links, the presenter's stage
(pipeline/server/room.py, plain Python), and presenter mode itself in AppTest: on the tiny model (fixture `tiny_app`),
and on the real one (marker `app`) where the real answer's first token is checked."""
import hashlib
import json
import re
import secrets

import pytest
import segno
from kit.apptest import presenter_at as presenter
from kit.apptest import presenting_at as started

from pipeline.server.room import RoomStore, is_loopback, public_base, room_store
from views.pages.presenter.stages import stage_number

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
def test_a_short_link_gives_back_its_query_in_another_process(replicas):
    query = {"q": "토마토 " * 600, "max_new_tokens": "8"}
    code = replicas().put_link(query)
    assert len(code) == 10 and replicas().put_link(dict(reversed(query.items()))) == code
    assert replicas().link(code) == query  # a fresh store: what a second replica (on another host: Redis) reads
    assert replicas().link("0000000000") is None
    assert replicas().link("../../etc/passwd") is None  # codes are checked before any file is read


def test_a_room_keeps_the_presenters_stage_and_request(replicas):
    rooms = replicas()
    code, key, saved = rooms.create_room(4, {"q": KOREAN}, driver="me")
    assert saved and re.fullmatch(r"[a-z0-9]{6}", code) and re.fullmatch(r"[0-9a-f]{32}", key)
    assert rooms.set_stage(code, key, 5, {"q": KOREAN}, driver="me")
    again = replicas().room(code)  # a fresh store: what a second replica reads
    assert again["stage"] == 5 and again["query"] == {"q": KOREAN} and again["driver"] == "me" and again["saved"]
    replicas.damage("room-bad000.json")
    assert rooms.room("bad000") is None
    with pytest.raises(ValueError):
        rooms.set_stage("../x", key, 1, {}, driver="me")


def test_only_the_presenter_key_moves_a_room_and_no_file_holds_it(replicas):
    rooms = replicas()
    code, key, _ = rooms.create_room(2, {"q": "Are tomatoes fruit?"}, driver="presenter")
    guesses = ["", code, key.upper(), key[:-1] + ("0" if key[-1] != "0" else "1"), secrets.token_hex(16),
               hashlib.sha256(f"room:{code}".encode()).hexdigest()[:32],  # what a learner could derive from the code
               hashlib.sha256(code.encode()).hexdigest(), "\udcff" * 32]
    for guess in guesses:
        assert not rooms.may_drive(code, guess)
        with pytest.raises(PermissionError):
            rooms.set_stage(code, guess, 9, {"q": "hijacked"}, driver="learner")
    with pytest.raises(PermissionError):  # a room nobody made cannot be driven into existence
        rooms.set_stage("abcdef", key, 9, {"q": "hijacked"}, driver="learner")
    assert rooms.room("abcdef") is None
    assert replicas().room(code)["stage"] == 2
    assert all(key not in text for text in replicas.everything())  # the store keeps the key's digest only
    other, other_key, _ = rooms.create_room(1, {}, driver="b")
    assert other != code and other_key != key and not rooms.may_drive(other, key)


def test_links_and_rooms_on_disk_are_bounded_in_count_and_bytes(tmp_path):
    rooms = RoomStore(tmp_path, max_files=20, max_bytes=10**9)
    codes = [rooms.put_link({"q": f"question {i}"}) for i in range(50)]
    made = [rooms.create_room(1, {"q": f"room {i}"}, driver="d")[0] for i in range(10)]
    assert len(list(tmp_path.glob("*.json"))) == 20
    assert rooms.room(made[-1]) is not None and rooms.link(codes[0]) is None  # the least recently written went first
    big = RoomStore(tmp_path / "big", max_files=10**6, max_bytes=200_000)
    for i in range(40):
        big.put_link({"q": f"{i} " + "토" * 10_000})  # ~30 KB each
    assert sum(p.stat().st_size for p in (tmp_path / "big").glob("*.json")) <= 200_000
    assert rooms.put_link({"q": "x" * (3 * 2**20)}) is None  # one link past the longest request: refused


def test_a_folder_that_takes_no_file_keeps_links_and_rooms_in_memory_and_says_so(tmp_path):
    """A read-only or full cache folder: this process still keeps and reads the room (saved: False)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    store = RoomStore(blocker / "room")  # mkdir fails here even as root (NotADirectoryError)
    code = store.put_link({"q": "Are tomatoes fruit?"})
    assert store.link(code) == {"q": "Are tomatoes fruit?"}
    room, key, saved = store.create_room(3, {"q": "hi"}, driver="me")
    assert not saved and store.room(room)["saved"] is False
    assert store.set_stage(room, key, 4, {"q": "hi"}, driver="me") is False
    assert store.room(room)["stage"] == 4
    assert RoomStore(blocker / "room").room(room) is None  # another replica: not there


# ---- presenter mode in AppTest -------------------------------------------------------------------


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
    at = started(1, req_question=question)
    links = [c.value for c in at.code if "/journey?" in c.value]
    assert links and "link=" in links[0] and len(links[0]) < 100, links
    assert len(at.get("image")) == 1  # the QR code of the follow-along link
    code = links[0].split("link=")[1]
    from pipeline.server.room import room_store
    assert room_store().link(code)["q"] == question  # the server resolves the short link


def test_the_end_token_stage_keeps_the_token_ids_on_one_line(tiny_app):
    at = presenter(stage_number("The end token and clean-up"), req_max_new_tokens=8)
    event = [c.value for c in at.code if '"completed"' in c.value][0]
    assert "generated_token_ids" in event and len(event.splitlines()) < 14, event


def test_a_learner_follows_the_presenters_stage_and_request(tiny_app):
    at = started(3, req_question=KOREAN)
    room = at.session_state["pr_room"]  # the code learners get; the presenter's key stays in their session
    learner = presenter(1, pr_follow=room)  # a fresh session: default request, stage 1
    assert learner.title[0].value == "3. Tokens"
    assert learner.session_state["req_question"] == KOREAN
    assert [b.key for b in learner.button] == ["pr_unfollow"]  # no previous / next: the presenter turns pages
    at.session_state["pr_stage"] = 7
    at.run()
    learner.run()  # what its 3-second fragment does when the presenter's stage changed
    assert learner.title[0].value == "7. Attention"
    learner.button(key="pr_unfollow").click().run()  # and back to the walk on their own, in no room yet
    assert "pr_follow" not in learner.session_state and learner.button(key="pr_next").label == "Next"
    assert "pr_room" not in learner.session_state and [b for b in learner.button if b.key == "pr_start"]
    learner.button(key="pr_next").click().run()
    assert room_store().room(room)["stage"] == 7


def test_a_learner_with_the_room_code_cannot_drive_the_room(tiny_app):
    """Every way a learner holding only the code could try: the code as the room, with made-up or derived keys,
    with a stage and question, and then Next; the presenter's room stays where the presenter left it."""
    at = started(4, req_question=KOREAN)
    room, key = at.session_state["pr_room"], at.session_state["pr_key"]
    left = room_store().room(room)
    assert left["stage"] == 4 and left["query"]["q"] == KOREAN
    tries = [dict(pr_room=room), dict(pr_room=room, pr_key=secrets.token_hex(16)),
             dict(pr_room=room, pr_key=hashlib.sha256(f"room:{room}".encode()).hexdigest()[:32]),
             dict(pr_room=room, pr_follow=room), dict(pr_follow=room, pr_key=key[::-1])]
    for state in tries:
        learner = presenter(9, req_question="hijacked", **state)
        if learner.session_state["pr_follow"] if "pr_follow" in learner.session_state else False:
            assert [b.key for b in learner.button] == ["pr_unfollow"], state  # following: nothing to press
        else:
            assert "pr_room" not in learner.session_state, state  # no room until they start one
            learner.button(key="pr_start").click().run()
            assert learner.session_state["pr_room"] != room, state  # a room of their own
            learner.button(key="pr_next").click().run()
        if "pr_unfollow" in [b.key for b in learner.button]:  # stop following: a room of their own, not this one
            learner.button(key="pr_unfollow").click().run()
            learner.button(key="pr_start").click().run()
            assert learner.session_state["pr_room"] != room, state
            learner.button(key="pr_next").click().run()
        assert room_store().room(room) == left, state
    assert not [w for w in at.run().warning if "someone else" in w.value]  # nobody drove the presenter's room


def test_the_presenter_sees_when_someone_else_drives_their_room(tiny_app):
    at = started(1)
    room, key = at.session_state["pr_room"], at.session_state["pr_key"]
    shown = [c.value for c in at.code if key in c.value]
    assert len(shown) == 1 and f"key={key}" in shown[0]  # only in the private link's box
    presenter(9, pr_room=room, pr_key=key)  # the private link opened elsewhere (another tab, or a leak)
    assert room_store().room(room)["stage"] == 9
    at.run()  # what the presenter's 3-second fragment does when the room moved
    said = [w.value for w in at.warning if "someone else" in w.value]
    assert said and "stage 9" in said[0], [w.value for w in at.warning]
    assert room_store().room(room)["stage"] == 9  # told, not silently undone
    at.button(key="pr_take").click().run()
    assert room_store().room(room)["stage"] == 1 and not [w for w in at.warning if "someone else" in w.value]


def test_a_read_only_room_folder_is_said_on_both_screens_and_the_room_works_from_memory(tiny_app, tmp_path,
                                                                                         monkeypatch):
    import pipeline.server.room

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    store = RoomStore(blocker / "room")
    monkeypatch.setattr(pipeline.server.room, "room_store", lambda: store)
    at = started(3)
    assert [w for w in at.warning if "cannot write to its room store" in w.value], [w.value for w in at.warning]
    learner = presenter(1, pr_follow=at.session_state["pr_room"])
    assert learner.title[0].value == "3. Tokens"  # on this server the room works from memory
    assert [c for c in learner.caption if "memory only" in c.value]


def test_a_room_on_two_hosts_sharing_the_rooms_redis_is_followed_and_driven_from_either(tiny_app, redis_server,
                                                                                        tmp_path, monkeypatch):
    """With TPE_STORE=redis:// every host's replicas share the room: before, a room was a file of one host's folder,
    and a learner the balancer sent to another host waited for ever."""
    import pipeline.server.room
    from pipeline.server.store.redis_rooms import RedisRoomFiles

    hosts = {name: RoomStore(tmp_path / name, files=RedisRoomFiles(redis_server.url, max_links=100)) for name in "ab"}
    on = lambda name: monkeypatch.setattr(pipeline.server.room, "room_store", lambda: hosts[name])  # noqa: E731
    on("a")
    at = started(3)  # the presenter's page, served by host A
    room = at.session_state["pr_room"]
    on("b")
    learner = presenter(1, pr_follow=room)  # a learner the balancer sent to host B
    assert learner.title[0].value == "3. Tokens" and not [c for c in learner.caption if "memory only" in c.value]
    at.button(key="pr_next").click().run()  # the presenter's next press, now served by host B
    assert hosts["a"].room(room)["stage"] == 4
    learner.run()  # the follower's poll
    assert learner.title[0].value.startswith("4."), learner.title[0].value
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_presenter_whose_room_store_is_away_keeps_the_key_and_is_told(tiny_app, redis_server, tmp_path,
                                                                         monkeypatch):
    """A replica that never read the room, while Redis does not answer: before, "this server no longer keeps the
    room", and the presenter's key was dropped for good."""
    import pipeline.server.room
    from pipeline.server.store.redis_rooms import RedisRoomFiles

    first = RoomStore(tmp_path / "a", files=RedisRoomFiles(redis_server.url, max_links=100))
    code, key, _ = first.create_room(2, {"q": "Are tomatoes fruit?"}, driver="presenter")
    other = RoomStore(tmp_path / "b", files=RedisRoomFiles(redis_server.url, max_links=100))
    monkeypatch.setattr(pipeline.server.room, "room_store", lambda: other)
    redis_server.stop()
    at = presenter(2, pr_room=code, pr_key=key)
    assert [w for w in at.warning if "does not answer now" in w.value], [w.value for w in at.warning]
    assert not [w for w in at.warning if "does not open room" in w.value]
    assert at.session_state["pr_room"] == code and at.session_state["pr_key"] == key
    redis_server.start()  # back (empty: this test's Redis keeps nothing, so the room is gone now: said as such)
    other.files.backoff.skip_until = 0.0  # the backoff's wait, not what is tested
    at.run()
    assert [w for w in at.warning if f"does not open room {code}" in w.value], [w.value for w in at.warning]


def test_a_visit_makes_no_room_until_the_presenter_starts(tiny_app):
    """Every visit to /presenter used to make a room file: 5,100 visits pushed a live room out of the store."""
    before = set(room_store().folder.glob("room-*.json"))
    at = presenter(1)
    at.button(key="pr_next").click().run()  # the walk works before a room exists
    assert at.title[0].value.startswith("2.") and "pr_room" not in at.session_state
    assert set(room_store().folder.glob("room-*.json")) == before
    assert not [c for c in at.code if "follow=" in c.value]
    at.button(key="pr_start").click().run()
    room = at.session_state["pr_room"]
    assert room_store().room(room)["stage"] == 2 and set(room_store().folder.glob("room-*.json")) - before


def test_a_removed_room_tells_its_followers(tiny_app):
    """A room the store removed used to leave its followers on 'Waiting for the presenter' for ever."""
    at = started(3)
    room = at.session_state["pr_room"]
    learner = presenter(1, pr_follow=room)
    assert learner.title[0].value == "3. Tokens"
    (room_store().folder / f"room-{room}.json").unlink()  # what the store's bound does to a room left for hours
    learner.run()  # the follower's 3-second poll sees it go and draws the page again
    said = [w.value for w in learner.warning]
    assert any(f"Room {room} has ended" in w for w in said), said
    assert not [m for m in learner.markdown if "Waiting for the presenter" in m.value]
    stranger = presenter(1, pr_follow="zzzzzz")  # a code never seen by this page: said as such, not a wait
    assert any("There is no room zzzzzz" in w.value for w in stranger.warning), [w.value for w in stranger.warning]
    at.run()  # the presenter's own screen: the room is gone, a new one is one press away
    assert any(f"does not open room {room}" in w.value for w in at.warning), [w.value for w in at.warning]
    assert [b for b in at.button if b.key == "pr_start"]
