"""Cache audit: the providers' published rules on hand-worked logs (OpenAI's 1,024-token start and 128-token steps,
Anthropic's breakpoints, minimums, lookback and time to live, vLLM's last token), and the words each rule is told in.

Pure logic (fast tier): no model weights.
"""
import json

import pytest
from kit.audit_logs import anthropic_body, chat, jsonl, lcp, system_of

from pipeline.core.errors import InputError
from pipeline.prompt_cache import audit as ca

RULES = ca.load_rules()
ENC = ca.encoding("o200k_base")
HEADER_SYSTEM, HEADER_USER = "<system>\n", "<user>\n"


def o200k_render(system: str, user: str) -> list[int]:
    """The token sequence of chat(system, user), built by hand: each header and text tokenized apart."""
    return sum((ENC.encode_ordinary(t) for t in (HEADER_SYSTEM, system, HEADER_USER, user)), [])


def two_questions_sharing(shared: int) -> tuple[str, list[int], list[int]]:
    """A log of two requests whose token sequences share exactly `shared` tokens."""
    overhead = len(ENC.encode_ordinary(HEADER_SYSTEM)) + len(ENC.encode_ordinary(HEADER_USER))
    system = system_of(shared - overhead)
    a, b = o200k_render(system, "Alpha question?"), o200k_render(system, "Zulu question?")
    assert lcp(a, b) == shared  # the user texts differ from their first token
    return jsonl(chat(system, "Alpha question?"), chat(system, "Zulu question?")), a, b


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


# ---- the rules and the words --------------------------------------------------------------------------
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
