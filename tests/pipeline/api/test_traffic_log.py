"""The API's traffic log (pipeline/api/traffic.py) and the Traffic page's rows (ui/traffic_rows.py), fast tier: the
ring's bound, many threads adding at once, the prefix blocks from the reused positions, the export the cache audit
reads, and untrusted text escaped."""
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.api.traffic import (
    BODY_KEPT_CHARS,
    TrafficLog,
    audit_log_text,
    by_client,
    hit_rates,
    prefix_blocks,
)
from pipeline.prompt_cache import audit as ca
from ui.traffic_rows import block_chips, request_row

SYSTEM = "You are the support agent. " + "Policy: refunds take five days. " * 200


def add(log: TrafficLog, prompt: int = 40, cached: int = 0, client: str = "OpenAI/Python 3.63.0", body=None,
        answer: str = "Hello", ttft: float | None = 0.25, at: float = 1_700_000_000.0):
    return log.add(at=at, api="openai", client=client, model="SmolLM2-135M-Instruct", prompt_tokens=prompt,
                   cached_tokens=cached, new_tokens=5, ttft_s=ttft, tpot_s=0.02, answer=answer,
                   run_link="http://localhost:8501/journey?link=abc", streamed=False, block_size=16, body=body)


def test_blocks_are_hits_only_where_wholly_inside_the_reused_positions():
    assert prefix_blocks(40, 32, 16) == [True, True, False]
    assert prefix_blocks(40, 31, 16) == [True, False, False]  # block 1 is reused but for its last token: a miss
    assert prefix_blocks(40, 0, 16) == [False, False, False]
    assert prefix_blocks(32, 32, 16) == [True, True]
    assert prefix_blocks(0, 0, 16) == []


@given(st.integers(0, 5000), st.integers(0, 5000), st.integers(1, 64))
def test_blocks_cover_the_prompt_and_hits_are_a_prefix(prompt, reused, size):
    blocks = prefix_blocks(prompt, min(reused, prompt), size)
    assert len(blocks) == -(-prompt // size)
    hits = sum(blocks)
    assert blocks == [True] * hits + [False] * (len(blocks) - hits)
    assert hits == (min(reused, prompt) // size if min(reused, prompt) < prompt else len(blocks))


def test_the_ring_keeps_the_latest_records_and_counts_them_all():
    log = TrafficLog(max_records=10)
    for i in range(25):
        add(log, prompt=i + 1)
    kept = log.records()
    assert [r.number for r in kept] == list(range(16, 26))
    assert [r.prompt_tokens for r in kept] == list(range(16, 26))
    assert log.count == 25


def test_many_threads_adding_at_once_lose_and_repeat_nothing():
    log, threads, each = TrafficLog(max_records=50), 8, 400
    start = threading.Barrier(threads)

    def send():
        start.wait()
        for _ in range(each):
            add(log)
            log.records()  # readers beside the writers

    workers = [threading.Thread(target=send) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert log.count == threads * each
    assert [r.number for r in log.records()] == list(range(threads * each - 49, threads * each + 1))


def test_hit_rates_per_request_and_running():
    log = TrafficLog()
    add(log, prompt=10, cached=0)
    add(log, prompt=30, cached=20)
    (n1, h1, run1), (n2, h2, run2) = hit_rates(log.records())
    assert (n1, h1, run1) == (1, 0.0, 0.0)
    assert n2 == 2 and h2 == pytest.approx(2 / 3) and run2 == pytest.approx(0.5)


def test_by_client_puts_two_agents_side_by_side():
    log = TrafficLog()
    for cached, client, ttft in [(0, "a", 1.0), (0, "b", 2.0), (32, "a", 0.5), (0, "b", 2.2)]:
        add(log, prompt=40, cached=cached, client=client, ttft=ttft)
    a, b = by_client(log.records())
    assert (a["client"], a["requests"], a["hit_rate"], a["ttft_p50_s"]) == ("a", 2, 32 / 80, 0.75)
    assert (b["client"], b["hit_rate"], b["ttft_p95_s"]) == ("b", 0.0, 2.2)


def test_the_export_is_a_log_the_cache_audit_reads_with_its_times_and_output():
    log = TrafficLog()
    body = {"model": "SmolLM2-135M-Instruct", "messages": [{"role": "system", "content": SYSTEM},
                                                           {"role": "user", "content": "Where is my order?"}]}
    add(log, body=body, at=1_700_000_000.0)
    add(log, body={**body, "messages": [*body["messages"][:1], {"role": "user", "content": "Can I return it?"}]},
        at=1_700_000_010.0)
    add(log, body={"messages": [{"role": "user", "content": "x" * BODY_KEPT_CHARS}]})  # too long: not kept
    assert log.records()[2].body is None
    requests = ca.parse_log(audit_log_text(log.records()))
    assert [r.ts for r in requests] == [1_700_000_000.0, 1_700_000_010.0]
    assert [r.output_tokens for r in requests] == [5, 5]
    report = ca.audit_log(audit_log_text(log.records()))
    second = report.requests[1]
    assert second.cached_tokens["openai"] >= 1024  # the long system prompt is shared: OpenAI caches from 1,024
    assert second.cached_tokens["vllm"] > 0


def test_a_row_escapes_what_the_client_and_the_model_wrote():
    log = TrafficLog()
    r = add(log, prompt=48, cached=32, client="<script>alert(1)</script>", answer="<img src=x onerror=alert(1)>")
    html = request_row(r)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<img" not in html and "&lt;img" in html
    assert html.count("tpe-block-hit") == 2 and html.count("tpe-block-miss") == 1
    assert "href='/journey?link=abc'" in html  # on the page's own server: the host was the client's to choose


@pytest.mark.parametrize("link", ["javascript:alert(1)", "//evil.example/journey", "data:text/html,x",
                                  "http://evil.example//evil.example/x"])
def test_a_link_that_is_not_a_path_on_this_server_is_not_drawn(link):
    r = add(TrafficLog())
    html = request_row(r.__class__(**{**vars(r), "run_link": link}))
    assert "evil" not in html and "href" not in html and "javascript:" not in html


def test_past_the_most_chips_the_rest_are_counted():
    html = block_chips([True] * 100, 16)
    assert html.count("tpe-block-hit") == 64 and "+36 blocks" in html


def test_hits_and_misses_take_the_prompt_cache_rows_colours():
    """One colour scheme for a hit and a miss: the prompt-cache block rows' (ui/cache_blocks.py)."""
    from pipeline.prompt_cache.outcomes import HIT, MISS
    from ui.cache_blocks import STATUS_STYLE
    from ui.traffic_rows import legend

    html = block_chips([True, False], 16) + legend()
    for status in (HIT, MISS):
        background, border = STATUS_STYLE[status]
        assert html.count(f"background:{background};border:{border}") == 2  # its chip and its legend


def test_the_version_changes_with_every_add_and_clear_and_names_one_list_of_records():
    log = TrafficLog()
    seen = [log.versioned()]
    add(log)
    seen.append(log.versioned())
    add(log)
    seen.append(log.versioned())
    log.clear()
    seen.append(log.versioned())
    assert len({v for v, _ in seen}) == 4
    assert [len(records) for _, records in seen] == [0, 1, 2, 0]
    assert log.versioned() == seen[-1] and log.count == 2
