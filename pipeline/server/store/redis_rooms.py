"""A room's files in the room's Redis (`TPE_STORE=redis://...`): the rooms, short links and polls every host's
replicas share, as `DiskRoomFiles` keeps them in one folder for the replicas of one machine
(pipeline/server/room_files.py has the calls both answer).

Keys, all under `tpe:room:`:
- `f:NAME`: a top-level file (`link-CODE.json`, `room-CODE.json`), its JSON as a string;
- `d:FOLDER`: a hash of the files directly in FOLDER (`d:polls-CODE` holds `current.json` and `poll-ID.json`,
  `d:polls-CODE/answers-ID` one field per learner session), so listing or counting a folder is one call;
- `sub:TOP`: the `d:` keys under a top-level folder; `folders`: the top-level folders, scored by their last write;
- `live`, `client:WHO`: the rooms, scored by when they were last seen (all, and per starting client's digest);
- `links`: the short links, scored by when they were written; `link_bytes` their sizes, `links_total` their sum.

How long: a room and its polls stay KEEP_S after the room was last seen (each touch — a page of the room asking,
at most once a minute per replica — renews them); a link LINK_KEEP_S after it was written. Over `max_links` links,
or past MAX_LINK_BYTES_ALL of links in all, the oldest go. Live rooms are counted from `live` and `client:WHO`
(seen within LIVE_S), as the disk's index counts them, so a new room is refused at the same bounds. Redis's own
`maxmemory` with `allkeys-lru` (`./run.sh room-store`) evicts the least recently used keys first: a live room is read
every few seconds by its pages, so runs (megabytes, asked less often) go long before it.

Redis down (or refusing a write): a call gives up (0.5 s to connect, 5 s on an open connection) and Redis is skipped
for a backoff (0.5 s doubling to 30 s); meanwhile a read raises StoreUnavailable (the room store then answers from the
last copy it read, never "gone"), a write is False (the room store keeps the room in this replica's memory and both
screens say so), a count 0. Each write is one MULTI/EXEC transaction: a field is never written without its lifetime.
"""
from __future__ import annotations

import json
import logging
import time

from pipeline.server.room_files import StoreUnavailable, top_level
from pipeline.server.room_index import LIVE_S
from pipeline.server.store.redis_store import Backoff, Down, address_of, connect, unanswered_errors

PREFIX = "tpe:room:"
KEEP_S = 7 * 24 * 3600  # a room and its polls, after it was last seen: a week's workshop, and its summaries
LINK_KEEP_S = 30 * 24 * 3600  # a short link, after it was made
MAX_LINK_BYTES_ALL = 64 * 2**20  # all short links together (the folder's bound): a flood of long links never
# crowds the room's own keys out of Redis's memory
log = logging.getLogger("pipeline.server.store.redis_rooms")


def polls_folder(room_name: str) -> str:
    """'room-abc123.json' -> 'polls-abc123': the folder of the room's polls, which lives and goes with it."""
    return f"polls-{room_name[len('room-'):-len('.json')]}"


class RedisRoomFiles:
    def __init__(self, url: str, max_links: int, max_link_bytes: int = MAX_LINK_BYTES_ALL, timeout_s: float = 5.0,
                 connect_timeout_s: float = 0.5):
        self.client = connect(url, timeout_s, connect_timeout_s)
        import redis

        self._errors = (*unanswered_errors(), redis.ResponseError)
        self.where = f"Redis at {address_of(url)}"
        self.max_links, self.max_link_bytes = max_links, max_link_bytes
        self.backoff = Backoff(f"the room's shared store ({self.where})", log)

    def _call(self, fn, atomic: bool = False):
        """fn(pipeline)'s answers in one round trip; `atomic`: as one transaction (all of its commands or none: never
        a field written without its lifetime). Down when Redis is skipped, does not answer, or refuses (a write
        past its maxmemory, a disk it cannot save to): then the backoff starts."""
        if self.backoff.skipping():
            raise Down
        try:
            pipe = self.client.pipeline(transaction=atomic)
            fn(pipe)
            answers = pipe.execute()
        except self._errors as e:
            self.backoff.failed(e)
            raise Down from e
        self.backoff.answered()
        return answers

    @property
    def problem(self) -> str | None:
        """Why Redis is not being used now, in words (None: it is)."""
        return self.backoff.problem

    # -- files ------------------------------------------------------------------------------------------
    def read(self, name: str) -> dict | None:
        """The file's data; None when it is missing or not this program's JSON. StoreUnavailable: Redis did not answer
        (the file may well be there)."""
        try:
            if top_level(name):
                raw, = self._call(lambda p: p.get(PREFIX + "f:" + name))
            else:
                folder, leaf = name.rsplit("/", 1)
                raw, = self._call(lambda p: p.hget(PREFIX + "d:" + folder, leaf))
        except Down as e:
            raise StoreUnavailable(self.problem or f"{self.where} is unavailable") from e
        try:
            data = json.loads(raw) if raw is not None else None
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def write(self, name: str, data: dict) -> bool:
        text, now = json.dumps(data, ensure_ascii=False), time.time()
        try:
            if not top_level(name):
                self._call(lambda p: self._write_nested(p, name, text, now), atomic=True)
            elif name.startswith("room-"):
                who = PREFIX + "client:" + str(data.get("client", ""))
                self._call(lambda p: (p.set(PREFIX + "f:" + name, text, ex=KEEP_S),
                                      p.zadd(PREFIX + "live", {name: now}), p.zadd(who, {name: now}),
                                      p.expire(who, KEEP_S)), atomic=True)
            else:
                size = len(text.encode("utf-8", "surrogatepass"))
                _, _, new = self._call(lambda p: (p.set(PREFIX + "f:" + name, text, ex=LINK_KEEP_S),
                                                  p.zadd(PREFIX + "links", {name: now}),
                                                  p.hset(PREFIX + "link_bytes", name, size)), atomic=True)
                if new:  # a link written again (two replicas at once) is counted once
                    self._call(lambda p: p.incrby(PREFIX + "links_total", size))
                self._bound_links()
        except Down:
            return False
        return True

    @staticmethod
    def _write_nested(p, name: str, text: str, now: float) -> None:
        folder, leaf = name.rsplit("/", 1)
        top = name.split("/", 1)[0]
        key = PREFIX + "d:" + folder
        p.hset(key, leaf, text)
        p.expire(key, KEEP_S)
        p.sadd(PREFIX + "sub:" + top, key)
        p.expire(PREFIX + "sub:" + top, KEEP_S)
        p.zadd(PREFIX + "folders", {top: now})

    def _bound_links(self) -> None:
        """Past max_links links or max_link_bytes, the oldest written go."""
        while True:
            count, total = self._call(lambda p: (p.zcard(PREFIX + "links"), p.get(PREFIX + "links_total")))
            over = max(count - self.max_links, 1 if int(total or 0) > self.max_link_bytes and count else 0)
            if over <= 0:
                return
            oldest, = self._call(lambda p: p.zpopmin(PREFIX + "links", over))
            if not oldest:
                return
            names = [n.decode() for n, _ in oldest]
            sizes, = self._call(lambda p: p.hmget(PREFIX + "link_bytes", names))
            freed = sum(int(b or 0) for b in sizes)
            self._call(lambda p: (p.delete(*[PREFIX + "f:" + n for n in names]), p.hdel(PREFIX + "link_bytes", *names),
                                  p.decrby(PREFIX + "links_total", freed)), atomic=True)

    def remove(self, name: str) -> None:
        try:
            if top_level(name):
                self._call(lambda p: (p.delete(PREFIX + "f:" + name), p.zrem(PREFIX + "links", name)))
                # (a link's bytes stay counted until the bound pops its name: remove() is for poll files)
            else:
                folder, leaf = name.rsplit("/", 1)
                self._call(lambda p: p.hdel(PREFIX + "d:" + folder, leaf))
        except Down:
            pass

    def names(self, folder: str) -> list[str]:
        try:
            keys, = self._call(lambda p: p.hkeys(PREFIX + "d:" + folder))
        except Down:
            return []
        return sorted(k.decode() for k in keys if k.endswith(b".json"))

    def folders(self) -> list[str]:
        try:
            _, found = self._call(lambda p: (p.zremrangebyscore(PREFIX + "folders", "-inf", time.time() - KEEP_S),
                                             p.zrange(PREFIX + "folders", 0, -1)))
        except Down:
            return []
        return sorted(f.decode() for f in found)

    # -- rooms --------------------------------------------------------------------------------------------
    def touch(self, name: str, client: str) -> None:
        """Room `name` seen now: it and its polls are kept KEEP_S from now, and it counts as live."""
        now, key, sub = time.time(), PREFIX + "f:" + name, PREFIX + "sub:" + polls_folder(name)
        try:
            there, folders = self._call(lambda p: (p.expire(key, KEEP_S), p.smembers(sub)))
            who = PREFIX + "client:" + client
            if not there:  # gone (expired, evicted): no longer counted, and its polls go with it (as on disk)
                self._call(lambda p: (p.zrem(PREFIX + "live", name), p.zrem(who, name),
                                      *[p.delete(f.decode()) for f in folders], p.delete(sub),
                                      p.zrem(PREFIX + "folders", polls_folder(name))))
                return
            polls = {polls_folder(name): now} if folders else {}  # still listed for "My session" (folders())
            self._call(lambda p: (p.zadd(PREFIX + "live", {name: now}), p.zadd(who, {name: now}),
                                  p.expire(who, KEEP_S), p.expire(sub, KEEP_S),
                                  *[p.expire(f.decode(), KEEP_S) for f in folders],
                                  *([p.zadd(PREFIX + "folders", polls)] if polls else [])), atomic=True)
        except Down:
            pass

    def live_rooms(self, client: str | None = None) -> int:
        """Rooms seen within LIVE_S: all of them, or those `client` (a digest) started."""
        key, now = PREFIX + ("live" if client is None else "client:" + client), time.time()
        try:
            _, count = self._call(lambda p: (p.zremrangebyscore(key, "-inf", now - KEEP_S),
                                             p.zcount(key, now - LIVE_S, "+inf")))
        except Down:
            return 0
        return int(count)
