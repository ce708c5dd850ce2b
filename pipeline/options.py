"""The chat request and its generation options, validated before anything runs."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .errors import InputError

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class GenerationOptions:
    max_new_tokens: int = 48  # long enough for a short answer, short enough for 2 CPU cores
    temperature: float = 0.0  # 0 = greedy, so the default run is reproducible
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    min_p: float = 0.0  # 0 = off
    seed: int | None = 0  # fixed so a sampled run can be replayed
    stop: tuple[str, ...] = ()  # stop strings: generation ends once the text contains one

    def validate(self) -> "GenerationOptions":
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens <= 0:
            raise InputError("max_new_tokens", f"must be a positive integer, got {self.max_new_tokens!r}.")
        if not _finite(self.temperature) or self.temperature < 0:
            raise InputError("temperature", f"must be 0 (greedy) or more, got {self.temperature!r}.")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise InputError("top_k", f"must be 0 (off) or a positive integer, got {self.top_k!r}.")
        if not _finite(self.top_p) or not 0 < self.top_p <= 1:
            raise InputError("top_p", f"must be in (0, 1], got {self.top_p!r}.")
        if not _finite(self.min_p) or not 0 <= self.min_p <= 1:
            raise InputError("min_p", f"must be in [0, 1], got {self.min_p!r}.")
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            raise InputError("seed", f"must be a non-negative integer, got {self.seed!r}.")
        if any(not isinstance(s, str) or s == "" for s in self.stop):
            raise InputError("stop", "stop strings must be non-empty text.")
        return self

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d


@dataclass(frozen=True)
class ChatRequest:
    """A stateless chat request: the whole history is sent every time."""

    messages: tuple[tuple[str, str], ...]  # (role, content), the last one is the new user question
    options: GenerationOptions = field(default_factory=GenerationOptions)
    model: str = "SmolLM2-135M-Instruct"

    @classmethod
    def from_question(cls, question: str, system: str | None = None,
                      history: list[tuple[str, str]] | None = None,
                      options: GenerationOptions | None = None) -> "ChatRequest":
        messages = []
        if system:
            messages.append(("system", system))
        messages.extend(history or [])
        messages.append(("user", question))
        return cls(tuple((r, c) for r, c in messages), options or GenerationOptions())

    @property
    def system(self) -> str | None:
        return next((c for r, c in self.messages if r == "system"), None)

    def validate(self) -> "ChatRequest":
        if not self.messages or not any(r == "user" for r, _ in self.messages):
            raise InputError("messages", "the request needs at least one user message.")
        for i, (role, content) in enumerate(self.messages):
            if role not in ROLES:
                raise InputError(f"messages[{i}].role", f"must be one of {ROLES}, got {role!r}.")
            if not isinstance(content, str):
                raise InputError(f"messages[{i}].content", "must be text.")
        role, content = self.messages[-1]
        if role != "user":
            raise InputError("messages", "the last message must be the user's new question.")
        if not content.strip():
            raise InputError("messages[-1].content", "the question is empty.")
        self.options.validate()
        return self


def _finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
