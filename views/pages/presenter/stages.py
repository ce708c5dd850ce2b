"""Presenter mode's stages: each screen's title and the full page it stands for, the kind of poll the presenter's
form offers first on it, and the screens that show one section of their page (a lesson reaches those by the
section's control, not by the page alone)."""

STAGES = [  # (title, full page)
    ("The request", "views/pages/request.py"),
    ("The chat template", "views/pages/request.py"),
    ("Tokens", "views/pages/tokens.py"),
    ("Batch tensors", "views/pages/tensors.py"),
    ("Embedding lookup", "views/pages/embeddings.py"),
    ("Through every layer", "views/pages/layers/page.py"),
    ("Attention", "views/pages/attention/page.py"),
    ("Logits: a score for every token", "views/pages/next_token/page.py"),
    ("Sampling", "views/pages/next_token/page.py"),
    ("Many answers at once", "views/pages/generation/page.py"),
    ("Detokenize and stream", "views/pages/generation/page.py"),
    ("The decode loop and the KV cache", "views/pages/kv_cache/page.py"),
    ("The end token and clean-up", "views/pages/generation/page.py"),
    ("The next request: prompt caching", "views/pages/prompt_caching.py"),
]
STAGE_KINDS = {"Tokens": "tokens", "Attention": "attention", "Logits: a score for every token": "next_token",
               "Sampling": "temperature", "Many answers at once": "temperature",
               "The next request: prompt caching": "prompt_caching"}  # by stage title
SECTION_SCREENS = {"Many answers at once": "gen.branch_on"}  # title -> the link name of the section's switch


def stage_number(title: str) -> int:
    """The screen (1-based) with this title: stage_number("Tokens") -> 3."""
    return next(n for n, (t, _) in enumerate(STAGES, 1) if t == title)


def poll_kind_at(stage: int) -> str:
    """The kind of poll first offered on screen `stage` (1-based): its own, or next_token."""
    return STAGE_KINDS.get(STAGES[stage - 1][0], "next_token")


def screen_of(script: str, controls: dict[str, str]) -> int | None:
    """The screen (1-based) that shows a lesson stage of this page (its script) with these link controls: a
    section's screen where the controls turn that section on, else the page's first other screen; None where no
    screen shows the page. ("views/pages/generation/page.py", {}) -> 11; (..., {"gen.branch_on": "1"}) -> 10."""
    shown = [(n, title) for n, (title, page) in enumerate(STAGES, 1) if page == script]
    on = [n for n, title in shown if controls.get(SECTION_SCREENS.get(title, "")) == "1"]
    rest = [n for n, title in shown if title not in SECTION_SCREENS]
    return (on or rest or [None])[0]
