"""Presenter mode's stages: each screen's title and the full page it stands for, and the kind of poll the
presenter's form offers first on it."""

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
    ("Detokenize and stream", "views/pages/generation/page.py"),
    ("The decode loop and the KV cache", "views/pages/kv_cache/page.py"),
    ("The end token and clean-up", "views/pages/generation/page.py"),
    ("The next request: prompt caching", "views/pages/prompt_caching.py"),
]
STAGE_KINDS = {"Tokens": "tokens", "Attention": "attention", "Logits: a score for every token": "next_token",
               "Sampling": "temperature", "The next request: prompt caching": "prompt_caching"}  # by stage title


def poll_kind_at(stage: int) -> str:
    """The kind of poll first offered on screen `stage` (1-based): its own, or next_token."""
    return STAGE_KINDS.get(STAGES[stage - 1][0], "next_token")
