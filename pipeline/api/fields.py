"""Reading a JSON body's fields: each one's type and range checked, the error naming it as the client wrote it."""
from __future__ import annotations

import json
import math

from pipeline.api.errors import ApiError
from pipeline.core.errors import InputError
from pipeline.stages.request import MAX_MESSAGE_CHARS, MAX_MESSAGES, check_text

MAX_BODY_BYTES = 2 * 2**20  # the pages' longest request (a 64k-character question and system prompt, 256k of history)
MAX_HISTORY_CHARS = MAX_MESSAGE_CHARS * 4  # the sidebar's "earlier turns" box holds this much
MAX_API_MESSAGES = MAX_MESSAGES


def parse_body(raw: bytes) -> dict:
    """The request's bytes -> a JSON object (413 past MAX_BODY_BYTES, 400 for anything but a JSON object)."""
    if len(raw) > MAX_BODY_BYTES:
        raise ApiError(413, f"the body is {len(raw):,} bytes; at most {MAX_BODY_BYTES:,} are accepted.")
    try:
        body = json.loads(raw)
    except UnicodeDecodeError as e:
        raise ApiError(400, f"the body is not UTF-8 (byte {e.start}).") from None
    except (ValueError, RecursionError) as e:  # a number of 5,000 digits is a ValueError too
        where = f" at line {e.lineno}, column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
        raise ApiError(400, f"the body is not JSON the server can read{where}.") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"the body must be a JSON object, got {type(body).__name__}.")
    return body


def refuse_unknown(body: dict, supported: set[str], ignored: set[str], refused: dict[str, str]) -> None:
    """A field this server does not do gets a 400 naming it (never silently dropped); `ignored` ones are accepted
    and have no effect here (docs/api.md lists them); a refused one set to null or its off value passes."""
    for name, value in body.items():
        if name in supported or name in ignored:
            continue
        if name in refused:
            if value is None or value is False or value in ([], {}, "none"):
                continue
            raise ApiError(400, f"is not supported by this server: {refused[name]}", name)
        raise ApiError(400, "is not a field this server knows (docs/api.md lists every field).", name)


def text(name: str, value, limit: int = MAX_MESSAGE_CHARS) -> str:
    """Text as the pages accept it: a string of valid Unicode (no lone surrogate), at most `limit` characters."""
    if not isinstance(value, str):
        raise ApiError(400, f"must be a string, got {type_name(value)}.", name)
    try:
        return check_text(name, value, limit)
    except InputError as e:
        raise ApiError(400, e.message, name) from None


def whole(name: str, value, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ApiError(400, f"must be a whole number from {lo:,} to {hi:,}, got {shown_value(value)}.", name)
    return value


def number(name: str, value, lo: float, hi: float) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not ok or not (isinstance(value, int) or math.isfinite(value)) or not lo <= value <= hi:
        raise ApiError(400, f"must be a number from {lo:g} to {hi:g}, got {shown_value(value)}.", name)
    return float(value)


def flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ApiError(400, f"must be true or false, got {shown_value(value)}.", name)
    return value


def obj(name: str, value) -> dict:
    if not isinstance(value, dict):
        raise ApiError(400, f"must be an object, got {type_name(value)}.", name)
    return value


def array(name: str, value, hi: int) -> list:
    if not isinstance(value, list):
        raise ApiError(400, f"must be an array, got {type_name(value)}.", name)
    if len(value) > hi:
        raise ApiError(400, f"at most {hi} entries, got {len(value)}.", name)
    return value


def type_name(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def shown_value(value) -> str:
    s = json.dumps(value, ensure_ascii=True, default=str) if not isinstance(value, float) or math.isfinite(value) \
        else repr(value)
    return s if len(s) <= 40 else s[:40] + "…"
