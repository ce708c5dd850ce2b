"""What the pages say about how a model was trained, from its kind in the registry (ModelSpec.kind: 'instruct',
'base' or 'unknown'), so that no page says a base model was trained on conversations.

    template_sentence(spec)          # Request & template, above the chat template
    chat_turns_note(spec, "chat")    # where an answer is shown: what chat turns do to a base model (else None)
"""
from __future__ import annotations

TRAINED = {  # one clause per kind: how the model was trained
    "instruct": "was pretrained on plain text, then tuned on conversations written in its chat template",
    "base": "is a base model: it was only trained to continue plain text, never tuned on conversations",
    "unknown": "comes from a local folder: whether it was tuned on conversations is not known here",
}


def trained(spec) -> str:
    """'<name> was pretrained on plain text, then tuned on conversations ...' for spec (a ModelSpec)."""
    return f"{spec.display_name} {TRAINED[spec.kind]}"


def template_sentence(spec) -> str:
    """What the chat template is to this model, in one or two sentences."""
    if spec.kind == "instruct":
        return (f"{trained(spec)}, one fixed layout. The template writes each turn in that layout, and ends with an "
                "open turn for the assistant so the model's next words become the answer.")
    if spec.kind == "base":
        return (f"{trained(spec)}. The layout below ({spec.chat_format}) is written by this app; to the model it is "
                "just more text to continue, so its answer may repeat the question or run on. Plain text (in the "
                "sidebar) is what it was trained on.")
    return (f"{trained(spec)}. The template writes each turn in its own layout, and ends with an open turn for the "
            "assistant so the model's next words become the answer.")


def chat_turns_note(spec, prompt_format: str) -> str | None:
    """Where an answer is shown: what sending chat turns to a base model does; None for other models and plain text."""
    if spec.kind != "base" or prompt_format != "chat":
        return None
    return (f"{trained(spec)}. Sent chat turns, it does not answer as an assistant would; it continues the text, "
            "often repeating the question or writing words that merely follow it. Plain text (in the sidebar) is what "
            "it was trained on: start a sentence and let it finish.")
