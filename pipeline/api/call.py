"""What an API call asks for, whichever provider's shape it came in: the conversation, the chat requests it runs
(one per draw), and how the answer is sent back."""
from __future__ import annotations

import random
from dataclasses import dataclass, replace

from pipeline.api.errors import ApiError, from_input_error
from pipeline.api.fields import MAX_HISTORY_CHARS
from pipeline.core.errors import InputError
from pipeline.stages.logit_bias import check_vocabulary
from pipeline.stages.request import ChatRequest, GenerationOptions

MAX_DRAWS = 8  # n: a client's draws each take a place in the queue (pipeline.api.access.CLIENT_SLOTS)
SEEDS = 2**31  # the pages' seeds (a link carries it): 0 to 2**31 - 1


@dataclass(frozen=True)
class ModelInfo:
    """A model the picker offers: its key, the name requests carry, its vocabulary and window, the weight format the
    server runs it in."""

    key: str
    label: str
    vocab_size: int
    context_window: int
    weights: str


@dataclass(frozen=True)
class Conversation:
    """The messages as the pages hold a request: a system prompt, earlier turns, the new question."""

    system: str | None
    history: tuple[tuple[str, str], ...]
    question: str


@dataclass(frozen=True)
class ApiCall:
    requests: tuple[ChatRequest, ...]  # one per draw (n), in order; greedy draws are one request n times
    model: ModelInfo
    stream: bool = False
    include_usage: bool = False  # OpenAI's stream_options.include_usage
    logprobs: bool = False
    top_logprobs: int = 0
    schema: str | None = None  # response_format's JSON schema as text: decoded under it (xgrammar)
    cache_marks: int = 0  # Anthropic's cache_control breakpoints


def pick_model(name, catalogue: dict[str, ModelInfo]) -> ModelInfo:
    """The model named by its key or its name (as GET /v1/models lists them); 404 for any other."""
    if not isinstance(name, str):
        raise ApiError(400, "must be a string naming a model (GET /v1/models lists them).", "model")
    info = catalogue.get(name) or catalogue.get(name.lower())
    if info is None:
        offered = ", ".join(sorted({m.label for m in catalogue.values()}))
        raise ApiError(404, f"{name[:80]!r} is not a model this server offers ({offered}).", "model")
    return info


def conversation(turns: list[tuple[str, str, str]], system: str | None) -> Conversation:
    """(role, content, field) of each user or assistant message in order, and the system prompt -> a Conversation.
    The last message is the new question (the user's); the earlier ones' and the system prompt's ends are trimmed
    as the sidebar trims them, so the run's link reopens the same request."""
    if not turns:
        raise ApiError(400, "needs at least one user message.", "messages")
    role, question, field = turns[-1]
    if role != "user":
        raise ApiError(400, "the last message must be the user's (an assistant prefill is not supported).", field)
    if not question.strip():
        raise ApiError(400, "the question is empty.", field)
    history = tuple((r, c.strip()) for r, c, _ in turns[:-1])
    if sum(len(c) for _, c in history) > MAX_HISTORY_CHARS:
        raise ApiError(400, f"the earlier messages hold more than {MAX_HISTORY_CHARS:,} characters together "
                            "(the pages' limit).", "messages")
    system = system.strip() if system is not None else None
    return Conversation(system or None, history, question)


def draws(conv: Conversation, options: GenerationOptions, model: ModelInfo, n: int,
          seed_given: bool) -> tuple[ChatRequest, ...]:
    """n chat requests on `model`: sampled draws each from its own seed (seed, seed + 1, ...: Next token's repeated
    draws), greedy ones the same request n times. A sampled call without a seed gets a random one (its link keeps
    it, so the run can be opened again)."""
    if not seed_given and not options.greedy:
        options = replace(options, seed=random.randrange(SEEDS))
    try:
        check_vocabulary(options, model.vocab_size)
        first = ChatRequest.from_question(conv.question, system=conv.system, history=list(conv.history),
                                          options=options, prompt_format="chat", weights=model.weights)
    except InputError as e:
        raise from_input_error(e) from None
    first = replace(first, model=model.label)
    if options.greedy:
        return (first,) * n
    return tuple(replace(first, options=replace(options, seed=(options.seed + i) % SEEDS)) for i in range(n))
