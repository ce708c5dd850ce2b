"""What each field of a lesson may hold. Each check returns the value as a link writes it (text) or raises
ValueError with words for the author; lesson.py adds the line and the field.

The page names and the request's link names are the app's (views/chrome/page_list.py's PAGES, views/links/
url_state.py's REQUEST): pipeline/ cannot import views/, so they are listed here, and a test keeps the lists equal.
"""
from __future__ import annotations

import math
import re

from pipeline.core.poll_kinds import KINDS
from pipeline.model.registry import CHAT_FORMATS, MODELS
from pipeline.model.weight_formats import WEIGHT_FORMATS
from pipeline.stages.logit_bias import logit_bias_text, parse_logit_bias
from pipeline.stages.request import MAX_MESSAGE_CHARS, OPTION_RANGES

PAGE_URLS = ("start", "journey", "request", "tokens", "tensors", "embeddings", "position", "layers", "attention",
             "next-token", "why-token", "what-if", "constrained", "generation", "kv-cache", "prefill-decode",
             "how-it-learned", "faster-decode", "prompt-caching", "cache-audit", "traffic", "compare-models",
             "presenter")
MAX_TOP_K = 262_144  # the largest vocabulary of the registry's models (Gemma 3); the link checks the model's own
ROOM_NAMES = ("room", "key", "follow", "stage")  # the presenter's own link names: a lesson never sets them
CONTROL_NAME = re.compile(r"[a-z]+\.[a-z0-9_]+")  # a page's control as its link names it: `nt.top_k`
MAX_CONTROL_CHARS = 400


def _text(limit: int):
    def check(value) -> str:
        if not isinstance(value, str):
            raise ValueError("must be text in quotes")
        if len(value) > limit:
            raise ValueError(f"is {len(value):,} characters; at most {limit:,}")
        if any(ord(c) < 32 and c not in "\n\t" for c in value):
            raise ValueError("holds a control character")
        return value
    return check


def _number(name: str):
    r = OPTION_RANGES[name]

    def check(value) -> str:
        whole = isinstance(r.lo, int)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and not isinstance(value, int)):
            raise ValueError(f"must be a {'whole ' if whole else ''}number from {r.lo} to {r.hi}")
        if not math.isfinite(value) or not r.lo <= value <= r.hi:
            raise ValueError(f"is {value}; must be from {r.lo} to {r.hi}")
        return f"{value:g}" if isinstance(value, float) else str(value)
    return check


def _top_k(value) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOP_K:
        raise ValueError(f"must be a whole number from 0 (off) to {MAX_TOP_K:,}")
    return str(value)


def _model(value) -> str:
    by_display = {spec.display_name: key for key, spec in MODELS.items()}
    if value not in MODELS and value not in by_display:
        raise ValueError(f"must be one of the app's models: {', '.join(MODELS)}")
    return MODELS[by_display.get(value, value)].key


def _one_of(options):
    def check(value) -> str:
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return value
    return check


def _logit_bias(value) -> str:
    return logit_bias_text(parse_logit_bias(_text(400)(value)))


REQUEST_CHECKS = {  # a stage's [stages.request], by the names the link gives them
    "model": _model, "format": _one_of(CHAT_FORMATS), "weights": _one_of(WEIGHT_FORMATS),
    "q": _text(MAX_MESSAGE_CHARS), "system": _text(MAX_MESSAGE_CHARS), "history": _text(MAX_MESSAGE_CHARS * 4),
    **{name: _number(name) for name in OPTION_RANGES}, "top_k": _top_k,
    "stop": _text(400), "logit_bias": _logit_bias,
}


def check_page(value) -> str:
    if value not in PAGE_URLS:
        raise ValueError(f"{str(value)[:40]!r} is not a page; one of {', '.join(PAGE_URLS)}")
    return value


def check_control(name: str, value) -> str:
    """A page's control as its link writes it: `nt.top_k = 8` -> '8', true -> '1'."""
    if name in ROOM_NAMES:
        raise ValueError("is the presenter's own link name: the room sets it")
    if not CONTROL_NAME.fullmatch(name):
        raise ValueError("is not a page's control: a control is named `prefix.key`, as in its link (`nt.top_k`)")
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float)) and math.isfinite(value):
        return f"{value:g}" if isinstance(value, float) else str(value)
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return ",".join(map(str, value))  # a multiselect or positions: '1,4,16'
    if isinstance(value, str):
        return _text(MAX_CONTROL_CHARS)(value)
    raise ValueError("must be a number, true/false, text or a list of whole numbers")


def check_poll_kind(value) -> str:
    if value not in KINDS:
        raise ValueError(f"{str(value)[:40]!r} is not a poll; one of {', '.join(KINDS)}")
    return value
