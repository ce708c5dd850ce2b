"""The Traffic page against a real server.py (as ./run.sh starts it) on the tiny model: requests sent with the
official openai SDK while the page is open appear on it without a reload and open on Journey; the scripted agent of
bench/agent_traffic.py runs (quick) and reports both of its sides."""
import os
import re
import subprocess
import sys

import pytest
from kit.browser import CHROMIUM, ROOT, SHOTS, app_server, fresh_page, question_shown, settle
from kit.sdks import openai

pytestmark = pytest.mark.browser

SMOL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def server(tiny_server_cache):
    with app_server("traffic-server.log", cache_dir=tiny_server_cache, script="server.py",
                    env={"TPE_API_KEY": ""}) as url:
        yield url


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
def test_requests_sent_with_the_sdk_appear_live_and_open_on_journey(server, chromium):
    from playwright.sync_api import expect

    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=120)
    agent = client.with_options(default_headers={"User-Agent": f"{client.user_agent} traffic-test/1"})
    SHOTS.mkdir(parents=True, exist_ok=True)
    with fresh_page(chromium) as page:
        page.goto(f"{server}/traffic")
        settle(page)
        rows = page.locator("tr.tpe-traffic-row", has_text="traffic-test/1")
        expect(rows).to_have_count(0)
        answer = agent.chat.completions.create(model=SMOL, max_tokens=5, temperature=0, messages=[
            {"role": "system", "content": "You answer <b>briefly</b>."},
            {"role": "user", "content": "Where is my parcel?"}])
        expect(rows).to_have_count(1, timeout=30_000)  # drawn by the page's own refresh: no reload
        streamed = agent.chat.completions.create(model=SMOL, max_tokens=5, temperature=0, stream=True,
                                                 messages=[{"role": "user", "content": "And my refund?"}])
        for _ in streamed:  # read to its end: the record is made when the answer ends
            pass
        expect(rows).to_have_count(2, timeout=30_000)
        expect(rows.last).to_contain_text("OpenAI: cached")  # the providers' rules beside the first request
        assert page.locator("b", has_text="briefly").count() == 0  # the client's text is escaped
        page.screenshot(path=str(SHOTS / "traffic-live.png"))
        link = rows.last.get_by_role("link", name=re.compile(r"open run #\d+"))
        assert server + link.get_attribute("href") == answer.model_extra["tpe_run"]
        link.click()
        page.wait_for_url(re.compile(r"/journey\?"), timeout=30_000)
        settle(page)
        assert question_shown(page) == "Where is my parcel?"
        page.get_by_text(answer.id.removeprefix("chatcmpl-")).first.wait_for(timeout=30_000)


def test_the_scripted_agent_reports_both_sides_quick(server):
    out = subprocess.run([sys.executable, "bench/agent_traffic.py", "--quick", "--base-url", server, "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    stable, trap = json.loads(out.stdout.strip().splitlines()[-1])
    assert (stable["agent"], trap["agent"]) == ("stable", "timestamp-trap")
    assert stable["turns"] == trap["turns"] == 3
    assert 1400 <= stable["first_prompt_tokens"] < stable["last_prompt_tokens"]  # the tool results appended
    assert trap["hit_rate_after_first"] < 0.05  # the time at the top: at most its first block is ever shared
    assert stable["hit_rate_after_first"] >= trap["hit_rate_after_first"]
    assert stable["ttft_p50_s"] > 0 and trap["ttft_p95_s"] >= trap["ttft_p50_s"]
    assert "prefill time saved" in out.stdout


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
def test_anthropic_answers_whole_and_streamed_are_listed_with_their_client(server, chromium):
    import anthropic
    from playwright.sync_api import expect

    client = anthropic.Anthropic(base_url=server, api_key="unused", max_retries=0, timeout=120,
                                 default_headers={"User-Agent": "traffic-test/anthropic <script>"})
    client.messages.create(model=SMOL, max_tokens=4, messages=[{"role": "user", "content": "Hi"}],
                                   extra_body={"temperature": 0})
    with client.messages.stream(model=SMOL, max_tokens=4, messages=[{"role": "user", "content": "Hello"}],
                                extra_body={"temperature": 0}) as stream:
        stream.get_final_message()
    with fresh_page(chromium) as page:
        page.goto(f"{server}/traffic")
        settle(page)
        rows = page.locator("tr.tpe-traffic-row", has_text="traffic-test/anthropic <script>")
        expect(rows).to_have_count(2, timeout=30_000)  # the user agent shown as text, not run
        assert page.locator("tr.tpe-traffic-row script").count() == 0
