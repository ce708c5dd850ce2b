"""What a link's parameter may hold: each parameter (Param) with the parser that reads its text or refuses it (a
ValueError whose words the page shows) and the writer that puts its value back into text. views/links/url_state.py
copies the request's parameters; a page declares its own beside its widgets (views/links/controls.py)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from pipeline.core.errors import InputError
from pipeline.stages.logit_bias import check_vocabulary, logit_bias_text, parse_logit_bias
from pipeline.stages.request import (
    MAX_MESSAGE_CHARS,
    OPTION_RANGES,
    GenerationOptions,
    check_text,
    option_ranges,
)


@dataclass(frozen=True)
class Param:
    key: str  # the widget's session-state key
    parse: Callable[[str], Any]  # query text -> value; raises ValueError/InputError when invalid
    show: Callable[[Any], str] = str  # value -> query text
    private: bool = False  # read from a link on arrival, never written into the address bar or a shared link
    widget: str | None = None  # the widget's own key when it is not `key` (a picker keyed by its run)


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


WIDE = 1 << 20  # a position or step: the page keeps it inside the run's own range (url_state.keep_in_range)


def boolean(s: str) -> bool:
    if s not in ("0", "1"):
        raise ValueError(f"{quoted(s)} must be 1 (on) or 0 (off)")
    return s == "1"


def _bit(v) -> str:
    return "1" if v else "0"


def numbers_from(options) -> Callable[[str], list[int]]:
    """'1,4,16' -> [1, 4, 16], each one of `options` (a multiselect)."""
    def parse(s: str) -> list[int]:
        parts = s.split(",") if s and len(s) <= MAX_NUMBER_CHARS * 8 else []
        if not s or any(p not in {str(o) for o in options} for p in parts):
            raise ValueError(f"{quoted(s)} must be some of {', '.join(map(str, options))}, comma-separated")
        return [int(p) for p in parts]
    parse.show = _joined
    return parse


def positions(most: int) -> Callable[[str], list[int]]:
    """'3,5,9' -> [3, 5, 9]: up to `most` token positions (the page keeps those its run has)."""
    def parse(s: str) -> list[int]:
        parts = s.split(",") if len(s) <= MAX_NUMBER_CHARS * most else []
        if not 1 <= len(parts) <= most:
            raise ValueError(f"{quoted(s)} must be 1 to {most} token positions, comma-separated")
        return [integer(0, WIDE)(p) for p in parts]
    parse.show = _joined
    return parse


def _joined(v) -> str:
    return ",".join(map(str, v))


def pair(hi: int) -> Callable[[str], tuple[int, int]]:
    """'3-2' -> (3, 2): a layer and a head."""
    def parse(s: str) -> tuple[int, int]:
        layer, _, head = s.partition("-")
        return integer(0, hi)(layer), integer(0, hi)(head)
    parse.show = _pair
    return parse


def _pair(v) -> str:
    return f"{v[0]}-{v[1]}"


SHOWN_BY = {boolean: _bit}  # a parser whose values are not written as str() does: its writer


def shown_by(parse: Callable[[str], Any]) -> Callable[[Any], str]:
    """How a value this parser reads is written back: numbers as '0.5' (not '0.5000001'), lists as '1,4,16', a
    layer and head as '3-2', on/off as 1/0. A parser made by positions, numbers_from or pair carries its writer."""
    return getattr(parse, "show", None) or SHOWN_BY.get(parse, _num)
