"""Constrained output the way serving engines do it: a JSON schema, a regular expression or a
choice list becomes, at every step, a mask over the whole vocabulary (xgrammar, the grammar engine
vLLM and SGLang use), and the answer is decoded under it.

Each step records how many of the V tokens the grammar allowed, the best token it refused and the
probability mass (softmax at temperature 1 over all V) that the mask took away.
"""
from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from pipeline.core.errors import InputError, json_error
from pipeline.core.maths import softmax
from pipeline.model.interface import LanguageModel
from pipeline.stages.decode_record import Decode
from pipeline.stages.generation import Answer, continue_answer, scores
from pipeline.stages.request import ChatRequest
from pipeline.text.token_names import token_text

KINDS = ("json_schema", "regex", "choice")
_COMPILE_LOCK = threading.Lock()


@dataclass(frozen=True)
class MaskStep:
    step: int
    allowed: int  # tokens the grammar allowed here, of V
    best_refused_id: int | None  # the highest-scoring token it refused
    best_refused_text: str
    mass_removed: float  # probability (T = 1, over V) of every refused token together


def _choice_regex(spec) -> str:
    """['Yes', 'No'] -> '(Yes|No)' with every alternative taken literally."""
    items = [s for s in (spec if isinstance(spec, (list, tuple)) else str(spec).split(",")) if str(s).strip()]
    if not items:
        raise InputError("choice", "give at least one allowed answer.")
    return "(" + "|".join(re.escape(str(s).strip()) for s in items) + ")"


def check_spec(kind: str, spec) -> str:
    """The grammar source as text, checked before compiling: JSON that parses, a regex that compiles."""
    if kind not in KINDS:
        raise InputError("kind", f"must be one of {', '.join(KINDS)}, got {kind!r}.")
    if kind == "choice":
        return _choice_regex(spec)
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(kind, "is empty.")
    if len(spec) > 20_000:
        raise InputError(kind, f"is {len(spec):,} characters; at most 20,000 are accepted.")
    if kind == "json_schema":
        _check_nesting("json_schema", _json_depth(spec), "brackets and braces")
        try:
            schema = json.loads(spec)
        except json.JSONDecodeError as e:
            raise InputError("json_schema", f"is not valid JSON: {json_error(e)}.") from None
        if not isinstance(schema, dict):
            raise InputError("json_schema", "must be a JSON object, e.g. {\"type\": \"object\", ...}.")
        _check_schema(schema)
        return spec
    _check_nesting("regex", _regex_depth(spec), "groups")
    for m in re.finditer(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}", spec):
        if max(int(n) for n in m.groups() if n) > MAX_REPEAT:
            raise InputError("regex", f"repeats {m.group(0)}; at most {MAX_REPEAT:,} repetitions are accepted.")
    try:
        re.compile(spec)
    except (re.error, RecursionError, OverflowError) as e:
        raise InputError("regex", f"does not compile: {e}.") from None
    return spec


MAX_DEPTH = 32  # nesting a format needs is a handful of levels; past a few hundred the parsers recurse too deep
MAX_REPEAT = 1_000  # the grammar engine unrolls {n,m}: each repetition is more grammar to compile


def _check_nesting(field: str, depth: int, what: str) -> None:
    if depth > MAX_DEPTH:
        raise InputError(field, f"nests {what} {depth:,} deep; at most {MAX_DEPTH} levels are accepted.")


def _json_depth(text: str) -> int:
    """The deepest nesting of [ and { outside strings: '{"a": [1, "[["]}' -> 2."""
    depth = deepest = 0
    for token in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[{]|[\]}]', text):
        t = token.group(0)
        if t in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif t in "]}":
            depth -= 1
    return deepest


def _regex_depth(text: str) -> int:
    """The deepest nesting of groups, escapes and character classes skipped: r'(a(\\()[(])' -> 2."""
    depth = deepest = 0
    for token in re.finditer(r"\\.|\[(?:\\.|[^\]\\])*\]?|[()]", text, re.DOTALL):
        t = token.group(0)
        if t == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif t == ")":
            depth -= 1
    return deepest


def _check_schema(schema: dict) -> None:
    """A JSON Schema must be valid against its own meta-schema ({"type": "objct"} is refused here, by name)."""
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    if "$schema" in schema and not isinstance(schema["$schema"], str):
        raise InputError("json_schema", "`$schema` must be the address of a meta-schema (a string), "
                                        f"got {type(schema['$schema']).__name__}.")
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path) or "the top level"
        raise InputError("json_schema", f"is not a valid JSON Schema at {where}: {e.message}") from None
    except (RecursionError, ValueError, OverflowError, re.error) as e:  # a $ref loop, a "pattern" re refuses
        raise InputError("json_schema", f"is not a valid JSON Schema: {e}") from None


@lru_cache(maxsize=4)
def _compiler(tokenizer, vocab_size: int):
    import xgrammar as xgr

    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
    return xgr.GrammarCompiler(info), info


@lru_cache(maxsize=64)
def _compiled(tokenizer, vocab_size: int, kind: str, source: str):
    compiler, _ = _compiler(tokenizer, vocab_size)
    try:
        with _COMPILE_LOCK:
            if kind == "json_schema":
                return compiler.compile_json_schema(source, any_whitespace=False)  # compact, as APIs answer
            return compiler.compile_regex(source)
    except Exception as e:  # the engine's own error about an unsupported schema or regex
        raise InputError("json_schema" if kind == "json_schema" else "regex",
                         f"the grammar engine refused it: {e}") from None


def compile_grammar(tokenizer, vocab_size: int, kind: str, spec):
    return _compiled(tokenizer, vocab_size, kind, check_spec(kind, spec))


class _Grammar:
    """The Constraint the decode loop asks: xgrammar's mask before each choice, its matcher after."""

    def __init__(self, lm: LanguageModel, kind: str, spec):
        import xgrammar as xgr

        self.xgr, self.lm, self.V = xgr, lm, lm.dims.V
        self.matcher = xgr.GrammarMatcher(compile_grammar(lm.tokenizer, self.V, kind, spec))
        self.bitmask = xgr.allocate_token_bitmask(1, self.V)
        self.steps: list[MaskStep] = []

    def allowed(self, answer) -> np.ndarray:
        self.matcher.fill_next_token_bitmask(self.bitmask)
        probe = torch.zeros(1, self.V)
        self.xgr.apply_token_bitmask_inplace(probe, self.bitmask)
        allowed = torch.isfinite(probe[0]).numpy()  # (V,) bool
        raw = scores(answer.logits).astype(np.float64)
        refused = np.where(allowed, -np.inf, raw)
        best = int(np.argmax(refused)) if np.isfinite(refused).any() else None
        self.steps.append(MaskStep(len(answer.generated), int(allowed.sum()), best,
                                   token_text(self.lm.tokenizer, best) if best is not None else "",
                                   float(softmax(raw)[~allowed].sum())))
        return allowed

    def accept(self, token: int, ended: bool) -> bool:
        if not self.matcher.accept_token(token) and not ended:
            raise RuntimeError(f"the grammar refused token {token}, which its own mask allowed")
        return ended or self.matcher.is_terminated()


def constrained_decode(lm: LanguageModel, kv_cache, first_logits: torch.Tensor, request: ChatRequest, kind: str, spec,
                       rid: str, started_at: float, prompt_ids=None) -> tuple[Decode, list[MaskStep]]:
    """Decode `request` from its prefill under the grammar: only allowed tokens can be chosen."""
    grammar = _Grammar(lm, kind, spec)
    answer = Answer(lm, first_logits, request.options, rid, started_at, prompt_ids=prompt_ids)
    return continue_answer(lm, kv_cache, answer, grammar), grammar.steps
