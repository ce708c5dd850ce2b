"""Rooms, short links and polls in the room's Redis (pipeline/server/store/redis_rooms.py), as the replicas of
several hosts share them: each "host" here is a RoomStore on a folder of its own, so only a real redis-server joins
them. Which rooms are kept, the bounds per client and in all, a room's lifetime renewed by its pages, and Redis
going away. (The calls both backends answer alike run on both: tests/room/test_room.py and
tests/pipeline/server/polls/.)"""
import time

import pytest
from kit.redis_server import needs_redis

from pipeline.server.polls.store import PollStore
from pipeline.server.room import RoomRefused, RoomStore
from pipeline.server.room_index import LIVE_S
from pipeline.server.store.redis_rooms import KEEP_S, PREFIX, RedisRoomFiles

pytestmark = needs_redis
QUERY = {"q": "Are tomatoes fruit?"}


def host(server, folder, **bounds) -> RoomStore:
    """One host's replica: its own folder (never written: a room goes to Redis), the room's Redis."""
    return RoomStore(folder, files=RedisRoomFiles(server.url, max_links=bounds.pop("max_links", 5000)), **bounds)


def last_seen(server, code: str, seconds_ago: float) -> None:
    """The room as if its pages last asked `seconds_ago` (its scores in the live sets)."""
    client, name, then = server.client(), f"room-{code}.json", time.time() - seconds_ago
    for key in client.scan_iter(PREFIX + "client:*"):
        if client.zscore(key, name) is not None:
            client.zadd(key, {name: then})
    client.zadd(PREFIX + "live", {name: then})


def test_a_room_started_on_one_host_is_followed_driven_and_polled_on_another(redis_server, tmp_path):
    a, b = host(redis_server, tmp_path / "a"), host(redis_server, tmp_path / "b")
    code, key, saved = a.create_room(3, QUERY, driver="presenter")
    assert saved and b.room(code, seen=True)["stage"] == 3  # a learner whose balancer chose host B follows
    assert b.set_stage(code, key, 4, QUERY, driver="presenter")  # the presenter's reload landed on B: still drives
    assert a.room(code)["stage"] == 4
    with pytest.raises(PermissionError):
        b.set_stage(code, "0" * 32, 9, QUERY, driver="learner")
    poll = PollStore(a).open_poll(code, key, "tokens", "How many?", QUERY, real={"count": 5, "answer": "5"})
    PollStore(b).answer(code, poll.id, "learner-on-b", "6")
    assert PollStore(a).reveal(code, key, poll.id).revealed_answers == ["6"]
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()  # nothing in either host's folder


def test_a_flood_of_links_leaves_the_live_room_and_links_stay_bounded(redis_server, tmp_path):
    a, b = host(redis_server, tmp_path / "a", max_links=20), host(redis_server, tmp_path / "b", max_links=20)
    code, key, _ = a.create_room(3, QUERY, driver="presenter")
    last_seen(redis_server, code, LIVE_S / 2)  # resting on one stage: the oldest thing stored
    codes = [(a if i % 2 else b).put_link({"q": f"question {i}"}) for i in range(200)]
    assert redis_server.client().zcard(PREFIX + "links") == 20
    assert len(list(redis_server.client().scan_iter(PREFIX + "f:link-*"))) == 20
    assert a.link(codes[0]) is None and b.link(codes[-1]) == {"q": "question 199"}  # the oldest written went
    assert b.room(code)["stage"] == 3 and b.set_stage(code, key, 4, QUERY, driver="presenter")


def test_rooms_are_bounded_per_client_and_in_all_across_hosts(redis_server, tmp_path):
    a = host(redis_server, tmp_path / "a", per_client=2, max_rooms=4)
    b = host(redis_server, tmp_path / "b", per_client=2, max_rooms=4)
    mine = [a.create_room(1, {}, driver="d", client="192.168.1.7")[0], b.create_room(1, {}, driver="d",
                                                                                      client="192.168.1.7")[0]]
    with pytest.raises(RoomRefused, match="2 rooms were started from this address"):
        a.create_room(1, {}, driver="d", client="192.168.1.7")  # counted across hosts
    a.create_room(1, {}, driver="d", client="192.168.1.8")
    b.create_room(1, {}, driver="d", client="192.168.1.9")
    with pytest.raises(RoomRefused, match="keeps 4 rooms in use now"):
        b.create_room(1, {}, driver="d", client="192.168.1.10")
    last_seen(redis_server, mine[0], LIVE_S + 1)  # left for hours: it counts no more
    a.create_room(1, {}, driver="d", client="192.168.1.7")
    assert b.room(mine[0]) is not None  # not live is not removed: it stays until its lifetime ends
    assert all("192.168.1" not in text for text in _strings(redis_server))  # a digest, not the address


def _strings(server) -> list[str]:
    client = server.client()
    return [k.decode() for k in client.scan_iter()] + [
        client.get(k).decode() for k in client.scan_iter(PREFIX + "f:*")]


def test_a_rooms_pages_renew_its_lifetime_and_its_polls_and_a_room_gone_is_gone_on_every_host(redis_server, tmp_path):
    a, b = host(redis_server, tmp_path / "a"), host(redis_server, tmp_path / "b")
    code, key, _ = a.create_room(2, QUERY, driver="presenter")
    poll = PollStore(a).open_poll(code, key, "tokens", "", QUERY)
    PollStore(b).answer(code, poll.id, "s", "3")
    client = redis_server.client()
    keys = [PREFIX + f"f:room-{code}.json", PREFIX + f"d:polls-{code}", PREFIX + f"d:polls-{code}/answers-{poll.id}"]
    for k in keys:
        client.expire(k, 100)  # as if days had passed since the room was last seen
    client.zadd(PREFIX + "folders", {f"polls-{code}": time.time() - KEEP_S + 100})
    b.room(code, seen=True)  # a follower's page asks (on another host)
    assert all(KEEP_S - 60 < client.ttl(k) <= KEEP_S for k in keys)
    assert client.zscore(PREFIX + "folders", f"polls-{code}") > time.time() - 60  # still found for "My session"
    a.room(code)  # a read that is not a page of the room does not renew it
    client.delete(PREFIX + f"f:room-{code}.json")  # its lifetime ended (or Redis's memory bound evicted it)
    assert a.room(code) is None and b.room(code, seen=True) is None  # its followers are told (the pages say so)
    assert not client.exists(PREFIX + f"f:room-{code}.json")  # a page's ask does not bring it back


def test_redis_away_is_not_a_room_gone_the_presenter_keeps_driving_and_followers_following(redis_server, tmp_path):
    a, b = host(redis_server, tmp_path / "a"), host(redis_server, tmp_path / "b")
    code, key, _ = a.create_room(1, QUERY, driver="presenter")
    assert b.room(code, seen=True)["stage"] == 1  # host B has served the room's pages
    redis_server.stop()
    started = time.monotonic()
    assert b.room(code, seen=True)["stage"] == 1 and b.may_drive(code, key)  # the last copy, not "ended"
    assert time.monotonic() - started < 2 and "unavailable" in b.files.problem
    assert b.set_stage(code, key, 2, QUERY, driver="presenter") is False  # kept in B's memory, and said so
    assert b.room(code)["stage"] == 2 and b.room(code)["saved"] is False
    assert PollStore(b).current(code) is None  # no poll shown for the moment, no error
    with pytest.raises(OSError):  # the presenter's screen says why the poll did not open
        PollStore(b).open_poll(code, key, "tokens", "", QUERY)
    fresh, fresh_key, saved = a.create_room(5, QUERY, driver="presenter")
    assert not saved and a.room(fresh)["saved"] is False and a.room(fresh)["stage"] == 5  # this replica's memory
    redis_server.start()  # back (empty: this test's Redis keeps nothing on disk)
    a.files.backoff.skip_until = b.files.backoff.skip_until = 0.0  # the backoff's wait, not what is tested
    assert b.set_stage(code, key, 3, QUERY, driver="presenter") and b.files.problem is None
    assert a.room(code)["stage"] == 3  # the next move went back to Redis: every host sees it again


def test_a_flood_of_long_links_is_bounded_in_bytes(redis_server, tmp_path):
    files = RedisRoomFiles(redis_server.url, max_links=10_000, max_link_bytes=200_000)
    a = RoomStore(tmp_path / "a", files=files)
    codes = [a.put_link({"q": f"{i} " + "토" * 10_000}) for i in range(40)]  # ~30 KB each
    client = redis_server.client()
    stored = sum(client.strlen(k) for k in client.scan_iter(PREFIX + "f:link-*"))
    assert stored <= 200_000 and int(client.get(PREFIX + "links_total")) == stored
    assert a.link(codes[0]) is None and a.link(codes[-1]) is not None


def test_a_redis_that_refuses_writes_is_a_store_away_not_an_error(redis_server, tmp_path):
    a = host(redis_server, tmp_path / "a")
    code, key, _ = a.create_room(1, QUERY, driver="presenter")
    client = redis_server.client()
    client.config_set("maxmemory-policy", "noeviction")
    client.set("ballast", b"x" * 2_000_000)
    client.config_set("maxmemory", "1mb")  # full: every write is refused (OOM), as when Redis cannot save
    assert a.set_stage(code, key, 2, QUERY, driver="presenter") is False and a.room(code)["stage"] == 2
    assert a.put_link({"q": "refused"}) is not None and "unavailable" in a.files.problem
