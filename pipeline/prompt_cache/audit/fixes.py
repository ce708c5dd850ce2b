"""The fixes: each body rewritten to cache well (sorted JSON keys, tools sorted by name, a date/time/ID
moved to the end, earlier turns kept word for word), and the rewritten log audited again."""
from __future__ import annotations

import copy
import json

from .log import MAX_LOG_BYTES, LogRequest, parse_log
from .render import read_ttl, render_blocks, tool_name
from .records import AuditReport
from .replay import audit_requests
from .volatile import VOLATILE, sort_keys_text


FIX_WORDS = {
    "sorted_keys": "JSON serialised with sorted keys",
    "sorted_tools": "tools sorted by name",
    "moved_volatile": "a date, time or ID near the start moved to the end of the request",
    "kept_history": "earlier turns kept word for word (the summary replaced by the original turns)",
}


def fix_body(body: dict, shape: str) -> tuple[dict, set[str]]:
    """The body rewritten to cache well: stable key order, tools sorted by name, and a date/time/ID
    line at the start of the system prompt moved to the end of the last user message."""
    body, changes = copy.deepcopy(body), set()
    if isinstance(body.get("tools"), list) and body["tools"]:
        _fix_tools(body, changes)
    for holder, key in _text_slots(body, shape):
        new = sort_keys_text(holder[key])
        if new != holder[key]:
            holder[key] = new
            changes.add("sorted_keys")
    moved = _take_volatile_lines(body, shape)
    if moved and _append_to_last_user(body, shape, moved):
        changes.add("moved_volatile")
    return body, changes


def _fix_tools(body: dict, changes: set[str]) -> None:
    tools = body["tools"]
    marked = next((t["cache_control"] for t in tools if isinstance(t, dict) and "cache_control" in t), None)
    fixed = [sort_deep(t) for t in tools]
    if [json.dumps(t) for t in fixed] != [json.dumps(t) for t in tools]:
        changes.add("sorted_keys")
    fixed.sort(key=lambda t: tool_name(t) if isinstance(t, dict) else "")
    if [tool_name(t) for t in fixed if isinstance(t, dict)] != [tool_name(t) for t in tools if isinstance(t, dict)]:
        changes.add("sorted_tools")
    if marked is not None:  # the breakpoint stays on the last tool, wherever it was
        for t in fixed:
            t.pop("cache_control", None)
        fixed[-1]["cache_control"] = marked
    body["tools"] = fixed


def sort_deep(value):
    """{'b': {'d': 1, 'c': 2}, 'a': 0} -> {'a': 0, 'b': {'c': 2, 'd': 1}} (lists keep their order)."""
    if isinstance(value, dict):
        return {k: sort_deep(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sort_deep(v) for v in value]
    return value


def _text_slots(body: dict, shape: str) -> list[tuple[dict, str]]:
    """(holder, key) of every prompt text in the body: system, instructions, message contents."""
    slots = []
    if isinstance(body.get("system"), str):
        slots.append((body, "system"))
    elif isinstance(body.get("system"), list):
        slots += [(p, "text") for p in body["system"] if isinstance(p, dict) and isinstance(p.get("text"), str)]
    if isinstance(body.get("instructions"), str):
        slots.append((body, "instructions"))
    for m in messages_of(body, shape):
        if isinstance(m.get("content"), str):
            slots.append((m, "content"))
        elif isinstance(m.get("content"), list):
            for p in m["content"]:
                if isinstance(p, dict) and isinstance(p.get("text"), str):
                    slots.append((p, "text"))
                elif isinstance(p, dict) and isinstance(p.get("content"), str):  # tool_result
                    slots.append((p, "content"))
    return slots


def messages_of(body: dict, shape: str) -> list[dict]:
    items = body.get("input") if shape == "openai-responses" else body.get("messages")
    return [m for m in items if isinstance(m, dict)] if isinstance(items, list) else []


def _first_text_slot(body: dict, shape: str) -> tuple[dict, str] | None:
    """Where the prompt's first words live: the system prompt, the instructions, or the first message."""
    slots = _text_slots(body, shape)
    return slots[0] if slots else None


def _take_volatile_lines(body: dict, shape: str, first_lines: int = 3) -> list[str]:
    """Remove the lines holding a date, time or ID among the first lines of the prompt's first text."""
    slot = _first_text_slot(body, shape)
    if slot is None or not _has_later_user_message(body, shape, slot):
        return []
    holder, key = slot
    lines = holder[key].split("\n")
    taken = [i for i, line in enumerate(lines[:first_lines]) if VOLATILE.search(line)]
    if not taken:
        return []
    holder[key] = "\n".join(line for i, line in enumerate(lines) if i not in taken).lstrip("\n")
    return [lines[i].strip() for i in taken if lines[i].strip()]


def _has_later_user_message(body: dict, shape: str, slot) -> bool:
    """True when the prompt's first text is not itself the last user message (there is an end to move to)."""
    users = [m for m in messages_of(body, shape) if m.get("role") == "user"]
    if not users:
        return shape == "openai-responses" and isinstance(body.get("input"), str)
    last = users[-1]
    parts = last.get("content") if isinstance(last.get("content"), list) else []
    return not any(slot[0] is holder for holder in [last, *parts])


def _append_to_last_user(body: dict, shape: str, lines: list[str]) -> bool:
    users = [m for m in messages_of(body, shape) if m.get("role") == "user"]
    if shape == "openai-responses" and isinstance(body.get("input"), str):
        body["input"] = body["input"] + "\n\n" + "\n".join(lines)
        return True
    if not users:
        return False
    last = users[-1]
    if isinstance(last.get("content"), str):
        last["content"] = last["content"] + "\n\n" + "\n".join(lines)
    elif isinstance(last.get("content"), list):
        kind = "input_text" if shape == "openai-responses" else "text"
        last["content"].append({"type": kind, "text": "\n".join(lines)})
    else:
        return False
    return True


def with_history(body: dict, shape: str, source: dict, messages: list[dict]) -> dict:
    """`body` with the tools, system and instructions of `source` and these messages."""
    out = copy.deepcopy(body)
    for key in ("tools", "system", "instructions"):
        if key in source:
            out[key] = copy.deepcopy(source[key])
    out["input" if shape == "openai-responses" else "messages"] = copy.deepcopy(messages)
    return out


def message_key(message: dict) -> str:
    """A message's identity for matching histories: its JSON, keys sorted."""
    return json.dumps(message, sort_keys=True, ensure_ascii=False)


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
        body, what = fix_body(r.body, r.shape)
        changes[r.number] |= what
        fixed.append(_rebuilt(r, body))
    report = audit_requests(fixed, provider, **kwargs)
    for _ in range(rounds):
        rewrites = {i: rec.matched_request - 1 for i, rec in enumerate(report.requests)
                    if rec.trap == "history_rewritten"}
        if not rewrites:
            break
        fixed = _keep_history(fixed, rewrites, changes)
        report = audit_requests(fixed, provider, **kwargs)
    return fixed, {n: sorted(c) for n, c in changes.items()}, report


def _rebuilt(r: LogRequest, body: dict) -> LogRequest:
    blocks, tools = render_blocks(body, r.shape, r.where)
    auto = read_ttl(body["cache_control"], r.where) if "cache_control" in body else None
    return LogRequest(r.number, r.line, r.shape, r.model, r.ts, r.output_tokens, body, blocks, tools, auto,
                      r.cache_retention)


def _keep_history(requests: list[LogRequest], rewrites: dict[int, int], changes) -> list[LogRequest]:
    """Give each rewritten request the history of the request it rewrote, plus its new turns; requests
    that continue a rewritten one follow it."""
    out: list[LogRequest] = []
    by_history: dict[tuple, LogRequest] = {}  # original messages (keys) -> fixed request
    for i, r in enumerate(requests):
        msgs = messages_of(r.body, r.shape)
        keys = tuple(message_key(m) for m in msgs)
        new = r
        if i in rewrites:
            new = _splice(r, out[rewrites[i]], msgs)
        else:
            for cut in range(len(keys) - 1, 0, -1):  # continues a request that was rewritten?
                base = by_history.get(keys[:cut])
                if base is not None:
                    new = _rebuilt(r, with_history(r.body, r.shape, base.body,
                                                      messages_of(base.body, r.shape) + msgs[cut:]))
                    break
        if new is not r:
            changes[r.number].add("kept_history")
            by_history[keys] = new
        out.append(new)
    return out


def _splice(r: LogRequest, base: LogRequest, msgs: list[dict]) -> LogRequest:
    """base's messages, then r's messages after the last one both share word for word (or, if none is
    shared, r's last message)."""
    old = messages_of(base.body, base.shape)
    old_keys = [message_key(m) for m in old]
    for k in range(len(msgs) - 1, -1, -1):
        key = message_key(msgs[k])
        if key in old_keys and len(str(msgs[k].get("content", ""))) >= 20:
            at = len(old_keys) - 1 - old_keys[::-1].index(key)
            return _rebuilt(r, with_history(r.body, r.shape, base.body, old[:at + 1] + msgs[k + 1:]))
    return _rebuilt(r, with_history(r.body, r.shape, base.body, old + msgs[-1:]))


def fixed_log_text(requests: list[LogRequest]) -> str:
    """JSONL of the fixed bodies (with their timestamps as wrappers), ready to download."""
    lines = []
    for r in requests:
        entry = {"ts": r.ts, "body": r.body} if r.ts is not None else r.body
        lines.append(json.dumps(entry, ensure_ascii=False))
    return "\n".join(lines) + "\n"


def audit_fixes(text: str, provider: str = "openai", max_bytes: int | None = MAX_LOG_BYTES, **kwargs) -> dict:
    """Before and after the fixes: both reports, what changed per request, and the fixed log."""
    requests = parse_log(text, max_bytes)
    before = audit_requests(requests, provider, **kwargs)
    fixed, changes, after = fix_requests(requests, provider, **kwargs)
    return {"before": before, "after": after, "changes": changes, "fixed_log": fixed_log_text(fixed)}
