"""A request body rendered as the content blocks a provider caches over, in prefix order.

Rendering (no provider publishes its template, so this is the audit's stated convention): tools
first (one block per tool, its JSON with the keys in the order sent), then system / instructions,
then each message's blocks in order. A message's first block starts with a role header `<user>\\n`,
its other blocks with `\\n`. Text is kept byte for byte: key order and whitespace matter.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from pipeline.core.errors import InputError

LONG_BLOB_CHARS = 2_000  # a longer base64 string (image or file data) is rendered as its digest
TEXT_PART_TYPES = ("text", "input_text", "output_text")
SYSTEM_ROLES = ("system", "developer")
# Every role a message may have in OpenAI's Chat Completions (function: its older tool results) or Responses, or in
# Anthropic's Messages (user, assistant): a log line with another was refused by the provider, so never cached.
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
TTLS = {"5m", "1h"}


@dataclass(frozen=True)
class Block:
    section: str  # tools | system | messages
    role: str  # tools | system | user | assistant | tool | developer | function_call ...
    message: int  # position of its message in the conversation; -1 for tools and system
    header: str  # rendered before the content: "<user>\n" on a message's first block, else "\n"
    text: str  # the content as rendered (JSON dumped with the keys in the order sent)
    cache_ttl: str | None = None  # "5m" | "1h" where the block carries Anthropic's cache_control


def render_blocks(body: dict, shape: str, where: str) -> tuple[list[Block], list[str]]:
    """Tools, then system / instructions, then the messages: the order prefixes are cached in."""
    blocks, names = _tool_blocks(body.get("tools"), where)
    if "system" in body:
        blocks += _system_blocks(body["system"], where)
    if "instructions" in body and body["instructions"] is not None:
        if not isinstance(body["instructions"], str):
            raise InputError("log", f"{where}: `instructions` must be a string.")
        blocks.append(Block("system", "system", -1, "<system>\n", clean(body["instructions"])))
    if shape == "openai-responses":
        messages = _responses_items(body["input"], where)  # the roles of items that have one are checked there
    else:
        messages = body["messages"]
        for i, message in enumerate(messages):
            check_role(message, f"{where}, message {i + 1}")
    leading = True  # OpenAI's system / developer messages at the start are the system prompt
    for i, message in enumerate(messages):
        part = _message_blocks(message, i, f"{where}, message {i + 1}")
        leading = leading and message.get("role") in SYSTEM_ROLES
        blocks += [Block("system", b.role, b.message, b.header, b.text, b.cache_ttl) for b in part] if leading else part
    if not blocks:
        raise InputError("log", f"{where}: the request has no content.")
    return blocks, names


def _tool_blocks(tools, where: str) -> tuple[list[Block], list[str]]:
    if tools is None:
        return [], []
    if not isinstance(tools, list):
        raise InputError("log", f"{where}: `tools` must be a list, got {kind_of(tools)}.")
    blocks, names = [], []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise InputError("log", f"{where}: tool {i + 1} must be an object, got {kind_of(tool)}.")
        names.append(tool_name(tool))
        ttl = read_ttl(tool["cache_control"], where) if "cache_control" in tool else None
        blocks.append(Block("tools", "tools", -1, "<tools>\n" if i == 0 else "\n", dump(tool), ttl))
    return blocks, names


def tool_name(tool: dict) -> str:
    """{'name': 'search'} or {'type': 'function', 'function': {'name': 'search'}} -> 'search'."""
    fn = tool.get("function")
    name = tool.get("name") or (fn.get("name") if isinstance(fn, dict) else None) or tool.get("type")
    return clean(str(name)) if name is not None else ""


def _system_blocks(system, where: str) -> list[Block]:
    if isinstance(system, str):
        return [Block("system", "system", -1, "<system>\n", clean(system))]
    if not isinstance(system, list):
        raise InputError("log", f"{where}: `system` must be a string or a list of text blocks.")
    blocks = []
    for i, part in enumerate(system):
        if not isinstance(part, dict) or not isinstance(part.get("text"), str):
            raise InputError("log", f"{where}: system block {i + 1} must be {{\"type\": \"text\", \"text\": ...}}.")
        ttl = read_ttl(part["cache_control"], where) if "cache_control" in part else None
        blocks.append(Block("system", "system", -1, "<system>\n" if i == 0 else "\n", clean(part["text"]), ttl))
    return blocks


def _responses_items(items, where: str) -> list[dict]:
    """Responses `input` as chat messages: a string is one user message; other items keep their JSON."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise InputError("log", f"{where}: `input` must be a string or a non-empty list of items.")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise InputError("log", f"{where}: input item {i + 1} must be an object, got {kind_of(item)}.")
        if "role" in item:
            check_role(item, f"{where}, input item {i + 1}")
            out.append(item)
        else:  # function_call, function_call_output, reasoning ...: sent as their JSON
            out.append({"role": str(item.get("type", "item")), "content": [{"type": "json", "json": item}]})
    return out


def check_role(message, where: str) -> None:
    """A message's `role` must be one that a provider accepts (ROLES); a message that is no object is refused
    later, by _message_blocks."""
    role = message.get("role") if isinstance(message, dict) else None
    if isinstance(role, str) and role not in ROLES:
        raise InputError("log", f"{where}: role {json.dumps(role[:24])} is refused by every provider; use "
                                f"{', '.join(ROLES[:-1])} or {ROLES[-1]}.")


def _message_blocks(message, i: int, where: str) -> list[Block]:
    if not isinstance(message, dict):
        raise InputError("log", f"{where}: must be an object with `role` and `content`, got {kind_of(message)}.")
    role = message.get("role")
    if not isinstance(role, str) or not role or len(role) > 64:
        raise InputError("log", f"{where}: `role` must be a short string like \"user\".")
    role, call_id = clean(role), message.get("tool_call_id")
    header = clean(f"<{role}{' ' + str(call_id)[:80] if call_id is not None else ''}>\n")
    parts = _content_parts(message.get("content"), where)
    if message.get("tool_calls") is not None:
        parts.append((dump(message["tool_calls"]), None))
    if not parts:
        parts = [("", None)]
    return [Block("messages", role, i, header if n == 0 else "\n", text, ttl) for n, (text, ttl) in enumerate(parts)]


def _content_parts(content, where: str) -> list[tuple[str, str | None]]:
    """[(rendered text, cache ttl or None)] for a string, a null or a list of parts."""
    if content is None:
        return []
    if isinstance(content, str):
        return [(clean(content), None)]
    if not isinstance(content, list):
        raise InputError("log", f"{where}: `content` must be a string or a list of parts, got {kind_of(content)}.")
    parts = []
    for j, part in enumerate(content):
        if isinstance(part, str):
            parts.append((clean(part), None))
            continue
        if not isinstance(part, dict):
            raise InputError("log", f"{where}, part {j + 1}: must be an object, got {kind_of(part)}.")
        ttl = read_ttl(part["cache_control"], where) if "cache_control" in part else None
        if part.get("type") in TEXT_PART_TYPES or ("text" in part and "type" not in part):
            if not isinstance(part.get("text"), str):
                raise InputError("log", f"{where}, part {j + 1}: `text` must be a string.")
            parts.append((clean(part["text"]), ttl))
        elif part.get("type") == "json":  # a Responses item kept whole (see _responses_items)
            parts.append((dump(part["json"]), ttl))
        else:  # image, tool_use, tool_result, document ...: their JSON, long blobs shortened
            parts.append((dump(part), ttl))
    return parts


def dump(value) -> str:
    """JSON text with the keys in the order sent, cache_control left out (it is not prompt text).

    {'b': 1, 'a': 2, 'cache_control': {...}} -> '{"b": 1, "a": 2}'
    """
    return clean(json.dumps(_strip(value), ensure_ascii=False))


def _strip(value):
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    if isinstance(value, str) and len(value) > LONG_BLOB_CHARS and _BLOB.fullmatch(value[:LONG_BLOB_CHARS]):
        digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        return f"<{len(value):,} characters of data, sha256 {digest}>"
    return value


_BLOB = re.compile(r"(?:data:[\w/.+-]+;base64,)?[A-Za-z0-9+/=_-]+")  # base64 image or file data


def clean(text: str) -> str:
    """Text a tokenizer accepts: a lone surrogate (valid in JSON, not in UTF-8) becomes U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def read_ttl(cache_control, where: str) -> str:
    """The ttl of a `cache_control` marker: {"type": "ephemeral"} -> "5m"; {"ttl": "1h", ...} -> "1h"."""
    if not isinstance(cache_control, dict):
        raise InputError("log", f"{where}: `cache_control` must be an object like {{\"type\": \"ephemeral\"}}.")
    ttl = cache_control.get("ttl", "5m")
    if not isinstance(ttl, str) or ttl not in TTLS:
        raise InputError("log", f"{where}: cache_control ttl must be \"5m\" or \"1h\", got {str(ttl)[:20]!r}.")
    return ttl


def kind_of(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}.get(
        type(value), "a number")
