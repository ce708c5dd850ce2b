"""A compressed radix tree over the token ids of every request sent so far: one walk per request finds
the longest prefix it shares with an earlier request still alive under each TTL."""
from __future__ import annotations

import heapq
from typing import NamedTuple

from pipeline.core.common_prefix import common_prefix_len
from pipeline.prompt_cache.audit.tokens import TokenMemo, token_ids

INF = float("inf")


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
    """How many leading bytes (whole tokens, so a multiple of 4) a[i:i+n] and b[j:j+n] share."""
    return 4 * (common_prefix_len(a[i:i + n], b[j:j + n]) // 4)


class Cut(NamedTuple):
    """What a request shares with the earlier requests alive under one TTL."""

    tokens: int  # the longest shared prefix
    other: int  # the earlier request to compare with (-1: none)
    last_used: float  # when that prefix was last sent, by any request (-inf: never)


class PrefixTree:
    """Compressed radix tree over the token ids of every request added, with when each path was used.

    `add` inserts a request and, in the same walk, measures for each TTL the longest prefix it shares
    with earlier requests still alive. Cost per request: O(edges on its path + T log T) byte compares,
    instead of O(N T) for comparing with every earlier request.
    """

    def __init__(self):
        self.root = _Node(b"", 0, 0, 0)
        self.n_nodes = 1

    def add(self, seq: bytes, t: float, index: int, floors: tuple[float, ...]) -> list[Cut]:
        """Insert request `index` sent at `t`. For each floor (t - TTL; -inf: never expires): a Cut
        (tokens shared with an earlier request last used at or after the floor, that request or -1,
        when the shared prefix was last used).

        [1, 2, 3] at t=9 after [1, 2, 4] at t=5 (alive) -> [Cut(2, 0, 5)]; after nothing -> [Cut(0, -1, -inf)].
        """
        cuts: list[Cut | None] = [None] * len(floors)
        node, pos, n = self.root, 0, len(seq)
        path = [node]  # nodes this request passes through: touched once every check is done
        for k, f in enumerate(floors):
            if node.last_seen < f:
                cuts[k] = Cut(0, -1, -INF)
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
                    cuts[k] = Cut(pos // 4, self._other(node, f), node.last_seen)
            length = child.end - child.start
            m = common_bytes(seq, pos, child.seq, child.start, min(length, n - pos))
            if m < length:
                for k in range(len(cuts)):
                    if cuts[k] is None:
                        cuts[k] = Cut((pos + m) // 4, child.latest, child.last_seen)
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
                cuts[k] = Cut(pos // 4, self._other(node, f), node.last_seen)

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
