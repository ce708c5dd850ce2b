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
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pipeline.core.errors import InputError, json_error
from pipeline.prompt_cache.audit.render import Block, clean, kind_of, read_ttl, render_blocks

MAX_LOG_BYTES = 50 * 2**20  # a pasted or uploaded log; a bigger one is refused, not read
MAX_REQUESTS = 100_000
TS_KEYS = ("ts", "timestamp")
ANTHROPIC_BLOCK_TYPES = {"tool_use", "tool_result", "image", "document", "thinking", "redacted_thinking"}
RETENTIONS = ("in_memory", "24h")  # OpenAI's prompt_cache_retention values
MAX_TS = 1e13  # seconds (year ~318,000): a bigger timestamp is a mistake, and past float range it cannot be read
MAX_OUTPUT_TOKENS = 10_000_000  # per request; far above any model's output limit


@dataclass(frozen=True)
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
            raise InputError("log", f"not valid JSON: {json_error(e)}. Give one request body per line (JSONL) "
                                    f"or a JSON array of bodies.") from None
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
        raise InputError("log", f"{where}: expected a JSON object (a request body), got {kind_of(entry)}.")
    body, outer = entry, entry
    if "body" in entry and not ("messages" in entry or "input" in entry):
        body = entry["body"]
        if not isinstance(body, dict):
            raise InputError("log", f"{where}: `body` must be a JSON object, got {kind_of(body)}.")
    ts = next((outer[k] for k in TS_KEYS if k in outer), None)
    if ts is None and body is not outer:
        ts = next((body[k] for k in TS_KEYS if k in body), None)
    shape = body_shape(body, where)
    blocks, tools = render_blocks(body, shape, where)
    auto = read_ttl(body["cache_control"], where) if "cache_control" in body else None
    model = body.get("model")
    return LogRequest(number, line, shape, clean(model) if isinstance(model, str) else None, parse_ts(ts, where),
                      _output_tokens(outer, where), body, blocks, tools, auto, retention_of(body, shape, where))


def retention_of(body: dict, shape: str, where: str) -> str | None:
    """OpenAI's `prompt_cache_retention` ("in_memory" or "24h"); None when not sent (or not OpenAI)."""
    value = body.get("prompt_cache_retention") if shape != "anthropic" else None
    if value is not None and value not in RETENTIONS:  # an unhashable list is not `in` a tuple of str: no error
        raise InputError("log", f"{where}: `prompt_cache_retention` must be \"in_memory\" or \"24h\", "
                                f"got {kind_of(value) if not isinstance(value, str) else repr(value[:20])}.")
    return value


def body_shape(body: dict, where: str) -> str:
    """openai-chat | openai-responses | anthropic, or InputError for a body of no known shape."""
    if "messages" in body:
        if not isinstance(body["messages"], list):
            raise InputError("log", f"{where}: `messages` must be a list, got {kind_of(body['messages'])}.")
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
        raise InputError("log", f"{where}: the timestamp must be seconds or an ISO-8601 string, got {kind_of(value)}.")
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
