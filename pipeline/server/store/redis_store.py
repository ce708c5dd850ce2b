"""Finished work kept in Redis, so replicas on several machines share it (`TPE_STORE=redis://...`).

The same job as `DiskStore` (get / put by key, a miss is never an error), for a room bigger than one
machine. Each value is this program's own pickle, compressed with zlib, behind a header that names
the store's FORMAT (the disk store's number: one to bump when the stored classes change shape), so a
value from an older version, a damaged one or a foreign one is a miss (and is deleted), never an
error. The bound is Redis's own: `maxmemory` with `allkeys-lru`, set by `./run.sh room-store`; a
value larger than `max_value_bytes` (compressed) is not sent and stays in this replica's memory
(`kept_local` says why, for the page to say so).

Redis down (stopped, unreachable, a wrong password): a connection gives up after 0.5 s, a call on an
open one after 5 s (a 25 MB run written to a Redis starved of CPU took over 0.5 s: a shorter limit said
"unavailable" of a Redis that was only slow), and the store is then skipped for a backoff (0.5 s
doubling to 30 s) so a page never hangs on it; `problem` says so. What is put meanwhile is kept
(compressed, 256 MB at most, oldest first out) and written by a background thread as soon as Redis
answers again (or by the next call that finds it back).

A Redis that restarted may have lost what it had acknowledged (killed between two snapshots, or a room
store older than its append-only file). Each new connection reads Redis's run_id; when it differs from
the one this replica knew, Redis has restarted, and a background thread sends again every value this
replica's memory holds (`attach_memory`: the RunStore in front of it) that Redis no longer has (EXISTS,
a few hundred keys a round trip). A replica whose pages are all served from memory may not call Redis for
minutes: once memory is attached, a watcher pings it every WATCH_S, so a restart is noticed within that.
Only a restart triggers this, not every failure: keys Redis evicted under its maxmemory are meant to be
gone, and a network failure loses nothing.
Values are unpickled, so Redis must be the room's own: a private address and a password per room.
"""
from __future__ import annotations

import hashlib
import logging
import pickle
import threading
import time
import weakref
import zlib
from collections import OrderedDict
from typing import Callable, Hashable
from urllib.parse import urlsplit

from pipeline.server.store import moved_classes
from pipeline.server.store.disk import FORMAT

MAGIC = b"TPE\x00"
HEADER = MAGIC + FORMAT.to_bytes(2, "big")
MAX_VALUE_BYTES = 64 * 2**20  # a run's pickle compresses ~3-5x; a 4k-token prompt's captures stay local
PENDING_MAX_BYTES = 256 * 2**20  # what waits in memory for Redis to return
BACKOFF_S = (0.5, 30.0)  # first wait after a failure, longest wait
WATCH_S = 5.0  # how often a store with memory attached asks Redis whether it is there (and the same one)
log = logging.getLogger("pipeline.server.store.redis_store")


class Down(Exception):
    """Redis did not answer (or is being skipped during its backoff): both Redis stores (runs, rooms) raise it
    inside, and answer their callers without it."""


class Backoff:
    """A Redis that did not answer is skipped for a while: 0.5 s after a failure, doubling to 30 s, back to 0.5 s once
    it answers. `problem` says so in words while it lasts (None: Redis answers)."""

    def __init__(self, what: str, log_as: logging.Logger):
        self.what, self.log = what, log_as  # what: 'the shared store (Redis at 10.0.0.1:6390)'
        self.problem: str | None = None
        self.skip_until, self._wait = 0.0, BACKOFF_S[0]
        self._lock = threading.Lock()

    def skipping(self) -> bool:
        return time.monotonic() < self.skip_until

    def failed(self, e: Exception) -> None:
        with self._lock:
            self.skip_until = time.monotonic() + self._wait
            self._wait = min(self._wait * 2, BACKOFF_S[1])
            if self.problem is None:
                self.log.warning("%s unavailable: %s", self.what, e)
            self.problem = f"{self.what} is unavailable"

    def answered(self) -> bool:
        """Redis answered: True when that ends an outage."""
        if self.problem is None:
            return False
        with self._lock:
            back, self.problem, self._wait = self.problem is not None, None, BACKOFF_S[0]
        return back


def encode(obj) -> bytes:
    return HEADER + zlib.compress(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), 6)


def decode(raw: bytes):
    """The stored object; ValueError for a value that is not this version's own (old, damaged, foreign)."""
    if not raw.startswith(HEADER):
        raise ValueError("not a value of this store's format")
    try:
        return moved_classes.loads(zlib.decompress(raw[len(HEADER):]))
    except Exception as e:  # zlib.error, UnpicklingError, EOFError, AttributeError of a moved class...
        raise ValueError(f"damaged value ({type(e).__name__})") from e


def connect(url: str, timeout_s: float = 5.0, connect_timeout_s: float = 0.5, on_connect=None):
    """A redis-py client that gives up fast and never retries on its own (the caller's backoff decides):
    a connection after connect_timeout_s, a call on an open one after timeout_s. on_connect(connection): called for
    every new connection instead of redis-py's own set-up (which it must then do: connection.on_connect())."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=min(connect_timeout_s, timeout_s),
                                retry=Retry(NoBackoff(), 0), retry_on_timeout=False, health_check_interval=0,
                                redis_connect_func=on_connect)


def unanswered_errors() -> tuple[type[Exception], ...]:
    """What a Redis that does not answer raises (not imported before a store asks for Redis)."""
    import redis

    return (redis.ConnectionError, redis.TimeoutError, OSError)


def address_of(url: str) -> str:
    """'redis://:secret@10.0.0.2:6390/0' -> '10.0.0.2:6390' (what a page may show: never the password)."""
    parts = urlsplit(url)
    return f"{parts.hostname or 'localhost'}:{parts.port or 6379}" if parts.scheme != "unix" else parts.path


class RedisStore:
    def __init__(self, url: str, prefix: str = "runs", max_value_bytes: int | None = None,
                 timeout_s: float = 5.0, connect_timeout_s: float = 0.5,
                 shares: Callable[[Hashable], bool] = lambda key: True,
                 pending_max_bytes: int = PENDING_MAX_BYTES, watch_s: float = WATCH_S):
        import redis

        self.client = connect(url, timeout_s, connect_timeout_s, on_connect=self._connected)
        self._errors = unanswered_errors()
        self._response_error = redis.ResponseError
        self.where = address_of(url)
        self.prefix, self.shares = prefix, shares
        self.max_value_bytes = MAX_VALUE_BYTES if max_value_bytes is None else max_value_bytes
        self.pending_max_bytes, self.watch_s = pending_max_bytes, watch_s
        self.backoff = Backoff(f"the shared store (Redis at {self.where})", log)
        self._lock = threading.Lock()
        self._pending: OrderedDict[str, bytes] = OrderedDict()  # written once Redis is back
        self._pending_bytes = 0
        self._local: OrderedDict[str, str] = OrderedDict()  # keys kept here only -> why (the newest 10,000)
        self._retrying: threading.Thread | None = None
        self._held: Callable[[], list[tuple[Hashable, object]]] = list  # what this replica's memory holds
        self._new_connection = False  # a connection was (re)made: read run_id at the next call
        self._run_id: str | None = None  # the Redis this replica last talked to
        self._resend_owed = False  # a resend was cut short by a failure: do it when Redis is back
        self._resending: threading.Thread | None = None
        self._resent = threading.Condition(self._lock)
        self.resends = 0  # passes that sent this replica's values again (after restarts of Redis) finished so far

    @property
    def problem(self) -> str | None:
        """Why the shared store is not being used now, in words (None: it is)."""
        return self.backoff.problem

    def redis_key(self, key: Hashable) -> str:
        digest = hashlib.sha256(f"{FORMAT}|{key!r}".encode("utf-8", "surrogatepass")).hexdigest()[:40]
        return f"tpe:{self.prefix}:{FORMAT}:{digest}"

    def attach_memory(self, held: Callable[[], list[tuple[Hashable, object]]]) -> None:
        """held(): the (key, value) pairs this replica holds in memory (RunStore.items), sent again to a Redis
        that restarted without them. Starts the watcher that notices a restart when nobody calls."""
        self._held = held
        threading.Thread(target=_watch, args=(weakref.ref(self),), daemon=True, name="redis-store-watch").start()

    # -- talking to Redis, or not ------------------------------------------------------------------------
    def _connected(self, connection) -> None:
        """redis-py's hook for every new connection (the first, and each one after a failure or a restart)."""
        connection.on_connect()  # what redis-py does without a hook: AUTH, SELECT
        self._new_connection = True

    def _call(self, fn):
        """fn()'s answer; Down when Redis is skipped (backoff) or does not answer (then the backoff starts)."""
        if self.backoff.skipping():
            raise Down
        try:
            answer = fn()
        except self._errors as e:
            self.backoff.failed(e)
            raise Down from e
        if self.backoff.answered():
            with self._lock:
                self._new_connection = True  # back: the same Redis? (and a resend cut short goes on)
            log.warning("shared store at %s is back; writing %d waiting value(s)", self.where, len(self._pending))
        if self._new_connection:
            self._check_restart()
        if self._pending:
            self._flush()
        return answer

    def _check_restart(self) -> None:
        """After a new connection: Redis's run_id; a different one than before means it restarted (and may have
        lost values): send again what this replica holds."""
        self._new_connection = False
        try:
            run_id = self.client.info("server")["run_id"]
        except self._errors:
            with self._lock:  # read it at the next call that gets an answer
                self._new_connection = True
                if self._run_id is None:  # what was written went to a Redis never identified: whether the next
                    self._resend_owed = True  # one is the same cannot be told, so check what it has (EXISTS)
            return
        with self._lock:
            before, self._run_id = self._run_id, run_id
            restarted = before is not None and before != run_id
            owed, self._resend_owed = self._resend_owed, False
        if restarted or owed:
            if restarted:
                log.warning("shared store at %s restarted; sending again what it lost", self.where)
            self._start_resend()

    def _start_resend(self) -> None:
        with self._lock:
            if self._resending is not None:
                self._resend_owed = True  # one is running: another after it sees what it missed
                return
            self._resending = threading.Thread(target=self._resend_lost, daemon=True, name="redis-store-resend")
            self._resending.start()

    def _resend_lost(self) -> None:
        """Background: every value this replica holds that Redis does not have is put again."""
        held = [(name, key, value) for key, value in self._held() if self.shares(key)
                for name in [self.redis_key(key)] if name not in self._local]
        sent, complete = 0, True
        for start in range(0, len(held), 256):
            chunk = held[start:start + 256]
            try:
                there = self._call(lambda: self._exist([name for name, _, _ in chunk]))
            except Down:
                complete = False
                break
            for (_, key, value), found in zip(chunk, there):
                if not found:
                    self.put(key, value)  # Redis down meanwhile: it waits with the others (pending)
                    sent += 1
        log.warning("shared store at %s: %d of %d value(s) held here sent again%s", self.where, sent, len(held),
                    "" if complete else "; Redis went away, the rest when it is back")
        with self._lock:
            self._resending = None
            self.resends += 1
            self._resent.notify_all()
            again = complete and self._resend_owed  # Redis restarted again meanwhile
            self._resend_owed = not complete  # cut short: the rest once Redis is back (_check_restart)
        if again:
            self._start_resend()

    def _exist(self, names: list[str]) -> list[bool]:
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.exists(name)
        return [bool(n) for n in pipe.execute()]

    def wait_resent(self, count: int, timeout: float | None = None) -> bool:
        """Block until `count` passes sending this replica's values again (after restarts of Redis) have finished
        (True), or `timeout` seconds have passed (False)."""
        with self._resent:
            return self._resent.wait_for(lambda: self.resends >= count, timeout)

    def _flush(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    return
                name, data = next(iter(self._pending.items()))
            try:
                self.client.set(name, data)
            except self._errors as e:
                self.backoff.failed(e)
                return
            except self._response_error:  # too big for Redis's memory: it stays local
                pass
            with self._lock:
                if self._pending.get(name) is data:
                    del self._pending[name]
                    self._pending_bytes -= len(data)

    def _keep_for_later(self, name: str, data: bytes) -> None:
        with self._lock:
            old = self._pending.pop(name, None)
            self._pending_bytes += len(data) - (len(old) if old is not None else 0)
            self._pending[name] = data
            while self._pending_bytes > self.pending_max_bytes and len(self._pending) > 1:
                _, dropped = self._pending.popitem(last=False)
                self._pending_bytes -= len(dropped)
            if self._retrying is None or not self._retrying.is_alive():
                self._retrying = threading.Thread(target=self._retry_until_written, daemon=True,
                                                  name="redis-store-retry")
                self._retrying.start()

    def _retry_until_written(self) -> None:
        """Background: once Redis answers again, write what waited (nobody may ask meanwhile)."""
        while self._pending:
            time.sleep(max(0.05, self.backoff.skip_until - time.monotonic()))  # the backoff, not synchronisation
            try:
                self._call(lambda: self.client.ping())
            except Down:
                continue

    # -- the store --------------------------------------------------------------------------------------
    def get(self, key: Hashable):
        """The stored object, or None (missing, damaged — then deleted —, or Redis unavailable)."""
        if not self.shares(key):
            return None
        name = self.redis_key(key)
        try:
            raw = self._call(lambda: self.client.get(name))
        except Down:
            raw = self._pending.get(name)
        if raw is None:
            return None
        try:
            return decode(raw)
        except ValueError:
            try:
                self._call(lambda: self.client.delete(name))
            except Down:
                pass
            return None

    def put(self, key: Hashable, obj) -> None:
        if not self.shares(key):
            return
        name, data = self.redis_key(key), encode(obj)
        if len(data) > self.max_value_bytes:
            self._kept_local(name, f"at {len(data) / 2**20:,.1f} MB compressed it is over the shared store's "
                                   f"limit of {self.max_value_bytes / 2**20:,.0f} MB per run")
            return
        try:
            self._call(lambda: self.client.set(name, data))
        except Down:
            self._keep_for_later(name, data)
        except self._response_error as e:  # OOM: larger than Redis's whole maxmemory
            self._kept_local(name, f"Redis refused it ({str(e)[:80]})")

    def _kept_local(self, name: str, why: str) -> None:
        with self._lock:
            self._local[name] = why
            self._local.move_to_end(name)
            while len(self._local) > 10_000:
                self._local.popitem(last=False)

    def kept_local(self, key: Hashable) -> str | None:
        """Why the value of `key` is kept on this replica only (too large for the shared store), or None."""
        return self._local.get(self.redis_key(key))

    @property
    def waiting(self) -> int:
        """Values computed while Redis was unavailable, not written yet."""
        return len(self._pending)

    @property
    def bytes_held(self) -> int:
        """Bytes Redis uses (its INFO's used_memory), 0 when it does not answer."""
        try:
            return int(self._call(lambda: self.client.info("memory"))["used_memory"])
        except Down:
            return 0


def _watch(store_ref: "weakref.ref[RedisStore]") -> None:
    """Background, for as long as the store exists: ping Redis every watch_s (a new connection after a restart
    reads its run_id: RedisStore._check_restart). During a backoff the ping is skipped."""
    while True:
        store = store_ref()
        if store is None:
            return
        wait = store.watch_s
        try:
            store._call(store.client.ping)
        except Down:
            pass
        del store  # not kept alive by its own watcher while it sleeps
        time.sleep(wait)
