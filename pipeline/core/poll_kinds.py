"""The kinds of question a room's poll asks, named once for the room's polls (pipeline/server/polls/) and the lesson
files that open them (pipeline/lessons/), which sit on one floor and may not import each other."""

KIND_TITLES = {  # kind: (its name, what it asks)
    "next_token": ("Next token", "what will the model write next?"),
    "tokens": ("Tokens", "how many?"),
    "temperature": ("Temperature", "will 10 draws agree?"),
    "attention": ("Attention", "which token?"),
    "prompt_caching": ("Prompt caching", "how many tokens reused?"),
}
KINDS = tuple(KIND_TITLES)  # the names a lesson file uses
MAX_QUESTION_CHARS = 300  # a question a room reads from the projector


def kind_name(kind: str) -> str:
    """'Next token'."""
    return KIND_TITLES[kind][0]


def kind_title(kind: str) -> str:
    """'Next token: what will the model write next?'."""
    return ": ".join(KIND_TITLES[kind])
