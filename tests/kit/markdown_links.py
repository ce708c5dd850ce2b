"""Which links a piece of Markdown would show, as Streamlit draws it (react-markdown with remark-gfm).

markdown-it-py parses CommonMark (links, images, autolinks `<http://…>`, reference links); GFM's bare
addresses (`http://…`, `www.…`, `a@b.c`) are then found the way mdast-util-gfm-autolink-literal finds them:
with regular expressions over the text left after escapes, outside code.
"""
from __future__ import annotations

import re
from urllib.parse import urlparse

from markdown_it import MarkdownIt

# texts that are links when shown raw (the Markdown tests and the real renderer's test in test_browser_links.py)
PHISH = "[Session expired: log in again](http://evil.example/login)"
HOSTILE = [PHISH, "![x](http://evil.example/p.png)", "<http://evil.example>", "http://evil.example/login",
           "see www.evil.example now", "mail admin@evil.example", "[a][r]\n\n[r]: http://evil.example",
           "x\n\n[click](http://evil.example)", "<a href='http://evil.example'>hi</a>", "HTTPS://EVIL.EXAMPLE"]

_MD = MarkdownIt("commonmark").enable(["table", "strikethrough"])
# mdast-util-gfm-autolink-literal's two expressions (lib/index.js)
_BARE_URL = re.compile(r"(https?://|www(?=\.))([-.\w]+)([^ \t\r\n]*)", re.IGNORECASE)
_BARE_EMAIL = re.compile(r"([-.\w+]+)@([-\w]+(?:\.[-\w]+)+)")
OUR_HOSTS = {"", "localhost", "127.0.0.1"}


def links(markdown: str) -> list[str]:
    """Every address the Markdown would draw as a link or image: '[a](http://e.com) www.x.org' ->
    ['http://e.com', 'www.x.org']."""
    found = []
    for block in _MD.parse(markdown):
        if block.type == "html_block":
            found += re.findall(r"(?i)(?:href|src)\s*=\s*[\"']?([^\"'\s>]+)", block.content)
        text = ""
        for t in block.children or ():
            if t.type in ("link_open", "image"):
                found.append(t.attrs.get("href") or t.attrs.get("src") or "")
            if t.type == "html_inline":
                found += re.findall(r"(?i)(?:href|src)\s*=\s*[\"']?([^\"'\s>]+)", t.content)
            text += t.content if t.type == "text" else "\n"  # code, breaks and tags end a text run
        found += [m.group(0) for m in _BARE_URL.finditer(text)] + [m.group(0) for m in _BARE_EMAIL.finditer(text)]
    return found


def foreign_links(markdown: str) -> list[str]:
    """The links of `markdown` that leave this app (another host, or mailto:)."""
    out = []
    for url in links(markdown):
        u = urlparse(url if "://" in url or url.startswith("mailto:") else "http://" + url
                     if re.match(r"(?i)www\.|[^/]*@", url) else url)
        if u.scheme == "mailto" or (u.hostname or "") not in OUR_HOSTS:
            out.append(url)
    return out


def shown(markdown: str) -> str:
    """The text a reader sees (tags dropped, escapes and entities resolved, word joiners removed):
    'messages\\\\[-1\\\\]: *empty*' -> 'messages[-1]: empty'."""
    import html

    rendered = re.sub(r"<[^>]+>", "", _MD.render(markdown))
    return html.unescape(rendered).replace("\u2060", "").strip()
