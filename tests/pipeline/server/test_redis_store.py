"""The Redis store (pipeline/server/store/redis_store.py) against a real redis-server on a free port of 127.0.0.1,
with a password, as `./run.sh room-store` starts it: put/get across two clients (two replicas), compression, damaged
and foreign values are misses, eviction under maxmemory (allkeys-lru), a value too large stays local, and
Redis going down and coming back."""
import os
import pickle
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from kit.redis_server import PASSWORD, REDIS, Server, answers_ping, needs_redis

from pipeline.server.health import free_port
from pipeline.server.store.memory import RunStore
from pipeline.server.store.redis_store import HEADER, RedisStore, address_of, decode, encode

pytestmark = needs_redis


@pytest.fixture
def server(redis_server):
    return redis_server


def test_put_on_one_replica_is_found_by_another_and_values_are_compressed(server):
    a, b = RedisStore(server.url), RedisStore(server.url)  # two replicas, one Redis
    run = {"ids": np.zeros(200_000, dtype=np.float32), "text": "Are tomatoes fruit?"}
    a.put(("q", 1), run)
    got = b.get(("q", 1))
    assert got["text"] == run["text"] and np.array_equal(got["ids"], run["ids"])
    assert b.get(("q", 2)) is None and b.problem is None
    stored = server.client().strlen(a.redis_key(("q", 1)))
    assert stored < len(pickle.dumps(run)) / 20  # 800 kB of zeros, zlib'd
    assert a.redis_key(("q", 1)) != RedisStore(server.url, prefix="results").redis_key(("q", 1))


def test_damaged_old_and_foreign_values_are_misses_and_are_deleted(server):
    store, raw = RedisStore(server.url), server.client()
    for n, value in enumerate([b"not ours at all", HEADER + b"\x78\x9c garbage", encode([1, 2, 3])[:-4],
                               b"TPE\x00\x00\x01" + encode([1])[len(HEADER):]]):  # the last: an older FORMAT
        raw.set(store.redis_key(n), value)
        assert store.get(n) is None
        assert not raw.exists(store.redis_key(n))
    with pytest.raises(ValueError):
        decode(b"junk")


def test_wrong_password_is_unavailable_not_an_error(server):
    store = RedisStore(server.url.replace(PASSWORD, "guess"))
    assert store.get("k") is None
    store.put("k", [1])
    assert store.waiting == 1 and not server.client().exists(store.redis_key("k"))
    assert store.problem and "unavailable" in store.problem and "guess" not in store.problem
    assert address_of(server.url) == f"127.0.0.1:{server.port}" and PASSWORD not in store.problem


def test_a_value_over_the_limit_stays_local_and_the_store_says_why(server):
    store = RedisStore(server.url, max_value_bytes=10_000)
    big = os.urandom(50_000)  # random bytes do not compress
    store.put("big", big)
    assert not server.client().exists(store.redis_key("big"))
    assert "over the shared store's limit" in store.kept_local("big")
    store.put("small", b"x")
    assert store.kept_local("small") is None and store.get("small") == b"x"
    runs = RunStore(size_of=len, disk=store)  # the run itself is still served from memory
    runs.put("big", big)
    assert runs.peek("big", disk=True) == big


def test_redis_evicts_least_recently_used_under_its_maxmemory(tmp_path):
    server = Server(tmp_path, maxmemory="4mb")
    server.start()
    try:
        store = RedisStore(server.url)
        for n in range(30):  # 30 x 300 kB incompressible: far over 4 MB
            store.put(n, os.urandom(300_000))
        raw = server.client()
        held = [n for n in range(30) if raw.exists(store.redis_key(n))]
        assert 0 < len(held) < 30 and 29 in held and 0 not in held
        assert raw.info("memory")["used_memory"] <= 4 * 2**20 + 2**20
        assert store.problem is None
    finally:
        server.stop()


def test_redis_down_serves_nothing_quickly_keeps_what_is_put_and_writes_it_when_back(server):
    store = RedisStore(server.url, timeout_s=0.3)
    store.put("before", [0])
    server.stop()
    assert store.get("before") is None  # a miss, not an error
    assert "unavailable" in store.problem
    store.put("meanwhile", [1, 2])
    assert store.waiting == 1 and store.get("meanwhile") == [1, 2]  # kept here, still served
    server.start()
    deadline = time.monotonic() + 60
    while store.waiting and time.monotonic() < deadline:  # the background retry writes it after its backoff
        time.sleep(0.1)
    assert store.waiting == 0 and store.problem is None
    assert decode(server.client().get(store.redis_key("meanwhile"))) == [1, 2]
    assert RedisStore(server.url).get("meanwhile") == [1, 2]  # another replica finds it


def test_a_redis_that_accepts_but_never_answers_times_out_and_is_skipped(tmp_path):
    with socket.socket() as silent:  # accepts connections (the kernel's backlog), never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        store = RedisStore(f"redis://:x@127.0.0.1:{silent.getsockname()[1]}/0", timeout_s=0.2)
        assert store.get("k") is None and store.problem
        store.put("k", [1])  # during the backoff: kept, not sent
        assert store.waiting == 1 and store.get("k") == [1]


def test_pages_say_when_the_shared_store_is_unavailable_or_a_run_stays_local(tiny_app, server, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from views.server.state import model_handle, result_store, run_queue, run_store
    from views.server.warm_up import warm_up

    def page(store_url: str, **env):
        monkeypatch.setenv("TPE_STORE", store_url)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        for resource in (model_handle, run_store, result_store, run_queue, warm_up):
            resource.clear()
        at = AppTest.from_file(str(Path(__file__).parents[3] / "views" / "pages" / "tokens.py"), default_timeout=300)
        at.session_state["req_max_new_tokens"] = 2
        at.run()
        assert not at.exception, at.exception
        return " ".join(c.value for c in at.caption)

    try:
        closed = f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0"
        said = page(closed)
        assert "unavailable" in said and f"127.0.0.1:{closed.rsplit(':', 1)[1][:-2]}" in said and PASSWORD not in said
        assert run_store().disk.waiting == 1  # the run, kept for when it answers
        said = page(server.url, TPE_STORE_MAX_RUN_MB="0.001")
        assert "kept on this server only" in said and "unavailable" not in said
        assert not server.client().keys("tpe:runs:*")
    finally:
        for resource in (model_handle, run_store, result_store, run_queue, warm_up):
            resource.clear()


def test_tpe_store_picks_the_store_and_only_scenarios_of_the_other_results_are_shared(server, tmp_path, monkeypatch):
    """The keys are the ones the pages make (views.server.waiting.model_result_key: model, weights, then the
    result's own key): a hand-written key without the weights once hid that no scenario reached the shared store."""
    from pipeline.core.errors import InputError
    from pipeline.server.store.disk import DiskStore
    from pipeline.server.store.shared import results_store, runs_store
    from views.server.scenarios import scenario_key
    from views.server.state import is_scenario_key
    from views.server.waiting import model_result_key

    scenario, branch = model_result_key(scenario_key("conversation")), model_result_key(("branch", "k", (1,)))
    monkeypatch.delenv("TPE_STORE", raising=False)
    assert isinstance(runs_store(tmp_path), DiskStore)
    on_disk = RunStore(size_of=len, disk=results_store(is_scenario_key, tmp_path / "results"))
    assert isinstance(on_disk.disk, DiskStore)
    on_disk.put(scenario, [{"hit": 3}])
    on_disk.put(branch, [{"trace": 1}])
    restarted = results_store(is_scenario_key, tmp_path / "results")  # a restarted server, or a replica on the folder
    assert restarted.get(scenario) == [{"hit": 3}] and restarted.get(branch) is None
    assert len(list((tmp_path / "results").iterdir())) == 1
    monkeypatch.setenv("TPE_STORE", "http://10.0.0.1:6390")
    with pytest.raises(InputError, match="TPE_STORE"):
        runs_store(tmp_path)
    monkeypatch.setenv("TPE_STORE", server.url)
    assert isinstance(runs_store(tmp_path), RedisStore)
    results = RunStore(size_of=len, disk=results_store(is_scenario_key, tmp_path / "unused"))
    results.put(scenario, [{"hit": 3}])
    results.put(branch, [{"trace": 1}])
    assert results_store(is_scenario_key, tmp_path / "unused").get(scenario) == [{"hit": 3}]  # another host finds it
    assert server.client().keys("tpe:results:*") == [results.disk.redis_key(scenario).encode()]


# ---- Redis killed: the replicas send again what it lost; the room's Redis keeps what it acknowledged -------
def test_a_replica_sends_its_runs_again_to_a_redis_that_restarted_without_them(server):
    """kill -9 of the room's Redis lost runs that every replica had been told were shared. The replicas still
    hold them in memory: each notices the restart (Redis's run_id, read on its next new connection) and sends
    again what Redis no longer has; what Redis has (another replica's) is not sent over it."""
    store = RedisStore(server.url, watch_s=3600)  # no watcher ping during the test: its own call notices
    runs = RunStore(size_of=len, disk=store)
    for n in range(4):
        runs.put(("q", n), f"run {n} ".encode() * 5000)
    assert all(server.client().exists(store.redis_key(("q", n))) for n in range(4))
    server.kill()
    server.start()  # same port, empty: as a Redis killed between two snapshots, without an append-only file
    server.client().set(store.redis_key(("q", 0)), encode(b"written by another replica"))
    assert store.get(("q", "never asked")) is None  # any call: a new connection, a new run_id
    assert store.wait_resent(1, timeout=60)  # a signal from the replica's resend, not a guess of time
    other = RedisStore(server.url)  # another replica finds every run again
    assert [other.get(("q", n)) for n in range(1, 4)] == [f"run {n} ".encode() * 5000 for n in range(1, 4)]
    assert other.get(("q", 0)) == b"written by another replica"  # it had it: not sent again
    assert store.problem is None and store.waiting == 0


def test_an_idle_replica_notices_the_restart_by_its_watcher(server):
    """A replica whose learners are all served from memory makes no call: its watcher's ping does."""
    store = RedisStore(server.url, watch_s=0.05)
    runs = RunStore(size_of=len, disk=store)
    runs.put("kept", b"a run")
    server.kill()
    server.start()
    assert store.wait_resent(1, timeout=60), state_of(store, server)
    assert RedisStore(server.url).get("kept") == b"a run"


def state_of(store: RedisStore, server: Server) -> str:
    """What a failed wait saw (it failed once in a whole-suite run, never alone): the store's view, whether the
    server is ours and alive, and whether a fresh client with our password gets an answer from that port."""
    import redis

    try:
        fresh = str(server.client().ping())
    except redis.RedisError as e:
        fresh = f"{type(e).__name__}: {e}"
    return (f"problem={store.problem!r}, skipped for {store.backoff.skip_until - time.monotonic():.1f} s more, "
            f"resends={store.resends}, server pid {server.proc.pid} exit code {server.proc.poll()}, "
            f"a fresh client's ping: {fresh}")


def room_store(tmp_path, port: int) -> subprocess.Popen:
    """`./run.sh room-store 127.0.0.1 PORT` with its folder in tmp_path (redis.conf, password, store.url, data);
    the process is redis-server itself (run.sh execs it)."""
    env = {**os.environ, "ROOM_STORE_DIR": str(tmp_path / "room-store")}
    proc = subprocess.Popen(["bash", "run.sh", "room-store", "127.0.0.1", str(port)], cwd=Path(__file__).parents[3],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while not answers_ping(port):
        assert proc.poll() is None and time.monotonic() < deadline, "room-store did not start"
        time.sleep(0.05)  # waiting for the server's port, bounded
    return proc


def test_the_room_store_keeps_every_acknowledged_write_through_a_kill_9(tmp_path):
    port = free_port()
    proc = room_store(tmp_path, port)
    try:
        conf = (tmp_path / "room-store" / "redis.conf").read_text().splitlines()
        assert "appendonly yes" in conf and "appendfsync everysec" in conf
        url = (tmp_path / "room-store" / "store.url").read_text().strip()
        store = RedisStore(url)
        runs = {n: os.urandom(50_000) for n in range(20)}
        for n, run in runs.items():
            store.put(n, run)  # each one acknowledged by Redis before the next
        assert store.problem is None and store.waiting == 0
        proc.kill()  # kill -9 right after the last acknowledgement
        proc.wait(timeout=20)
        proc = room_store(tmp_path, port)
        again = RedisStore(url)
        assert all(again.get(n) == run for n, run in runs.items())
    finally:
        proc.kill()
        proc.wait(timeout=20)


def test_a_room_store_from_before_the_append_only_file_keeps_its_snapshot(tmp_path):
    """Redis started with appendonly yes on a folder that has only a snapshot begins empty (it reads the
    append-only file, not there yet): room-store writes the snapshot into one first."""
    folder, port = tmp_path / "room-store", free_port()
    folder.mkdir()
    key = RedisStore(f"redis://127.0.0.1:{port}/0").redis_key(("q", "old"))
    old = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder), "--dbfilename",
                            "runs.rdb", "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while not answers_ping(port):
            assert old.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)  # waiting for the server's port, bounded
        import redis

        raw = redis.Redis(port=port)
        raw.set(key, encode(b"an old run"))
        raw.save()  # the snapshot runs.rdb, as `save 300 1` wrote it
    finally:
        old.kill()
        old.wait(timeout=20)
    proc = room_store(tmp_path, port)
    try:
        url = (folder / "store.url").read_text().strip()
        assert RedisStore(url).get(("q", "old")) == b"an old run" and (folder / "appendonlydir").is_dir()
        proc.kill()
        proc.wait(timeout=20)
        proc = room_store(tmp_path, port)  # from the append-only file now
        assert RedisStore(url).get(("q", "old")) == b"an old run"
    finally:
        proc.kill()
        proc.wait(timeout=20)
