"""The pages, in the order a request travels: the one list app.py's navigation, the sidebar's sections, Start's
list and each page's Back and Next read.

A page is a script under views/pages/: one file (`tokens.py`), or a package whose `page.py` is the script and whose
other modules are that page's own parts (`why_token/page.py` beside `why_token/qk.py`, ...)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PageEntry:
    file: str  # the script, under views/pages/: 'tokens.py', or 'why_token/page.py' for a page with parts
    title: str
    icon: str  # an emoji: drawn locally
    url: str  # the URL path, e.g. 'tokens'
    section: str  # the sidebar's heading over it

    @property
    def script(self) -> str:
        """The script's path from the repository's root: 'views/pages/why_token/page.py'."""
        return f"views/pages/{self.file}"

    @property
    def name(self) -> str:
        """The page's module or package under views/pages/: 'tokens', 'why_token'."""
        return self.file.split("/")[0].removesuffix(".py")


PAGES = tuple(PageEntry(*entry) for entry in [
    ("start.py", "Start", "🍅", "start", "The request"),
    ("journey.py", "Journey", "🧭", "journey", "The request"),
    ("request.py", "Request & template", "📨", "request", "The request"),
    ("tokens.py", "Tokens", "🔤", "tokens", "The request"),
    ("tensors.py", "Tensors & batch", "🧮", "tensors", "The request"),
    ("embeddings.py", "Embeddings", "📍", "embeddings", "Inside the model"),
    ("position.py", "Position (RoPE)", "🌀", "position", "Inside the model"),
    ("layers/page.py", "Layers", "🥞", "layers", "Inside the model"),
    ("attention/page.py", "Attention", "👀", "attention", "Inside the model"),
    ("next_token/page.py", "Next token", "🎲", "next-token", "Choosing the token"),
    ("why_token/page.py", "Why this token", "🔬", "why-token", "Choosing the token"),
    ("what_if.py", "What if", "🌿", "what-if", "Choosing the token"),
    ("constrained.py", "Constrained output", "🧩", "constrained", "Choosing the token"),
    ("generation/page.py", "Generation", "⏩", "generation", "The loop and its cache"),
    ("kv_cache/page.py", "KV cache", "🗄️", "kv-cache", "The loop and its cache"),
    ("prefill_decode/page.py", "Prefill & decode", "🏎️", "prefill-decode", "What the machine pays"),
    ("how_it_learned/page.py", "How it learned", "📉", "how-it-learned", "What the machine pays"),
    ("faster_decode/page.py", "Faster decode", "🚀", "faster-decode", "What the machine pays"),
    ("prompt_caching.py", "Prompt caching", "♻️", "prompt-caching", "Caching across requests"),
    ("cache_audit.py", "Cache audit", "🧾", "cache-audit", "Caching across requests"),
    ("traffic.py", "Traffic", "🚦", "traffic", "Caching across requests"),
    ("compare_models.py", "Compare models", "⚖️", "compare-models", "Tools for a room"),
    ("presenter/page.py", "Presenter mode", "🎓", "presenter", "Tools for a room"),
])


def page_at(url: str) -> PageEntry:
    """The page at this URL path: 'why-token' -> Why this token's entry."""
    return next(p for p in PAGES if p.url == url)


def sections() -> list[tuple[str, list[PageEntry]]]:
    """[(section, its pages in order)] in the order a request travels."""
    out: list[tuple[str, list[PageEntry]]] = []
    for page in PAGES:
        if not out or out[-1][0] != page.section:
            out.append((page.section, []))
        out[-1][1].append(page)
    return out


def neighbours(url: str) -> tuple[PageEntry | None, PageEntry | None]:
    """(the page before, the page after) `url` in PAGES; None at either end."""
    urls = [p.url for p in PAGES]
    i = urls.index(url)
    return (PAGES[i - 1] if i > 0 else None), (PAGES[i + 1] if i + 1 < len(urls) else None)
