"""Chat template and tokenization, every token tagged with the role it came from."""
from __future__ import annotations

import re
from dataclasses import dataclass

from .options import ChatRequest
from .render import piece_bytes, render_bytes

TEMPLATE_ROLE = "template"  # text the chat template added: markers and any default system prompt


@dataclass(frozen=True)
class Segment:
    text: str
    role: str  # system | user | assistant | template
    is_content: bool  # True for text a user wrote (special-token look-alikes stay plain text)


@dataclass(frozen=True)
class Token:
    index: int
    id: int
    text: str  # readable piece (see render.render_bytes)
    role: str
    special: bool

    def to_dict(self) -> dict:
        return {"index": self.index, "id": self.id, "text": self.text, "role": self.role, "special": self.special}


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


def tokenize_segments(tokenizer, segs: list[Segment], safe: bool = True) -> tuple[list[int], list[str]]:
    """Token ids and per-token roles.

    safe=True tokenizes message contents with special tokens split, as a real service does:
    a user typing `<|im_end|>` gets plain text tokens, not the control token.
    safe=False tokenizes the whole string at once, so look-alikes become control tokens.
    """
    if not safe:
        text = "".join(s.text for s in segs)
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        bounds, pos = [], 0
        for s in segs:
            bounds.append((pos, pos + len(s.text), s.role))
            pos += len(s.text)
        roles = [next((r for a, b, r in bounds if a <= start < b), TEMPLATE_ROLE) for start, _ in enc["offset_mapping"]]
        return list(enc["input_ids"]), roles
    ids, roles = [], []
    for s in segs:
        part = tokenizer(s.text, add_special_tokens=False, split_special_tokens=s.is_content)["input_ids"]
        ids.extend(part)
        roles.extend([s.role] * len(part))
    return ids, roles


def describe_tokens(tokenizer, ids: list[int], roles: list[str]) -> list[Token]:
    special_ids = set(tokenizer.all_special_ids)
    pieces = tokenizer.convert_ids_to_tokens(ids)
    return [
        Token(i, tid, piece if tid in special_ids else render_bytes(piece_bytes(piece)), role, tid in special_ids)
        for i, (tid, piece, role) in enumerate(zip(ids, pieces, roles))
    ]


def token_bytes(tokenizer, token_id: int) -> bytes:
    return piece_bytes(tokenizer.convert_ids_to_tokens([token_id])[0])
