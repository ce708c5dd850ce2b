"""The Cache audit page: its table in words, an example then a pasted log, bad logs shown as plain text with no live
link (AppTest on the tiny model, fixture `tiny_app`), and the same in Chromium (marker `browser`)."""
import json
import os
import re

import pytest
from kit.audit_logs import HUGE, USER_HI, anthropic_body, chat, jsonl
from kit.browser import CHROMIUM, SHOTS, fresh_page, settle

from pipeline.prompt_cache import audit as ca


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
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="Debian's chromium is not installed")
def test_page_in_chromium_draws_no_link_from_the_log(tiny_server, chromium):
    """Streamlit's own Markdown (GFM) in Debian's Chromium: a `ts` holding a link and a user message holding
    one show as text; a Claude Haiku 4.5 log says why nothing is cached. Screenshots in artifacts/browser/."""
    haiku = jsonl(*({"ts": 60 * k, "body": {**anthropic_body(1500, f"order {k}? " + EVIL, "claude-haiku-4-5")}}
                    for k in range(3)))
    with fresh_page(chromium, height=3000) as page:
        page.goto(f"{tiny_server}/cache-audit")
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


def test_page_reads_this_servers_own_traffic_as_its_log(tiny_app, monkeypatch):
    """The source "This server's traffic": the requests the API answered (pipeline.api.traffic.TRAFFIC, as server.py
    records them), audited as a log: with none yet it says so; with two sharing a long system prompt, the second
    reads the shared prefix from every provider's cache."""
    from kit.apptest import page_app

    from pipeline.api import traffic

    system = "You are the support agent. " + "Policy: refunds take five days. " * 200
    monkeypatch.setattr(traffic, "TRAFFIC", traffic.TrafficLog())  # the page imports it afresh at each run
    at = page_app("cache_audit")
    at.run()
    at.radio(key="ca_source").set_value("This server's traffic").run()
    assert not at.exception and "no request yet" in at.info[0].value
    for n, question in enumerate(["Where is my order?", "Can I return it?"]):
        body = {"model": "SmolLM2-135M-Instruct", "messages": [{"role": "system", "content": system},
                                                               {"role": "user", "content": question}]}
        traffic.TRAFFIC.add(at=1_700_000_000.0 + 60 * n, api="openai", client="OpenAI/Python",
                            model="SmolLM2-135M-Instruct", prompt_tokens=1100, cached_tokens=1024 * n, new_tokens=8,
                            ttft_s=0.4, tpot_s=0.02, answer=f"answer {n}", run_link="", streamed=False,
                            block_size=16, body=body)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    assert any("The last 2 requests this server's API answered" in c.value for c in at.caption)
    sides = next(d.value for d in at.dataframe if "OpenAI cached" in d.value.columns)
    assert sides["request"].tolist() == ["Where is my order?", "Can I return it?"]
    for provider in ("OpenAI cached", "Anthropic read", "vLLM cached"):  # the second shares the system prompt
        first, second = sides[provider].tolist()
        assert first == 0 and second >= 1024, (provider, first, second)
