"""Stage 1, the request: the chat request and its generation options, the checks they pass when built, and the
ranges the app offers for each option. Everything is validated once, when it is built; bad input raises InputError
naming the field.

Beside it: `logit_bias.py` (a bias typed as text), `vendor_bodies.py` (the request as OpenAI's and Anthropic's JSON),
`request_lifecycle.py` (its id, its states and `check_fits`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from pipeline.core.checks import integer, typed_count
from pipeline.core.errors import InputError
from pipeline.model.registry import CHAT_FORMATS
from pipeline.model.weight_formats import check_weights
from pipeline.model.weights_cache import DEFAULT_MODEL_NAME

ROLES = ("system", "user", "assistant")

# Size limits that keep one request from holding the model or the memory for everyone else.
MAX_MESSAGE_CHARS = 64_000  # ~12-16k tokens of English: well past the 8,192-token window; refused after tokenizing
MAX_MESSAGES = 200
MAX_STOP_STRINGS = 8  # OpenAI allows 4, Anthropic more; a handful is plenty
MAX_STOP_CHARS = 200  # each; the check is linear in the new text, this bounds its constant
MAX_NEW_TOKENS = 4_096


@dataclass(frozen=True)
class GenerationOptions:
    """How the answer is chosen. Built once, validated once (in __post_init__)."""

    max_new_tokens: int = 64  # the default question's greedy answer ends by itself (eos) well before this
    temperature: float = 0.0  # 0 = greedy, so the default run is reproducible
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    min_p: float = 0.0  # 0 = off
    seed: int | None = 0  # fixed so a sampled run can be replayed
    stop: tuple[str, ...] = ()  # stop strings: generation ends once the text contains one
    # Penalties and bias change the raw scores before temperature (pipeline.stages.penalties):
    repetition_penalty: float = 1.0  # 1 = off; transformers' formula over the prompt and the answer so far
    presence_penalty: float = 0.0  # 0 = off; OpenAI's, over the answer so far (-2 to 2)
    frequency_penalty: float = 0.0  # 0 = off; OpenAI's, per earlier use in the answer (-2 to 2)
    logit_bias: tuple[tuple[int, float], ...] = ()  # (token id, bias in [-100, 100]) by id; a dict is accepted

    def __post_init__(self):
        object.__setattr__(self, "stop", _stop_tuple(self.stop))
        object.__setattr__(self, "logit_bias", logit_bias_pairs(self.logit_bias))
        if not _int(self.max_new_tokens) or not 0 < self.max_new_tokens <= MAX_NEW_TOKENS:
            raise InputError("max_new_tokens", f"must be an integer from 1 to {MAX_NEW_TOKENS:,}, "
                                               f"got {self.max_new_tokens!r}.")
        check_temperature("temperature", self.temperature)
        if not _int(self.top_k) or self.top_k < 0:
            raise InputError("top_k", f"must be 0 (off) or a positive integer, got {self.top_k!r}.")
        if not _finite(self.top_p) or not 0 < self.top_p <= 1:
            raise InputError("top_p", f"must be in (0, 1], got {self.top_p!r}.")
        if not _finite(self.min_p) or not 0 <= self.min_p <= 1:
            raise InputError("min_p", f"must be in [0, 1], got {self.min_p!r}.")
        if self.seed is not None and (not _int(self.seed) or self.seed < 0):
            raise InputError("seed", f"must be a non-negative integer, got {self.seed!r}.")
        lo, hi = MIN_REPETITION_PENALTY, MAX_REPETITION_PENALTY
        if not _finite(self.repetition_penalty) or not lo <= self.repetition_penalty <= hi:
            raise InputError("repetition_penalty", f"must be from {lo:g} to {hi:g} (1 = off), "
                                                   f"got {self.repetition_penalty!r}.")
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not _finite(value) or not -2 <= value <= 2:
                raise InputError(name, f"must be from -2 to 2 (0 = off), as OpenAI accepts, got {value!r}.")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def penalized(self) -> bool:
        """True when a penalty or a bias changes the raw scores."""
        return (self.repetition_penalty != 1 or self.presence_penalty != 0 or self.frequency_penalty != 0
                or bool(self.logit_bias))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stop"] = list(self.stop)
        d["logit_bias"] = logit_bias_body(self)
        return d


def check_temperature(field: str, t) -> float:
    """A temperature a request accepts: 0 (greedy) or from MIN_TEMPERATURE up, finite; InputError naming `field`."""
    if not _finite(t) or t < 0:
        raise InputError(field, f"must be 0 (greedy) or more, got {t!r}.")
    if 0 < t < MIN_TEMPERATURE:
        raise InputError(field, f"must be 0 (greedy) or at least {MIN_TEMPERATURE}, got {t!r}: smaller values are "
                                "greedy in all but name.")
    return float(t)


MAX_REPETITION_PENALTY = 10.0  # far past any use (1.2 is the CTRL paper's advice): a bound for a link's value
MIN_REPETITION_PENALTY = 0.01  # a seen token's score times 100; 1e-320 divided scores past float range (+inf)
MAX_LOGIT_BIAS_ENTRIES = 300  # our bound, so one request cannot carry a huge table
LOGIT_BIAS_LIMIT = 100  # OpenAI: "a bias value from -100 to 100"
MAX_TOKEN_ID = 10**9  # far past any vocabulary (Gemma 3's is 262,144): a typed id is read; the model's V checks it


def logit_bias_body(options: GenerationOptions) -> dict[str, float]:
    """{"id": bias}, as OpenAI's JSON carries it (keys are strings)."""
    return {str(i): b for i, b in options.logit_bias}


def logit_bias_pairs(bias) -> tuple[tuple[int, float], ...]:
    """A dict {id: bias} (ids may be digit strings, as in OpenAI's JSON) or (id, bias) pairs -> pairs sorted by id."""
    if isinstance(bias, dict):
        bias = list(bias.items())
    if not isinstance(bias, (list, tuple)):
        raise InputError("logit_bias", f"must map token ids to biases, got {type(bias).__name__}.")
    if len(bias) > MAX_LOGIT_BIAS_ENTRIES:
        raise InputError("logit_bias", f"at most {MAX_LOGIT_BIAS_ENTRIES} tokens, got {len(bias)}.")
    out = {}
    for pair in bias:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise InputError("logit_bias", "each entry must be a (token id, bias) pair.")
        token, value = pair
        if isinstance(token, str) and token.isascii() and token.isdigit():
            token = typed_count("logit_bias", token, "a token id", MAX_TOKEN_ID)
        if not _int(token) or token < 0:
            raise InputError("logit_bias", f"token ids must be whole numbers of at least 0, got {token!r}.")
        if not _finite(value) or not -LOGIT_BIAS_LIMIT <= value <= LOGIT_BIAS_LIMIT:
            raise InputError("logit_bias", f"the bias of token {token} must be from -{LOGIT_BIAS_LIMIT} to "
                                           f"{LOGIT_BIAS_LIMIT}, got {value!r}.")
        if token in out:
            raise InputError("logit_bias", f"token {token} is given twice.")
        out[int(token)] = float(value)
    return tuple(sorted(out.items()))


MIN_TEMPERATURE = 1e-3  # below this, logits / T overflows float64 for ordinary logits


@dataclass(frozen=True)
class Range:
    """The values the app offers for one number: lo..hi (both included) in steps of `step` (a widget's arguments
    are views/slider_args.py's)."""

    lo: int | float
    hi: int | float
    step: int | float = 1


APP_MAX_NEW_TOKENS = 256  # the app's sliders stop here: a longer answer takes minutes on a CPU


OPTION_RANGES = {  # top-k's range needs the model: option_ranges(V)
    "max_new_tokens": Range(1, APP_MAX_NEW_TOKENS), "temperature": Range(0.0, 2.0, 0.01),
    "top_p": Range(0.01, 1.0, 0.01), "min_p": Range(0.0, 1.0, 0.01),
    "seed": Range(0, 2**31 - 1),  # what a widget's integer holds, and any random generator takes
    "repetition_penalty": Range(0.5, 2.0, 0.01),  # below 1 rewards repeats; 1.1-1.3 is the usual advice
    "presence_penalty": Range(-2.0, 2.0, 0.01), "frequency_penalty": Range(-2.0, 2.0, 0.01),  # OpenAI's range
}


def option_ranges(vocab_size: int) -> dict[str, Range]:
    """Each generation option's range in the app: the sidebar's widgets, the links that carry them, the Next
    token page's controls. Top-k's top is the model's vocabulary size (49,152 for SmolLM2, 262,144 for
    Gemma 3). Every range lies inside what GenerationOptions accepts (tests/pipeline/stages/test_request_and_tokens.py
    checks it); a request from the CLI or an API body may go further (up to MAX_NEW_TOKENS new tokens,
    any temperature, any top-k)."""
    return {**OPTION_RANGES, "top_k": Range(0, integer("vocab_size", vocab_size, 1, 10**9))}


@dataclass(frozen=True)
class ChatRequest:
    """A stateless chat request: the whole history is sent every time. Validated when built."""

    messages: tuple[tuple[str, str], ...]  # (role, content), the last one is the new user question
    options: GenerationOptions = field(default_factory=GenerationOptions)
    model: str = DEFAULT_MODEL_NAME
    prompt_format: str = "chat"  # "chat": the model's chat format; "plain": the text as it is (completion)
    weights: str = "fp32"  # the weight format it runs on (pipeline.model.weight_formats): fp32, bf16, int8

    def __post_init__(self):
        object.__setattr__(self, "messages", _messages_tuple(self.messages))
        check_weights(self.weights)
        if self.prompt_format not in CHAT_FORMATS:
            raise InputError("prompt_format", f"must be one of {CHAT_FORMATS}, got {self.prompt_format!r}.")
        if not isinstance(self.options, GenerationOptions):
            raise InputError("options", "must be GenerationOptions.")
        role, content = self.messages[-1]
        if role != "user":
            raise InputError("messages", "the last message must be the user's new question.")
        if not content.strip():
            raise InputError("messages[-1].content", "the question is empty.")

    @classmethod
    def from_question(cls, question: str, system: str | None = None,
                      history: list[tuple[str, str]] | None = None,
                      options: GenerationOptions | None = None, prompt_format: str = "chat",
                      weights: str = "fp32") -> "ChatRequest":
        messages = []
        if system:
            messages.append(("system", system))
        messages.extend(history or [])
        messages.append(("user", question))
        return cls(tuple(messages), options or GenerationOptions(), prompt_format=prompt_format, weights=weights)

    @property
    def system(self) -> str | None:
        return next((c for r, c in self.messages if r == "system"), None)


def _messages_tuple(messages) -> tuple[tuple[str, str], ...]:
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InputError("messages", "the request needs at least one user message.")
    if len(messages) > MAX_MESSAGES:
        raise InputError("messages", f"at most {MAX_MESSAGES} messages, got {len(messages)}.")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, (list, tuple)) or len(message) != 2:
            raise InputError(f"messages[{i}]", "must be a (role, content) pair.")
        role, content = message
        if role not in ROLES:
            raise InputError(f"messages[{i}].role", f"must be one of {ROLES}, got {role!r}.")
        out.append((role, check_text(f"messages[{i}].content", content)))
    if not any(r == "user" for r, _ in out):
        raise InputError("messages", "the request needs at least one user message.")
    return tuple(out)


def check_text(name: str, text, limit: int | None = MAX_MESSAGE_CHARS) -> str:
    """Text a user typed: a str, valid Unicode (no lone surrogates), at most `limit` characters."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError(name, f"is not valid UTF-8 (byte {e.start}).") from None
    if not isinstance(text, str):
        raise InputError(name, f"must be text, got {type(text).__name__}.")
    if limit is not None and len(text) > limit:
        raise InputError(name, f"is {len(text):,} characters; at most {limit:,} are accepted.")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(name, f"holds a character that is not valid Unicode (position {e.start}).") from None
    return text


def _stop_tuple(stop) -> tuple[str, ...]:
    """None -> (); 'x' -> ('x',); a list or tuple of non-empty strings -> tuple."""
    if stop is None:
        return ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, (list, tuple)):
        raise InputError("stop", f"must be a string or a list of strings, got {type(stop).__name__}.")
    if len(stop) > MAX_STOP_STRINGS:
        raise InputError("stop", f"at most {MAX_STOP_STRINGS} stop strings, got {len(stop)}.")
    for s in stop:
        if not isinstance(s, str) or s == "":
            raise InputError("stop", "stop strings must be non-empty text.")
        check_text("stop", s, MAX_STOP_CHARS)
    return tuple(stop)


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _finite(x) -> bool:
    """A real number a float can hold: 10**400 is refused here rather than overflowing later."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:  # an int beyond float range
        return False


def parse_turns(text: str, field_name: str, roles: tuple[str, ...] = ROLES,
                first_role: str | None = None) -> tuple[tuple[str, str], ...]:
    """Messages typed as lines: 'system: a\\nmore\\nuser: b' -> (('system', 'a\\nmore'), ('user', 'b')).

    A line starting with one of `roles` and a colon opens a message; other lines continue it. Text
    before the first role line belongs to `first_role`, or is an error naming `field_name`.
    """
    check_text(field_name, text, MAX_MESSAGE_CHARS * 4)
    messages: list[list[str]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        role, sep, rest = line.partition(":")
        role = role.strip().lower()
        if sep and role in ROLES:
            if role not in roles:
                raise InputError(field_name, f"line {n}: {role!r} turns are not accepted here; use "
                                             f"{' or '.join(repr(r + ':') for r in roles)}.")
            messages.append([role, rest.strip()])
        elif messages:
            messages[-1][1] += "\n" + line
        elif line.strip():
            if first_role is None:
                raise InputError(field_name, f"line {n} must start with "
                                             f"{' or '.join(repr(r + ':') for r in roles)}.")
            messages.append([first_role, line])
    return tuple((r, c.strip()) for r, c in messages)
