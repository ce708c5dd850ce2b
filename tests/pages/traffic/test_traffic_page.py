"""The Traffic page (views/pages/traffic.py) in AppTest on the tiny model: empty, it says how to send a request; with
records in the server's traffic log, each is a row with its blocks, its link and the three providers' bills, beside
a chart of the hit rate and the clients side by side."""
import pytest

from pipeline.api.traffic import TRAFFIC

SYSTEM = "You are the support agent. " + "Policy: refunds take five days. " * 200


@pytest.fixture
def empty_traffic():
    TRAFFIC.clear()
    yield TRAFFIC
    TRAFFIC.clear()


def markdown_of(at) -> str:
    return "\n".join(m.value for m in at.markdown)


def test_empty_says_how_to_send_a_request(tiny_app, empty_traffic):
    from kit.apptest import page_app

    at = page_app("traffic").run()
    assert not at.exception
    assert "No request yet" in at.info[0].value
    code = "\n".join(c.value for c in at.code)
    assert "/v1" in code and "OpenAI(base_url=" in code and "curl " in code


def test_records_are_rows_with_blocks_links_and_the_providers_bills(tiny_app, empty_traffic):
    from kit.apptest import chart_data, page_app

    for n, (cached, question) in enumerate([(0, "Where is my order?"), (1024, "<b>Can</b> I return it?")]):
        body = {"model": "SmolLM2-135M-Instruct", "messages": [{"role": "system", "content": SYSTEM},
                                                               {"role": "user", "content": question}]}
        TRAFFIC.add(at=1_700_000_000.0 + n, api="openai", client="OpenAI/Python 3.63.0 <i>agent</i>",
                    model="SmolLM2-135M-Instruct", prompt_tokens=1100, cached_tokens=cached, new_tokens=8,
                    ttft_s=0.5 - 0.3 * n, tpot_s=0.02, answer=f"<script>x</script> answer {n}",
                    run_link=f"http://localhost:8501/journey?link=code{n}", streamed=bool(n), block_size=16,
                    body=body)
    at = page_app("traffic").run()
    assert not at.exception
    html = markdown_of(at)
    assert html.count("tpe-traffic-row") == 2
    assert "open run #1" in html and "open run #2" in html
    assert "href='/journey?link=code1'" in html
    assert html.count("tpe-block-hit") == 64  # 1,024 reused positions: 64 blocks of 16, the rest misses
    assert "<script>" not in html and "&lt;script&gt;" in html and "&lt;i&gt;agent" in html
    for provider in ("OpenAI: cached", "Anthropic: read", "vLLM: cached"):
        assert html.count(provider) == 2
    assert "OpenAI: cached 0" in html  # the first request: nothing earlier to share
    per_request, running = chart_data(at.get("plotly_chart")[0])[:2]
    assert list(per_request["y"]) == pytest.approx([0.0, 100 * 1024 / 1100])
    assert list(running["y"]) == pytest.approx([0.0, 100 * 1024 / 2200])
    assert at.metric[1].value == f"{1024 / 2200:.0%}"
    assert at.dataframe[0].value["requests"].tolist() == [2]


def test_what_a_client_sends_plants_no_link_on_the_page(tiny_app, empty_traffic):
    """A client's user agent, its prompt and the model's answer are shown as text: a Markdown link in them, or a
    run link pointing elsewhere, draws no link that leaves the app."""
    from kit.apptest import page_app
    from kit.markdown_links import foreign_links

    phish = "[Session expired: log in again](http://evil.example/login) www.evil.example admin@evil.example"
    TRAFFIC.add(at=1_700_000_000.0, api="anthropic", client=phish, model="SmolLM2-135M-Instruct", prompt_tokens=20,
                cached_tokens=0, new_tokens=3, ttft_s=0.1, tpot_s=None, answer=phish,
                run_link="http://evil.example/journey?link=x", streamed=True, block_size=16,
                body={"system": phish, "messages": [{"role": "user", "content": phish}]})
    at = page_app("traffic").run()
    assert not at.exception
    html = markdown_of(at)
    assert "evil.example/login" in html  # shown, as text
    assert foreign_links(html) == []
    assert "href='/journey?link=x'" in html  # the run's path, on the page's own server


def test_the_audit_runs_once_per_version_of_the_log_not_per_refresh(tiny_app, empty_traffic, monkeypatch):
    """The page refreshes every 2 s: the same records are replayed under the providers' rules once, a new record
    replays them again; the JSONL export is built when the button is clicked."""
    from kit.apptest import page_app

    from pipeline.prompt_cache import audit as ca

    replays = []
    real = ca.audit_log
    monkeypatch.setattr(ca, "audit_log", lambda text: replays.append(text) or real(text))

    def add(n: int) -> None:
        TRAFFIC.add(at=1_700_000_000.0 + n, api="openai", client="agent", model="SmolLM2-135M-Instruct",
                    prompt_tokens=40, cached_tokens=16 * n, new_tokens=2, ttft_s=0.1, tpot_s=None, answer="ok",
                    run_link="http://localhost:8501/journey?link=x", streamed=False, block_size=16,
                    body={"messages": [{"role": "user", "content": f"question {n}"}]})

    add(0)
    at = page_app("traffic").run()
    at.run()
    assert not at.exception and len(replays) == 1
    add(1)
    at.run()
    assert len(replays) == 2 and replays[1].count("\n") == 2


def test_a_record_takes_the_block_size_the_servers_prefix_cache_was_made_with(tiny_app, monkeypatch):
    from pipeline.prompt_cache.engine import PrefixCacheConfig
    from views.server.api_runs import QueueRuns
    from views.server.state import server_reuse

    assert QueueRuns.block_size() == server_reuse().config.block_size
    monkeypatch.setattr(server_reuse(), "config", PrefixCacheConfig(block_size=8))
    assert QueueRuns.block_size() == 8 != PrefixCacheConfig.block_size
