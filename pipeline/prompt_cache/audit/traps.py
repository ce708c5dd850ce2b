"""Why a request stops matching an earlier one at its first divergent token: the classic traps named,
with the fix."""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from pipeline.core.common_prefix import common_prefix_len
from pipeline.prompt_cache.audit import volatile
from pipeline.prompt_cache.audit.log import LogRequest
from pipeline.text.counts import plural

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
CAUSES = {  # every other cause a Finding names -> the words the page and the command line show for it
    "first": "the first request",
    "identical": "sent before, identical",
    "prefix": "sent before, as the start of a longer request",
    "extends": "an earlier request with more added",
    "new_content": "new last message",
    "volatile_late": "a late date, time or ID",
    "different": "different text",
    "expired": "the cache entry had expired",
    "tools_changed": "the tool list changed",
}
LOST_FOR_TRAP = 64  # tokens the same in both requests after a difference, recomputed: enough to call it a trap


@dataclass(frozen=True)
class Finding:
    cause: str  # one of CAUSES, or a trap key (cause_words: either in words)
    trap: str | None  # one of TRAPS, or None
    explanation: str
    fix: str = ""


@dataclass
class Side:
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


def where(side: Side, i: int) -> str:
    """Words for block i: 'the system prompt', 'tool 2 (`search`)', 'message 3 (user)'."""
    b = side.req.blocks[i]
    if b.section == "tools":
        k = sum(1 for x in side.req.blocks[:i] if x.section == "tools")
        return f"tool {k + 1} (`{side.req.tool_names[k]}`)"
    if b.section == "system":
        return "the system prompt"
    return f"message {b.message + 1} ({b.role})"


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


def recomputed_for_nothing(request: Side, earlier: Side, block: int, earlier_block: int, shared_chars: int) -> int:
    """Tokens of `request` after its difference from `earlier` that are the same in both, and so recomputed
    for nothing: the common end of the block where they part (`block` in request, `earlier_block` in earlier,
    whose texts agree on their first `shared_chars` characters; that end is estimated in proportion to its
    characters) plus the identical blocks after it."""
    here, there = request.req.blocks[block], earlier.req.blocks[earlier_block]
    tail = common_suffix(here.text, there.text, min(len(here.text), len(there.text)) - shared_chars)
    lost = round(request.block_tokens(block) * tail / max(len(here.text), 1))
    later = zip(range(block + 1, len(request.req.blocks)), range(earlier_block + 1, len(earlier.req.blocks)))
    for mine, theirs in later:
        if request.req.blocks[mine] != earlier.req.blocks[theirs]:
            break
        lost += request.block_tokens(mine)
    return lost


MAX_VOLATILE_EDIT = 200  # characters: an added or swapped stretch this short holding a date is "a date line"


def volatile_change(a: str, b: str, char: int) -> tuple[str | None, str | None] | None:
    """The date, time or ID where texts a and b part at `char`, as (a's, b's), or None.

    Either one covers `char`, or the short stretch one text adds (or swaps) before both agree again
    holds one: a line put in front of the same prompt.
    ('Today is 2025-03-14.\\nRules', 'Rules', 0) -> ('2025-03-14', None)
    """
    mine, theirs = volatile.volatile_near(a, char), volatile.volatile_near(b, char)
    if mine or theirs:
        return mine or "?", theirs or "?"
    tail = common_suffix(a, b, min(len(a), len(b)) - char)
    extra_a, extra_b = a[char:len(a) - tail], b[char:len(b) - tail]
    if max(len(extra_a), len(extra_b)) > MAX_VOLATILE_EDIT:
        return None
    ma, mb = volatile.VOLATILE.search(extra_a), volatile.VOLATILE.search(extra_b)
    return (ma and ma.group(), mb and mb.group()) if ma or mb else None


def _volatile_words(mine: str | None, theirs: str | None, ref: str) -> str:
    if mine and theirs:
        return f"'{mine}' here, '{theirs}' in {ref}"
    return f"'{mine}' added here, where {ref} had none" if mine else f"'{theirs}' in {ref}, gone here"


def json_change(a: str, b: str, char: int) -> bool:
    """The difference at `char` lies inside JSON that holds the same data in both texts (keys reordered)."""
    if "{" not in a[:char + 1] or "{" not in b[:char + 1]:
        return False
    spans_b = {s: (e, v) for s, e, v in volatile.json_spans(b)}
    for s, e, v in volatile.json_spans(a):
        if s <= char < e and s in spans_b:
            return v == spans_b[s][1] and a[s:e] != b[s:spans_b[s][0]]
    return False


def classify(r: Side, o: Side | None, pos: int, other_number: int | None) -> Finding:
    """Why request r stops matching the earlier request o at token `pos`."""
    if o is None:
        if r.req.number == 1:
            return Finding("first", None, "The first request: nothing is cached yet.")
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
    char = common_prefix_len(br.text, bo.text) if br.header == bo.header else 0
    lost = recomputed_for_nothing(r, o, kr, ko, char)
    place = where(r, kr)
    shown = volatile_change(br.text, bo.text, char) if br.header == bo.header else None
    if "tools" in (br.section, bo.section):
        return _tools_finding(r, o, br, bo, char, place, ref, pos)
    if br.header == bo.header and json_change(br.text, bo.text, char):
        return _trap("json_keys_reordered", f"{place} holds the same JSON data as in {ref}, with its keys in "
                                            f"another order: different text from token {pos:,}.")
    if shown:
        words = _volatile_words(*shown, ref)
        if lost >= LOST_FOR_TRAP:
            return _trap("date_or_id", f"{place} starts to differ at token {pos:,} on a date, time or ID: "
                                       f"{words}. The {plural(lost, 'token')} after it are the same in both, but are "
                                       f"recomputed.")
        return Finding("volatile_late", None, f"A date, time or ID differs from {ref} at token {pos:,} ({words}), "
                                              f"late enough that nothing stable follows it: only the rest of the "
                                              f"request is computed.")
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


def cause_words(cause: str) -> str:
    """A Finding's cause in words: 'new_content' -> 'new last message'; a trap's key -> the trap's name
    ('date_or_id' -> 'a date, time or ID near the start')."""
    return CAUSES[cause] if cause in CAUSES else TRAPS[cause][0]


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


def _rewritten(r: Side, o: Side, br, bo, char: int) -> bool:
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
