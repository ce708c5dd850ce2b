"""Anthropic's prompt cache simulated breakpoint by breakpoint: lookback, minimum length, TTL."""
from __future__ import annotations

import hashlib

from pipeline.prompt_cache.audit.log import LogRequest
from pipeline.prompt_cache.audit.records import AnthropicResult
from pipeline.prompt_cache.audit.rules import anthropic_min_tokens


class AnthropicCache:
    """Cache entries written at cache_control breakpoints, keyed by a hash of everything before them.

    A request reads the longest entry found at its breakpoints or up to `lookback_blocks` block
    boundaries before each; it writes an entry at each breakpoint past that read whose prefix reaches
    the model's minimum. Reads refresh an entry's TTL.
    """

    def __init__(self, rules: dict):
        self.rules = rules
        self.a = rules["providers"]["anthropic"]
        self.entries: dict[bytes, list[float]] = {}  # prefix hash -> [last used, TTL seconds]

    def breakpoints(self, r: LogRequest, policy: str) -> tuple[list[tuple[int, str]], bool]:
        """[(block index, ttl)] as sent; with policy "auto", a request without any gets the ones the docs
        recommend: the end of the tools/system part, the end of what came before the newest block
        (the history, or a document before the question) and the last block. Returns (points, added)."""
        points = [(i, b.cache_ttl) for i, b in enumerate(r.blocks) if b.cache_ttl]
        if r.auto_cache:
            points.append((len(r.blocks) - 1, r.auto_cache))
        if points or policy != "auto":
            return sorted(set(points)), False
        last = len(r.blocks) - 1
        stable = [i for i, b in enumerate(r.blocks) if b.section != "messages"]
        added = {last} | ({stable[-1]} if stable else set()) | ({last - 1} if last >= 1 else set())
        return [(i, "5m") for i in sorted(added)], True

    def refusal(self, points: list[tuple[int, str]]) -> str | None:
        """Why the API would refuse these breakpoints (in block order), or None.

        More than 4; or a 1-hour one after a 5-minute one ([(2, '5m'), (5, '1h')]): 1-hour entries must
        come first.
        """
        if len(points) > self.a["max_breakpoints"]:
            return f"more than {self.a['max_breakpoints']} cache_control breakpoints"
        ttls = [ttl for _, ttl in points]
        if "5m" in ttls and "1h" in ttls[ttls.index("5m"):]:
            return "a 1-hour breakpoint comes after a 5-minute one (1-hour entries must come first)"
        return None

    def serve(self, r: LogRequest, seq: bytes, starts: list[int], t: float, policy: str) -> AnthropicResult:
        """What the API would report for request r sent at t: read, written (per TTL), breakpoints."""
        n = len(seq) // 4
        points, added = self.breakpoints(r, policy)
        min_tokens, model = anthropic_min_tokens(r.model, self.rules)
        refused = self.refusal(points)
        if refused:
            return AnthropicResult(input_tokens=n, breakpoints_added=added, min_tokens=min_tokens, model=model,
                                   refused=refused)
        ends = [starts[i + 1] if i + 1 < len(starts) else n for i in range(len(starts))]
        keys = self._prefix_keys(seq, ends)
        read, hit = 0, None
        for i, _ in points:
            for j in range(i, max(-1, i - self.a["lookback_blocks"]), -1):
                entry = self.entries.get(keys[j])
                if entry is not None and t - entry[0] <= entry[1]:
                    if ends[j] > read:
                        read, hit = ends[j], j
                    break
        if hit is not None:
            self.entries[keys[hit]][0] = t
        written, prev = {"5m": 0, "1h": 0}, read
        for i, ttl in points:
            if ends[i] < min_tokens:
                continue
            if ends[i] > prev:
                written[ttl] += ends[i] - prev
                prev = ends[i]
            old = self.entries.get(keys[i])
            self.entries[keys[i]] = [t, max(self.a["ttl_seconds"][ttl], old[1] if old else 0)]
        return AnthropicResult(
            cache_read_input_tokens=read, cache_creation_input_tokens=written["5m"] + written["1h"],
            cache_creation_5m=written["5m"], cache_creation_1h=written["1h"],
            input_tokens=n - read - written["5m"] - written["1h"], breakpoints=[ends[i] for i, _ in points],
            breakpoints_added=added, min_tokens=min_tokens, model=model,
            below_minimum=bool(points) and all(ends[i] < min_tokens for i, _ in points))

    @staticmethod
    def _prefix_keys(seq: bytes, ends: list[int]) -> list[bytes]:
        """One hash per block boundary, chained: key j covers every token up to the end of block j."""
        keys, prev, start, view = [], b"", 0, memoryview(seq)
        for end in ends:
            h = hashlib.blake2b(prev, digest_size=16)
            h.update(view[4 * start:4 * end])  # no copy of the block's bytes
            prev = h.digest()
            keys.append(prev)
            start = end
        return keys
