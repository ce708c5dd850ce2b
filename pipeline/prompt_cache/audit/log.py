"""The request log read into plain requests, each rendered as the content blocks a provider caches
over, in prefix order.

A log holds one request body per entry, in the order sent: a JSON array, JSONL (one per line), or
bodies pasted one after another. An entry is a body, or a wrapper `{"ts": ..., "body": {...}}`
(which may also say `"output_tokens"`); a plain body may carry its own top-level `"ts"` (or
`"timestamp"`): seconds, or an ISO-8601 string. Shapes read:
- OpenAI Chat Completions: `messages` (content a string or parts), `tools`;
- OpenAI Responses: `instructions`, `input` (a string or a list of items);
- Anthropic Messages: `system` (a string or text blocks), `messages`, `tools`, `cache_control`
  on tools, system blocks and content blocks, or at the top level (automatic caching).

Rendering (no provider publishes its template, so this is the audit's stated convention): tools
first (one block per tool, its JSON with the keys in the order sent), then system / instructions,
then each message's blocks in order. A message's first block starts with a role header `<user>\\n`,
its other blocks with `\\n`. Text is kept byte for byte: key order and whitespace matter.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ...errors import InputError


MAX_LOG_BYTES = 50 * 2**20  # a pasted or uploaded log; a bigger one is refused, not read
MAX_REQUESTS = 100_000
LONG_BLOB_CHARS = 2_000  # a longer base64 string (image or file data) is rendered as its digest
TEXT_PART_TYPES = ("text", "input_text", "output_text")
TS_KEYS = ("ts", "timestamp")
SYSTEM_ROLES = ("system", "developer")
ANTHROPIC_BLOCK_TYPES = {"tool_use", "tool_result", "image", "document", "thinking", "redacted_thinking"}
TTLS = {"5m", "1h"}
RETENTIONS = ("in_memory", "24h")  # OpenAI's prompt_cache_retention values
MAX_TS = 1e13  # seconds (year ~318,000): a bigger timestamp is a mistake, and past float range it cannot be read
MAX_OUTPUT_TOKENS = 10_000_000  # per request; far above any model's output limit


@dataclass(frozen=True)
class Block:
    section: str  # tools | system | messages
    role: str  # tools | system | user | assistant | tool | developer | function_call ...
    message: int  # position of its message in the conversation; -1 for tools and system
    header: str  # rendered before the content: "<user>\n" on a message's first block, else "\n"
    text: str  # the content as rendered (JSON dumped with the keys in the order sent)
    cache_ttl: str | None = None  # "5m" | "1h" where the block carries Anthropic's cache_control


@dataclass
class LogRequest:
    number: int  # 1-based, the order sent
    line: int  # line of the log where the entry starts
    shape: str  # openai-chat | openai-responses | anthropic
    model: str | None
    ts: float | None  # seconds as given (epoch or any origin); None when the entry has none
    output_tokens: int | None  # from the wrapper, when the log says
    body: dict  # the body as sent (the fixes rewrite a copy)
    blocks: list[Block]
    tool_names: list[str]  # in the order sent
    auto_cache: str | None = None  # top-level cache_control ttl: the last block is a breakpoint
    cache_retention: str | None = None  # OpenAI's prompt_cache_retention: "in_memory" | "24h" | None (not sent)

    @property
    def where(self) -> str:
        return f"request {self.number} (line {self.line})"

    @property
    def n_messages(self) -> int:
        return 1 + max((b.message for b in self.blocks), default=-1)


# ---- reading the log ---------------------------------------------------------------------------
def check_size(n_bytes: int, limit: int | None = MAX_LOG_BYTES) -> None:
    if limit is not None and n_bytes > limit:
        raise InputError("log", f"the log is {n_bytes / 2**20:.1f} MB; the limit is {limit / 2**20:.0f} MB. "
                                f"Audit a slice of it (for example its first 5,000 lines).")


def read_entries(text: str, max_bytes: int | None = MAX_LOG_BYTES) -> list[tuple[object, int]]:
    """JSON values of the log, each with the line it starts on.

    '{"a":1}\\n{"b":2}' -> [({'a': 1}, 1), ({'b': 2}, 2)];  '[{"a":1}, {"b":2}]' -> both, line 1.
    """
    if not isinstance(text, str):
        raise InputError("log", "give the log as text.")
    if max_bytes is not None and len(text) * 4 > max_bytes:  # UTF-8 takes at most 4 bytes a character
        check_size(len(text.encode("utf-8", "surrogatepass")), max_bytes)
    decoder, values, pos = json.JSONDecoder(), [], _skip_space(text, 0)
    if pos == len(text):
        raise InputError("log", "the log is empty: paste or upload one or more request bodies.")
    line, counted = 1, 0
    while pos < len(text):
        line, counted = line + text.count("\n", counted, pos), pos
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            raise InputError("log", f"line {e.lineno}, column {e.colno}: not valid JSON ({e.msg}). Give one "
                                    f"request body per line (JSONL) or a JSON array of bodies.") from None
        except RecursionError:
            raise InputError("log", f"line {line}: JSON nested too deeply to be a request body.") from None
        except ValueError as e:  # e.g. an integer of more than 4,300 digits
            raise InputError("log", f"line {line}: {e}") from None
        values.append((value, line))
        pos = _skip_space(text, end)
    if len(values) == 1 and isinstance(values[0][0], list):  # a JSON array of entries
        values = [(v, values[0][1]) for v in values[0][0]]
    if not values:
        raise InputError("log", "the JSON array is empty: there is no request to audit.")
    if len(values) > MAX_REQUESTS:
        raise InputError("log", f"{len(values):,} requests; the limit is {MAX_REQUESTS:,}.")
    return values


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n\ufeff":
        pos += 1
    return pos


def parse_log(text: str, max_bytes: int | None = MAX_LOG_BYTES) -> list[LogRequest]:
    """The log as requests in the order sent; bad input raises InputError naming the request and line."""
    requests = []
    for number, (entry, line) in enumerate(read_entries(text, max_bytes), start=1):
        try:
            requests.append(read_request(entry, number, line))
        except RecursionError:
            raise InputError("log", f"request {number} (line {line}): nested too deeply.") from None
    check_times(requests)
    return requests


def read_request(entry, number: int, line: int) -> LogRequest:
    where = f"request {number} (line {line})"
    if not isinstance(entry, dict):
        raise InputError("log", f"{where}: expected a JSON object (a request body), got {_kind(entry)}.")
    body, outer = entry, entry
    if "body" in entry and not ("messages" in entry or "input" in entry):
        body = entry["body"]
        if not isinstance(body, dict):
            raise InputError("log", f"{where}: `body` must be a JSON object, got {_kind(body)}.")
    ts = next((outer[k] for k in TS_KEYS if k in outer), None)
    if ts is None and body is not outer:
        ts = next((body[k] for k in TS_KEYS if k in body), None)
    shape = body_shape(body, where)
    blocks, tools = render_blocks(body, shape, where)
    auto = _ttl(body["cache_control"], where) if "cache_control" in body else None
    model = body.get("model")
    return LogRequest(number, line, shape, clean(model) if isinstance(model, str) else None, parse_ts(ts, where),
                      _output_tokens(outer, where), body, blocks, tools, auto, retention_of(body, shape, where))


def retention_of(body: dict, shape: str, where: str) -> str | None:
    """OpenAI's `prompt_cache_retention` ("in_memory" or "24h"); None when not sent (or not OpenAI)."""
    value = body.get("prompt_cache_retention") if shape != "anthropic" else None
    if value is not None and value not in RETENTIONS:  # an unhashable list is not `in` a tuple of str: no error
        raise InputError("log", f"{where}: `prompt_cache_retention` must be \"in_memory\" or \"24h\", "
                                f"got {_kind(value) if not isinstance(value, str) else repr(value[:20])}.")
    return value


def body_shape(body: dict, where: str) -> str:
    """openai-chat | openai-responses | anthropic, or InputError for a body of no known shape."""
    if "messages" in body:
        if not isinstance(body["messages"], list):
            raise InputError("log", f"{where}: `messages` must be a list, got {_kind(body['messages'])}.")
        if not body["messages"]:
            raise InputError("log", f"{where}: `messages` is empty.")
        return "anthropic" if _looks_anthropic(body) else "openai-chat"
    if "input" in body:
        return "openai-responses"
    keys = ", ".join(f"`{k}`" for k in list(body)[:8]) or "none"
    raise InputError("log", f"{where}: no `messages` (Chat Completions, Anthropic Messages) and no `input` "
                            f"(Responses API), so this is not a chat request body. Keys found: {keys}.")


def _looks_anthropic(body: dict) -> bool:
    if "system" in body or "cache_control" in body or str(body.get("model", "")).startswith("claude"):
        return True
    tools = body.get("tools")
    if isinstance(tools, list) and any(isinstance(t, dict) and "input_schema" in t for t in tools):
        return True
    for m in body["messages"]:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list) and any(isinstance(p, dict) and (p.get("type") in ANTHROPIC_BLOCK_TYPES
                                                                      or "cache_control" in p) for p in content):
            return True
    return False


def parse_ts(value, where: str) -> float | None:
    """Seconds: 1741944667 -> 1741944667.0; '2025-03-14T09:31:07Z' -> 1741944667.0; None -> None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InputError("log", f"{where}: the timestamp must be seconds or an ISO-8601 string, got {_kind(value)}.")
    if isinstance(value, str):
        try:
            stamp = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InputError("log", f"{where}: timestamp {value[:40]!r} is not ISO-8601 "
                                    f"(like 2025-03-14T09:31:07Z).") from None
        return (stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).timestamp()
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError("log", f"{where}: the timestamp (`ts`) must be a finite number of seconds.")
    if abs(value) > MAX_TS:  # an int compares with a float exactly, however long
        raise InputError("log", f"{where}: the timestamp (`ts`) must be seconds, at most {MAX_TS:.0e}; got a "
                                f"number of {len(str(int(abs(value))))} digits.")
    return float(value)


def check_times(requests: list[LogRequest]) -> None:
    """Order in the log is the order sent: a timestamp may not go back."""
    last = None
    for r in requests:
        if r.ts is not None and last is not None and r.ts < last.ts:
            raise InputError("log", f"{r.where}: its timestamp is {last.ts - r.ts:,.0f} s before {last.where}'s; "
                                    f"the log must list requests in the order they were sent.")
        last = r if r.ts is not None else last


def _output_tokens(outer: dict, where: str) -> int | None:
    value = outer.get("output_tokens")
    usage = outer.get("usage")
    if value is None and isinstance(usage, dict):
        value = usage.get("output_tokens", usage.get("completion_tokens"))
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_OUTPUT_TOKENS:
        raise InputError("log", f"{where}: `output_tokens` must be a whole number of tokens from 0 to "
                                f"{MAX_OUTPUT_TOKENS:,}.")
    return value


def _ttl(cache_control, where: str) -> str:
    if not isinstance(cache_control, dict):
        raise InputError("log", f"{where}: `cache_control` must be an object like {{\"type\": \"ephemeral\"}}.")
    ttl = cache_control.get("ttl", "5m")
    if not isinstance(ttl, str) or ttl not in TTLS:
        raise InputError("log", f"{where}: cache_control ttl must be \"5m\" or \"1h\", got {str(ttl)[:20]!r}.")
    return ttl


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}.get(
        type(value), "a number")


# ---- rendering ---------------------------------------------------------------------------------
def render_blocks(body: dict, shape: str, where: str) -> tuple[list[Block], list[str]]:
    """Tools, then system / instructions, then the messages: the order prefixes are cached in."""
    blocks, names = _tool_blocks(body.get("tools"), where)
    if "system" in body:
        blocks += _system_blocks(body["system"], where)
    if "instructions" in body and body["instructions"] is not None:
        if not isinstance(body["instructions"], str):
            raise InputError("log", f"{where}: `instructions` must be a string.")
        blocks.append(Block("system", "system", -1, "<system>\n", clean(body["instructions"])))
    messages = body["messages"] if shape != "openai-responses" else _responses_items(body["input"], where)
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
        raise InputError("log", f"{where}: `tools` must be a list, got {_kind(tools)}.")
    blocks, names = [], []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise InputError("log", f"{where}: tool {i + 1} must be an object, got {_kind(tool)}.")
        names.append(tool_name(tool))
        ttl = _ttl(tool["cache_control"], where) if "cache_control" in tool else None
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
        ttl = _ttl(part["cache_control"], where) if "cache_control" in part else None
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
            raise InputError("log", f"{where}: input item {i + 1} must be an object, got {_kind(item)}.")
        if "role" in item:
            out.append(item)
        else:  # function_call, function_call_output, reasoning ...: sent as their JSON
            out.append({"role": str(item.get("type", "item")), "content": [{"type": "json", "json": item}]})
    return out


def _message_blocks(message, i: int, where: str) -> list[Block]:
    if not isinstance(message, dict):
        raise InputError("log", f"{where}: must be an object with `role` and `content`, got {_kind(message)}.")
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
        raise InputError("log", f"{where}: `content` must be a string or a list of parts, got {_kind(content)}.")
    parts = []
    for j, part in enumerate(content):
        if isinstance(part, str):
            parts.append((clean(part), None))
            continue
        if not isinstance(part, dict):
            raise InputError("log", f"{where}, part {j + 1}: must be an object, got {_kind(part)}.")
        ttl = _ttl(part["cache_control"], where) if "cache_control" in part else None
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


def read_log_file(path: str | os.PathLike, max_bytes: int | None = MAX_LOG_BYTES) -> str:
    path = Path(path)
    if not path.exists():
        raise InputError("file", f"{path} does not exist.")
    if path.is_dir():
        raise InputError("file", f"{path} is a folder; give a JSON or JSONL file.")
    check_size(path.stat().st_size, max_bytes)
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise InputError("file", f"line {line}: not UTF-8 text (byte {e.start:,}).") from None
