"""What a link's parameter may hold: each parameter (Param) with the parser that reads its text or refuses it (a
ValueError whose words the page shows). views/links/url_state.py copies the request's parameters,
views/links/page_controls.py names each page's."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from pipeline.core.errors import InputError
from pipeline.stages.request import (
    MAX_MESSAGE_CHARS,
    OPTION_RANGES,
    GenerationOptions,
    check_text,
    check_vocabulary,
    logit_bias_text,
    option_ranges,
    parse_logit_bias,
)


@dataclass(frozen=True)
class Param:
    key: str  # the widget's session-state key
    parse: Callable[[str], Any]  # query text -> value; raises ValueError/InputError when invalid
    show: Callable[[Any], str] = str  # value -> query text
    private: bool = False  # read from a link on arrival, never written into the address bar or a shared link


def text(limit: int = MAX_MESSAGE_CHARS) -> Callable[[str], str]:
    return lambda s: check_text("link", s, limit)


MAX_NUMBER_CHARS = 40  # a link's number is read only up to this length: int() refuses 4,301 digits in its own words


def quoted(s: str, limit: int = 80) -> str:
    """A link's value as a note quotes it: its first `limit` characters. '9' * 5000 -> "'999…999'…"."""
    return repr(s[:limit]) + ("…" if len(s) > limit else "")


def integer(lo: int, hi: int) -> Callable[[str], int]:
    def parse(s: str) -> int:
        try:
            v = int(s) if len(s) <= MAX_NUMBER_CHARS else None
        except ValueError:
            v = None
        if v is None or not lo <= v <= hi:
            raise ValueError(f"{quoted(s)} must be a whole number from {lo} to {hi}")
        return v
    return parse


def number(lo: float, hi: float) -> Callable[[str], float]:
    def parse(s: str) -> float:
        try:
            v = float(s) if len(s) <= MAX_NUMBER_CHARS else math.nan
        except ValueError:
            v = math.nan
        if not math.isfinite(v) or not lo <= v <= hi:
            raise ValueError(f"{quoted(s)} must be from {lo} to {hi}")
        return v
    return parse


def option(name: str) -> Callable[[str], int | float]:
    """Query text -> a generation option inside the app's range for it (pipeline.stages.request.option_ranges;
    top-k's top is the model's vocabulary size)."""
    def parse(s: str) -> int | float:
        r = option_ranges(_vocab_size())[name] if name not in OPTION_RANGES else OPTION_RANGES[name]
        return (integer if isinstance(r.lo, int) else number)(r.lo, r.hi)(s)
    return parse


def _vocab_size() -> int:
    from views.server.state import get_model  # the model's files only: its dimensions are known before it loads

    return get_model().config_dims.V


def logit_bias(s: str) -> str:
    """'13:-100,7:2' -> '7:2, 13:-100': token ids of this model's vocabulary, biases from -100 to 100."""
    bias = parse_logit_bias(s)
    check_vocabulary(GenerationOptions(logit_bias=bias), _vocab_size())
    return logit_bias_text(bias)


def choice(options) -> Callable[[str], Any]:
    by_text = {str(o): o for o in options}

    def parse(s: str):
        if s not in by_text:
            raise ValueError(f"must be one of {', '.join(list(by_text)[:8])}")
        return by_text[s]
    return parse


def model_name(s: str) -> str:
    """A model the sidebar offers (views.server.state.offered_models), by key or display name -> its key."""
    from pipeline.model.registry import resolve
    from views.server.state import offered_models

    offered = offered_models()[0]
    try:
        key = resolve(s).key
    except InputError:
        key = None
    if key not in offered:
        raise ValueError(f"{quoted(s)} is not a model this server offers ({', '.join(offered)})")
    return key


def room_code(s: str) -> str:
    if not re.fullmatch(r"[a-z0-9]{4,16}", s):
        raise ValueError("must be 4 to 16 lower-case letters or digits")
    return s


def presenter_key(s: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{32}", s):
        raise ValueError("must be the 32 characters of a presenter link")
    return s


def _num(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)
