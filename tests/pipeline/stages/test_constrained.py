"""Grammar-constrained decoding with xgrammar on the real model: every answer fits its grammar."""
import json
import re

import jsonschema
import numpy as np
import pytest
from kit.tolerance import float32_tolerance

from pipeline.core.errors import InputError
from pipeline.run.trace import run_constrained_trace
from pipeline.stages.constrained import check_spec
from pipeline.stages.request import ChatRequest, GenerationOptions

SCHEMA = json.dumps({"type": "object", "properties": {"fruit": {"type": "boolean"}, "colour": {"type": "string",
                     "enum": ["red", "green", "yellow"]}}, "required": ["fruit", "colour"]})


def _run(lm, kind, spec, question="Are tomatoes fruit? Answer in JSON.", **opts):
    pytest.importorskip("xgrammar", reason="grammar-constrained decoding needs xgrammar")
    opts.setdefault("max_new_tokens", 40)
    return run_constrained_trace(ChatRequest.from_question(question, options=GenerationOptions(**opts)), lm, kind, spec)


def _allowed_by(matcher, V: int) -> np.ndarray:
    """(V,) bool: the matcher's bitmask unpacked by hand (bit j of 32-bit word k allows token 32k + j)."""
    import xgrammar as xgr

    bitmask = xgr.allocate_token_bitmask(1, V)
    matcher.fill_next_token_bitmask(bitmask)
    return np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")[:V].astype(bool)


def _every_choice_was_allowed(lm, trace, kind: str, source: str):
    """Replay the answer through a matcher of our own, compiled here from the same grammar: at every step
    the chosen token is one it allows, the recorded mask is its mask, and every token it refuses had
    probability 0 after the filters (while its raw probability was what the step says the mask removed)."""
    import xgrammar as xgr

    V = lm.dims.V
    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(lm.tokenizer, vocab_size=V))
    grammar = (compiler.compile_json_schema(source, any_whitespace=False) if kind == "json_schema"
               else compiler.compile_regex(source))
    matcher = xgr.GrammarMatcher(grammar)
    masks = trace.constraint["steps"]
    assert len(masks) == len(trace.steps) == len(trace.generated_token_ids)
    refused_seen = 0
    for mask, step, logits in zip(masks, trace.steps, trace.step_logits):
        allowed = _allowed_by(matcher, V)
        assert allowed[step.token_id], f"step {step.step}: {step.token_text!r} is not allowed by the grammar"
        assert mask.allowed == allowed.sum()
        refused = np.where(allowed, -np.inf, logits.astype(np.float64))
        assert not allowed[mask.best_refused_id] and mask.best_refused_id == int(np.argmax(refused))
        raw = np.exp(logits.astype(np.float64) - logits.max())
        raw /= raw.sum()  # softmax at T = 1 over all V, computed here
        # the same float32 scores, softmax and sums in float32 there (V terms twice), float64 here
        assert mask.mass_removed == pytest.approx(raw[~allowed].sum(), rel=float32_tolerance(V, 1.0, depth=3))
        for c in step.top:  # the ten best raw scores: refused ones the model wanted, drawn with probability 0
            if not allowed[c.id]:
                assert c.prob_after_filters == 0 and c.prob > 0, c
                refused_seen += 1
        assert matcher.accept_token(step.token_id), f"step {step.step}: our matcher refused {step.token_text!r}"
    assert matcher.is_terminated() == (trace.finish_reason == "eos")
    assert refused_seen, "no refused token among any step's candidates: the zero-probability check saw nothing"


@pytest.mark.model
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_json_schema_answers_parse_and_validate(lm, temperature):
    t = _run(lm, "json_schema", SCHEMA, temperature=temperature, seed=1)
    jsonschema.validate(json.loads(t.text), json.loads(SCHEMA))  # raises if the answer does not fit
    assert t.finish_reason == "eos"
    _every_choice_was_allowed(lm, t, "json_schema", SCHEMA)
    assert t.constraint["steps"][0].allowed < 100  # '{' and a few whitespace variants, out of 49,152
    assert t.constraint["steps"][0].mass_removed > 0.5  # the model wanted to write words first


@pytest.mark.model
def test_regex_and_choice_answers_match(lm):
    pattern = r"(Yes|No), because [a-z ]{5,40}\."
    t = _run(lm, "regex", pattern, question="Are tomatoes fruit?")
    assert re.fullmatch(pattern, t.text), t.text
    _every_choice_was_allowed(lm, t, "regex", pattern)
    c = _run(lm, "choice", ["fruit", "vegetable", "both"], question="Is a tomato a fruit or a vegetable?")
    assert c.text in ("fruit", "vegetable", "both")
    _every_choice_was_allowed(lm, c, "regex", "(fruit|vegetable|both)")  # the choice list as a regex, written here


@pytest.mark.parametrize("kind, spec, field", [("json_schema", "{not json", "json_schema"),
                                               ("json_schema", "[1, 2]", "json_schema"),
                                               ("regex", "(unclosed", "regex"), ("choice", [], "choice"),
                                               ("grammar", "x", "kind"), ("regex", "", "regex")])
def test_bad_grammars_are_refused_with_the_field(kind, spec, field):
    with pytest.raises(InputError) as e:
        check_spec(kind, spec)
    assert e.value.field == field


@pytest.mark.parametrize("kind, spec, words", [
    ("json_schema", "[" * 9_999 + "]" * 9_999, "9,999 deep"),  # RecursionError in json.loads before
    ("json_schema", '{"a":' * 2_500 + "1" + "}" * 2_500, "2,500 deep"),
    ("regex", "(" * 3_000 + "a" + ")" * 3_000, "3,000 deep"),  # RecursionError in re.compile before
    ("regex", "a{99999999999}", "{99999999999}"),  # OverflowError in re.compile before
    ("regex", "a{2,99999999999}", "at most 1,000"),
    ("json_schema", '{"type": "objct"}', "at type"),  # jsonschema's meta-schema check
    ("json_schema", '{"type": "string", "pattern": "a{99999999999}"}', "repetition"),  # OverflowError before
    ("json_schema", '{"$schema": []}', "must be the address"),  # TypeError (unhashable) in jsonschema before
    ("json_schema", '{"$schema": 5}', "must be the address"),  # AttributeError before
])
def test_grammars_that_crashed_the_parsers_are_refused(kind, spec, words):
    with pytest.raises(InputError) as e:
        check_spec(kind, spec)
    assert e.value.field == kind and words in e.value.message


def test_nesting_is_counted_outside_strings_and_classes():
    for kind, spec in (("json_schema", '{"type": "string", "enum": ["' + "[" * 100 + '"]}'),
                       ("regex", r"\(" * 100 + "[(]" * 100 + "a{1000}")):
        assert check_spec(kind, spec) == spec  # accepted as written: 100 brackets, none of them nesting
