"""One request body rewritten to cache well: JSON keys sorted, tools sorted by name, a date/time/ID line
near the start moved to the end of the last user message; and the helpers that splice a history in."""
from __future__ import annotations

import copy
import json

from pipeline.prompt_cache.audit.render import tool_name
from pipeline.prompt_cache.audit.volatile import VOLATILE, sort_keys_text

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
