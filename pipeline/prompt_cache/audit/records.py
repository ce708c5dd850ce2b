"""The audit's records: what Anthropic would report for a request, where a request first differs from
the one it is compared with, one request's result, and the whole audit. Each is built once, complete.

The field order is the order of the CLI's --json output (`json_out.report_json`).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class AnthropicResult:
    """One request under Anthropic's rules, in the API's usage words where it has them."""

    cache_read_input_tokens: int = 0
    cache_creation_input_tokens: int = 0  # written, both TTLs
    cache_creation_5m: int = 0
    cache_creation_1h: int = 0
    input_tokens: int = 0  # neither read nor written
    breakpoints: list[int] = field(default_factory=list)  # token offset at the end of each breakpoint's block
    breakpoints_added: bool = False  # the request had none; the recommended ones were added
    min_tokens: int = 0  # the model's minimum cacheable prefix
    model: str = ""  # the model the minimum was read for
    refused: str | None = None  # why the API would refuse the request's breakpoints
    below_minimum: bool = False  # every breakpoint is before the minimum: nothing read or written


@dataclass(frozen=True)
class Divergence:
    """The first token where a request differs from the one compared with, and the tokens around it."""

    index: int  # token position
    request: int | None  # number of the request compared with
    where: str  # the block, in words: 'the system prompt', 'message 3 (user)'
    token: str  # this request's token there (readable text)
    other_token: str | None  # the other request's token (None: it ends there)
    before: list[str]  # the shared tokens just before
    after: list[str]  # this request's tokens just after
    other_after: list[str]  # the other request's tokens just after


@dataclass(frozen=True)
class Measured:
    """One request replayed: its tokens, what it shares with earlier requests, what each provider caches."""

    index: int  # the request's number, 1-based
    line: int  # line of the log where it starts
    shape: str  # openai-chat | openai-responses | anthropic
    model: str | None
    time_s: float  # seconds since the first request
    label: str  # the start of its last user message
    prompt_tokens: int
    output_tokens: int | None  # from the log, when it says
    shared_prefix_tokens: int  # shared with an earlier request alive under the audited provider's TTL
    shared_prefix_by_provider: dict[str, int]  # the same under each provider's TTL
    first_divergent_index: int | None  # first token not shared with any earlier request (None: all shared)
    expired_tokens: dict[str, int]  # per provider: shared, but no longer alive
    cached_tokens: dict[str, int]  # per provider: what it would report as cached
    anthropic: AnthropicResult
    blocks: list[list]  # [label, first token, end token] per block


@dataclass(frozen=True)
class Why:
    """Why a request's cache stops where it does, and the fix."""

    cause: str  # see traps.Finding
    trap: str | None  # one of traps.TRAPS, or None
    explanation: str
    fix: str
    matched_request: int | None  # number of the earlier request compared with
    divergence: Divergence | None


@dataclass(frozen=True)
class RequestRecord(Why, Measured):
    """One request's result: what was measured, then why (fields in that order)."""

    @classmethod
    def of(cls, measured: Measured, why: Why) -> RequestRecord:
        return cls(**vars(measured), **vars(why))


@dataclass
class AuditReport:
    provider: str  # the provider whose TTL decides "alive" in shared_prefix_tokens and "expired"
    tokenizer: str
    requests: list[RequestRecord]  # one per request, in the order sent
    tree: list[dict]  # prefix-tree rows for a chart (see `radix.tree_rows`)
    notes: list[str]  # what is estimated or assumed
    rules: dict  # the rules used, with their sources
    timing: dict = field(default_factory=dict)  # seconds per phase, and counts
    warnings: list[str] = field(default_factory=list)  # what makes a provider cache nothing, or refuse
