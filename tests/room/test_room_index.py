"""Which rooms and links the store keeps (pipeline/server/room_index.py): no flood of writes removes a live room, a
room's pages keep it live, rooms are bounded per client and in all, and a write does not list the folder."""
import os
import pathlib
import time

import pytest

from pipeline.server import room_index
from pipeline.server.room import RoomRefused, RoomStore
from pipeline.server.room_index import LIVE_S


def aged(folder, code: str, seconds: float) -> None:
    """The room's file as if last seen `seconds` ago."""
    then = time.time() - seconds
    os.utime(folder / f"room-{code}.json", (then, then))


def test_a_flood_of_links_and_rooms_past_the_bound_leaves_a_live_room(tmp_path):
    store = RoomStore(tmp_path, max_files=20, per_client=1000)
    code, key, _ = store.create_room(3, {"q": "Are tomatoes fruit?"}, driver="presenter")
    aged(tmp_path, code, LIVE_S / 2)  # the presenter rests on one stage: the oldest file of the folder
    store.files.index.rescan()
    for i in range(60):
        store.put_link({"q": f"question {i}"})
    for i in range(30):  # rooms started by other visitors: older ones give way only once they are not live
        store.create_room(1, {}, driver=f"visitor {i}", client=f"10.0.0.{i}")
    assert store.room(code)["stage"] == 3 and store.may_drive(code, key)
    assert store.set_stage(code, key, 4, {"q": "Are tomatoes fruit?"}, driver="presenter")
    assert len(list(tmp_path.glob("room-*.json"))) == 31  # every live room kept, over the bound: links went first
    assert len(list(tmp_path.glob("link-*.json"))) == 0


def test_a_room_nobody_saw_for_hours_gives_way(tmp_path):
    store = RoomStore(tmp_path, max_files=5)
    old, _, _ = store.create_room(1, {}, driver="a")
    aged(tmp_path, old, LIVE_S + 60)
    store.files.index.rescan()
    for i in range(5):
        store.put_link({"q": f"question {i}"})
    assert store.room(old) is None
    assert len(list(tmp_path.glob("*.json"))) == 5


def test_the_pages_polls_keep_a_room_seen_at_most_once_a_minute(tmp_path):
    store = RoomStore(tmp_path)
    code, _, _ = store.create_room(1, {}, driver="a")
    aged(tmp_path, code, LIVE_S - 60)
    store.room(code)  # a read that is not a page of the room (a check) does not keep it
    assert time.time() - (tmp_path / f"room-{code}.json").stat().st_mtime > LIVE_S - 120
    store.room(code, seen=True)  # a follower's poll
    assert time.time() - (tmp_path / f"room-{code}.json").stat().st_mtime < 60
    aged(tmp_path, code, 600)
    store.room(code, seen=True)  # the next poll within the minute writes nothing
    assert time.time() - (tmp_path / f"room-{code}.json").stat().st_mtime > 590


def test_rooms_are_bounded_per_client_and_in_all_and_none_is_removed_for_it(tmp_path):
    store = RoomStore(tmp_path, per_client=3, max_rooms=5)
    mine = [store.create_room(1, {}, driver="d", client="192.168.1.7")[0] for _ in range(3)]
    with pytest.raises(RoomRefused, match="3 rooms were started from this address"):
        store.create_room(1, {}, driver="d", client="192.168.1.7")
    store.create_room(1, {}, driver="d", client="192.168.1.8")
    store.create_room(1, {}, driver="d", client="192.168.1.9")
    with pytest.raises(RoomRefused, match="keeps 5 rooms in use now"):
        store.create_room(1, {}, driver="d", client="192.168.1.10")
    assert all(store.room(c) is not None for c in mine)
    aged(tmp_path, mine[0], LIVE_S + 1)  # left for hours: it counts no more
    store.files.index.rescan()
    store.create_room(1, {}, driver="d", client="192.168.1.7")
    assert all("192.168.1" not in p.read_text() for p in tmp_path.glob("room-*.json"))  # a digest, not the address


def test_writes_read_the_index_not_the_folder(tmp_path, monkeypatch):
    """The bound used to list and stat every file of the folder at each write (writes slowed from ~7/s to ~2/s as
    it filled with 5,000 files): now the folder is listed when the store starts and once a minute at most."""
    store = RoomStore(tmp_path, max_files=50)
    listed = []
    real = pathlib.Path.iterdir
    monkeypatch.setattr(pathlib.Path, "iterdir", lambda self: listed.append(self) or real(self))
    for i in range(200):
        store.put_link({"q": f"question {i}"})
    store.create_room(1, {}, driver="d")
    assert listed == [] and len(list(real(tmp_path))) == 50
    monkeypatch.setattr(room_index, "RESCAN_S", 0.0)  # a minute later: one listing, for what other replicas did
    store.put_link({"q": "one more"})
    assert len(listed) == 2  # the folder, and its temporaries' clean-up


def test_replicas_sharing_the_folder_keep_each_others_live_rooms(tmp_path):
    a, b = RoomStore(tmp_path, max_files=10), RoomStore(tmp_path, max_files=10)
    theirs, _, _ = b.create_room(2, {}, driver="b")  # a room replica A's index does not know
    for i in range(30):
        a.put_link({"q": f"question {i}"})
    assert a.room(theirs)["stage"] == 2
    aged(tmp_path, theirs, LIVE_S + 60)  # A lists the folder and sees it as left for hours ...
    a.files.index.rescan()
    b.room(theirs, seen=True)  # ... while a follower on replica B polls it: its file is touched now
    for i in range(30, 40):
        a.put_link({"q": f"question {i}"})  # A stats the file before removing it and keeps it
    assert a.room(theirs)["stage"] == 2
    assert len(list(tmp_path.glob("*.json"))) == 10
