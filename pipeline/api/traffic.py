"""The API's traffic: one record per answered request, the latest MAX_RECORDS kept in the server's memory.

server.py adds a record when an answer ends (whole or streamed); the Traffic page reads them live. Each record keeps
the body as the client sent it (when not over BODY_KEPT_CHARS) so the traffic can be exported in the format the
cache audit reads (`audit_log_text`) and priced under OpenAI's, Anthropic's and vLLM's rules there: one definition.
"""
from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass

MAX_RECORDS = 200  # the ring's size: the oldest record leaves when one more arrives
BODY_KEPT_CHARS = 200_000  # a body over this (as JSON) is not kept: its request is left out of the audit export
ANSWER_START_CHARS = 120  # the answer's first words, as kept
CLIENT_CHARS = 120  # the user agent, as kept


def prefix_blocks(prompt_tokens: int, reused_positions: int, block_size: int) -> list[bool]:
    """The prompt's blocks, True where the block lies wholly inside the reused positions (a hit).
    40 prompt tokens, 32 reused, blocks of 16 -> [True, True, False] (the last block is the 8 tokens left)."""
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    starts = range(0, max(prompt_tokens, 0), block_size)
    return [min(start + block_size, prompt_tokens) <= reused_positions for start in starts]


@dataclass(frozen=True)
class TrafficRecord:
    number: int  # 1, 2, ... in the order the answers ended (the server's count, never reused)
    at: float  # when the request arrived, seconds since the epoch
    api: str  # "openai" or "anthropic": the route it came by
    client: str  # the client's user agent (the SDK's name and version), as sent: untrusted text
    model: str  # the model's label
    prompt_tokens: int
    cached_tokens: int  # prompt positions whose K/V came from the prefix cache (the run's reused_positions)
    new_tokens: int  # tokens generated (every draw's, with n > 1)
    ttft_s: float | None  # pipeline.costs.named_time's TTFT of the run
    tpot_s: float | None  # and its TPOT (None: a one-token answer)
    answer_start: str  # the answer's first words: untrusted text
    run_link: str  # the x-tpe-run link that opens the run on the pages
    streamed: bool
    block_size: int  # the prefix cache's block (PrefixCacheConfig.block_size): the unit a prompt is reused in
    body: dict | None = None  # the body as sent, for the audit export (None: over BODY_KEPT_CHARS)

    @property
    def blocks(self) -> list[bool]:
        return prefix_blocks(self.prompt_tokens, self.cached_tokens, self.block_size)

    @property
    def hit_rate(self) -> float:
        """Prompt tokens cached / prompt tokens."""
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def kept_body(body: dict) -> dict | None:
    """The body, unless it is too long to keep in memory for the audit."""
    try:
        return body if len(json.dumps(body, ensure_ascii=False)) <= BODY_KEPT_CHARS else None
    except (TypeError, ValueError):
        return None


class TrafficLog:
    """A fixed-size ring of TrafficRecord, safe to add to and read from any thread."""

    def __init__(self, max_records: int = MAX_RECORDS):
        self._records: deque[TrafficRecord] = deque(maxlen=max_records)
        self._lock = threading.Lock()
        self._count = 0
        self._version = 0  # changes with every add and clear: what a reader caches its derived views by

    def add(self, *, at: float, api: str, client: str, model: str, prompt_tokens: int, cached_tokens: int,
            new_tokens: int, ttft_s: float | None, tpot_s: float | None, answer: str, run_link: str,
            streamed: bool, block_size: int, body: dict | None) -> TrafficRecord:
        with self._lock:
            self._count += 1
            self._version += 1
            record = TrafficRecord(self._count, at, api, client[:CLIENT_CHARS], model, prompt_tokens, cached_tokens,
                                   new_tokens, ttft_s, tpot_s, answer[:ANSWER_START_CHARS], run_link, streamed,
                                   block_size, kept_body(body) if body is not None else None)
            self._records.append(record)
            return record

    def records(self) -> list[TrafficRecord]:
        """The records kept, oldest first (a copy)."""
        return self.versioned()[1]

    def versioned(self) -> tuple[int, list[TrafficRecord]]:
        """(the log's version, the records kept, oldest first): the same version, the same records."""
        with self._lock:
            return self._version, list(self._records)

    @property
    def count(self) -> int:
        """Records ever added (more than those kept once the ring is full)."""
        with self._lock:
            return self._count

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
            self._version += 1


def hit_rates(records: list[TrafficRecord]) -> list[tuple[int, float, float]]:
    """(number, this request's hit rate, the running hit rate over the records so far): prompt tokens cached /
    prompt tokens. Prompts of 10 and 30 tokens with 0 and 20 cached -> [(1, 0.0, 0.0), (2, 0.667, 0.5)]."""
    rows, cached, prompt = [], 0, 0
    for r in records:
        cached, prompt = cached + r.cached_tokens, prompt + r.prompt_tokens
        rows.append((r.number, r.hit_rate, cached / prompt if prompt else 0.0))
    return rows


def by_client(records: list[TrafficRecord]) -> list[dict]:
    """Per client (user agent), in order of first appearance: requests, hit rate over its prompt tokens, TTFT's
    median and p95 (pipeline.costs.metrics.spread; None without a timed answer): two agents' runs side by side."""
    from pipeline.costs.metrics import spread

    groups: dict[str, list[TrafficRecord]] = {}
    for r in records:
        groups.setdefault(r.client, []).append(r)
    rows = []
    for client, rs in groups.items():
        prompt = sum(r.prompt_tokens for r in rs)
        ttft = spread([r.ttft_s for r in rs if r.ttft_s is not None])
        rows.append({"client": client, "requests": len(rs), "prompt_tokens": prompt,
                     "cached_tokens": sum(r.cached_tokens for r in rs),
                     "hit_rate": sum(r.cached_tokens for r in rs) / prompt if prompt else 0.0,
                     "ttft_p50_s": ttft and ttft.p50, "ttft_p95_s": ttft and ttft.p95})
    return rows


def audit_log_text(records: list[TrafficRecord]) -> str:
    """The records as the cache audit reads a log (JSONL: {"ts", "output_tokens", "body"} a line), those whose body
    was kept; Cache audit's Paste or Upload takes it as it is."""
    return "".join(json.dumps({"ts": r.at, "output_tokens": r.new_tokens, "body": r.body}, ensure_ascii=False) + "\n"
                   for r in records if r.body is not None)


TRAFFIC = TrafficLog()  # the server process's log: the API's handlers add, the Traffic page reads
