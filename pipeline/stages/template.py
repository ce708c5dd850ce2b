"""Stage 2, the chat template: the messages written into the one text the model reads, cut into
segments that say who wrote each stretch (a message's role, or the template itself)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.stages.request import ChatRequest

TEMPLATE_ROLE = "template"  # text the chat template added: markers and any default system prompt


@dataclass(frozen=True)
class Segment:
    text: str
    role: str  # system | user | assistant | template
    is_content: bool  # True for text a user wrote (special-token look-alikes stay plain text)

    def to_json(self) -> dict:
        return {"text": self.text, "role": self.role}


_MARK = "\ue000{}\ue001"  # private-use characters around a message number: a placeholder no template writes
_MARK_RE = re.compile("(\ue000\\d+\ue001)")


def render_prompt(tokenizer, request: ChatRequest, chat_template: str | None = None) -> str:
    messages = [{"role": r, "content": c} for r, c in request.messages]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                         chat_template=chat_template)


def segments(tokenizer, request: ChatRequest, chat_template: str | None = None) -> list[Segment]:
    """Split the rendered prompt into template text and message contents.

    The template is rendered once more with a placeholder as each message's content, so the
    contents are located by construction, never by searching (a question such as "a" or "user"
    also occurs inside the template's own text). Whatever lies between placeholders is what the
    template added.
    """
    prompt_text = render_prompt(tokenizer, request, chat_template)
    marked = ChatRequest(tuple((r, _MARK.format(i)) for i, (r, _) in enumerate(request.messages)))
    out = []
    for piece in _MARK_RE.split(render_prompt(tokenizer, marked, chat_template)):
        number = piece[1:-1] if _MARK_RE.fullmatch(piece) else None
        if number is not None:
            role, content = request.messages[int(number)]
            if content:
                out.append(Segment(content, role, True))
        elif piece:
            out.append(Segment(piece, TEMPLATE_ROLE, False))
    if "".join(seg.text for seg in out) != prompt_text:  # a template that rewrites contents
        return _segments_by_search(prompt_text, request)
    return out


def _segments_by_search(prompt_text: str, request: ChatRequest) -> list[Segment]:
    """Fallback: locate each (possibly rewritten) content in order, searching after the previous one."""
    out, cursor = [], 0
    for role, content in request.messages:
        start = prompt_text.find(content, cursor) if content else -1
        if start < 0:
            continue
        if start > cursor:
            out.append(Segment(prompt_text[cursor:start], TEMPLATE_ROLE, False))
        out.append(Segment(content, role, True))
        cursor = start + len(content)
    if cursor < len(prompt_text):
        out.append(Segment(prompt_text[cursor:], TEMPLATE_ROLE, False))
    return out


def default_system_prompt(tokenizer, request: ChatRequest, chat_template: str | None = None) -> str | None:
    """The system prompt the template adds by itself when the request has none (SmolLM2 adds one).

    Found by rendering a one-word request with and without an empty system message: the text of
    the template's system turn that the request did not supply. None if the template adds none.
    """
    if request.system is not None:
        return None
    probe = ChatRequest((("user", "x"),))
    with_empty = ChatRequest((("system", ""), ("user", "x")))
    plain, empty = render_prompt(tokenizer, probe, chat_template), render_prompt(tokenizer, with_empty, chat_template)
    if plain == empty:
        return None
    # The default sits where an empty system message leaves nothing: the first place they differ.
    start = next((i for i, (a, b) in enumerate(zip(plain, empty)) if a != b), min(len(plain), len(empty)))
    end_plain, end_empty = len(plain), len(empty)
    while end_plain > start and end_empty > start and plain[end_plain - 1] == empty[end_empty - 1]:
        end_plain, end_empty = end_plain - 1, end_empty - 1
    added = plain[start:end_plain].strip()
    return added or None


@dataclass(frozen=True)
class TurnMarkers:
    """The marker tokens the template writes around a turn, read from the template itself:
    SmolLM2 '<|im_start|>' and '<|im_end|>', Gemma 3 '<start_of_turn>' and '<end_of_turn>'.
    None where a template writes no marker token there."""

    start: str | None  # the last marker before a turn's role and content
    end: str | None  # the first marker after its content


def turn_markers(tokenizer, chat_template: str | None = None) -> TurnMarkers:
    """Found by rendering a one-message request whose content is a placeholder: the marker tokens (the
    tokenizer's special and added tokens) nearest before and after it."""
    rendered = render_prompt(tokenizer, ChatRequest((("user", _MARK.format(0)),)), chat_template)
    before, _, after = rendered.partition(_MARK.format(0))
    markers = set(tokenizer.all_special_tokens) | set(tokenizer.get_added_vocab())
    markers = [m for m in markers if m and not m.isspace()]  # Gemma adds runs of newlines as tokens: not markers
    start = max(markers, key=lambda m: (before.rfind(m), len(m)), default=None)
    end = min(markers, key=lambda m: (after.find(m) % (len(after) + 1), -len(m)), default=None)
    return TurnMarkers(start if start is not None and start in before else None,
                       end if end is not None and end in after else None)
