"""Sentences a walk found wrong (fast tier): a count of 0 or 1 in a sentence written for several, a number
too long to read reported as 'inf', json's message cut before its place, a folder the user never typed."""
import re

import pytest

from pipeline.core.errors import InputError


def page_texts(at) -> list[str]:
    kinds = ("markdown", "caption", "info", "warning", "error", "success", "subheader")
    return [e.value for kind in kinds for e in at.get(kind)]


@pytest.mark.parametrize("max_tokens", [1, 2, 3])
def test_journey_counts_the_decode_passes_it_names(tiny_app, max_tokens):
    """Every chosen token but the last is fed back, one decode pass each: 0 passes for a one-token answer (not 'one
    decode pass for each of the 0 tokens'), then 'the first chosen token', then a count."""
    from kit.apptest import page_app

    at = page_app("journey", req_max_new_tokens=max_tokens)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    passes = [t for t in page_texts(at) if t.startswith("This run took")]
    assert len(passes) == 1, passes
    n = int(re.match(r"This run took (\d+) forward pass", passes[0]).group(1))  # the prefill, then S - 1
    tail = {1: "and no decode pass: the one token chosen is never fed back",
            2: "then one decode pass for the first chosen token, fed back"}.get(n, f"for each of the {n - 1} tokens")
    assert tail in passes[0] and not re.search(r"\b[01] tokens\b", passes[0]), passes[0]


def test_a_bias_too_long_to_be_a_number_is_quoted_as_typed_not_inf():
    from pipeline.stages.logit_bias import parse_logit_bias

    with pytest.raises(InputError) as e:
        parse_logit_bias("13:" + "9" * 5000)
    assert "inf" not in e.value.message and "(5,000 characters)" in e.value.message, e.value.message
    assert "from -100 to 100" in e.value.message
    with pytest.raises(InputError, match=r"got '-1e400'"):
        parse_logit_bias("13:-1e400")
    assert parse_logit_bias("13:-100, 42:2.5") == ((13, -100.0), (42, 2.5))


def test_a_schema_that_is_not_json_says_where_json_stopped():
    from pipeline.stages.constrained import check_spec

    with pytest.raises(InputError) as e:
        check_spec("json_schema", '{"type": "str')
    assert e.value.message == "is not valid JSON: Unterminated string starting at line 1, column 10.", e.value.message
    with pytest.raises(InputError) as e:
        check_spec("json_schema", '{"type":\n }')
    assert e.value.message == "is not valid JSON: Expecting value at line 2, column 2.", e.value.message


def test_a_log_that_is_not_json_says_where_json_stopped():
    from pipeline.prompt_cache import audit as ca

    with pytest.raises(InputError) as e:
        ca.audit_log('{"messages": [{"role": "user", "content": "hi}]}')
    assert "Unterminated string starting at line 1, column 43." in e.value.message, e.value.message


def test_a_system_file_is_named_as_typed_and_why_it_cannot_be_written(tmp_path):
    from kit.cli import run_cli

    code, out, err = run_cli(tmp_path, "trace", "hi", "--json", "/proc/self/status")
    assert code == 2 and out == "", err
    assert "error: json: /proc/self/status cannot be written: it is under /proc" in err, err
    assert not re.search(r"/proc/\d+", err), err  # not the folder /proc/self leads to
