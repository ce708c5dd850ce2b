"""Ids to text deltas that never need taking back: the streaming detokenizer of the decode loop."""
from __future__ import annotations

from pipeline.text.unfinished import unfinished_end

DETOKENIZE_CONTEXT = 6  # earlier tokens re-decoded with each new one, so merges across tokens come out right


class StreamDetokenizer:
    """Turns ids into text deltas that never need taking back, in time linear in the answer.

    Each new token is decoded together with a few tokens before it (merges across tokens and
    multi-byte characters come out right without decoding the whole answer again). Held back
    until the next token decides: a partial UTF-8 character, and any tail that could be the start
    of a stop string (stop " to this": "The answer to" is sent as "The answer").
    """

    def __init__(self, tokenizer, stop: tuple[str, ...] = ()):
        self.tokenizer = tokenizer
        self.stop = tuple(stop)
        self.longest_stop = max((len(s) for s in self.stop), default=0)
        self.ids: list[int] = []
        self.prefix_offset = 0  # ids[prefix_offset:read_offset] are decoded again as context
        self.read_offset = 0  # ids before this are in `text`
        self.text = ""  # everything decoded so far (cut at a stop string once one appears)
        self.emitted = ""
        self.stopped = False
        self.cut_bytes = b""  # an unfinished character's bytes the answer ended on (see flush)

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        added = self._decode_new()
        if added is None:
            return ""  # wait for the rest of a multi-byte character
        if self._add(added):
            return self._emit(self.text)
        return self._emit(self.text[:len(self.text) - self._stop_prefix_len()])

    def flush(self) -> str:
        """At the end of generation: send whatever was held back, except a character left unfinished
        (the answer was cut between its bytes): it is never sent, as mid-answer, so the text never ends
        in U+FFFD. Its bytes stay in `cut_bytes` (b'' if the answer ended on a whole character)."""
        if not self.stopped and self.read_offset < len(self.ids):
            added = self._decode_new(final=True)
            self.cut_bytes = unfinished_end(self.tokenizer, self.ids)
            replaced = len(self.cut_bytes.decode("utf-8", errors="replace"))  # U+FFFD the decoder made of them
            if self.cut_bytes and added.endswith("\ufffd" * replaced):
                added = added[:len(added) - replaced]
            self._add(added)
        return self._emit(self.text)

    def _add(self, added: str) -> bool:
        """Append newly decoded text; cut it at the first stop string. True once stopped."""
        searched_from = max(0, len(self.text) - self.longest_stop + 1)
        self.text += added
        cut = min((i for i in (self.text.find(s, searched_from) for s in self.stop) if i >= 0), default=-1)
        if cut >= 0:
            self.text, self.stopped = self.text[:cut], True
        return self.stopped

    def _decode_new(self, final: bool = False) -> str | None:
        decode = lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
        before = decode(self.ids[self.prefix_offset:self.read_offset])
        now = decode(self.ids[self.prefix_offset:])
        if not final and (now.endswith("\ufffd") or len(now) < len(before)):
            return None
        self.prefix_offset = max(self.read_offset, len(self.ids) - DETOKENIZE_CONTEXT)
        self.read_offset = len(self.ids)
        return now[len(before):]

    def _stop_prefix_len(self) -> int:
        """Length of the longest tail of the text that a stop string starts with (< that stop's length)."""
        best = 0
        for s in self.stop:
            tail = self.text[-(len(s) - 1):] if len(s) > 1 else ""
            for i in range(len(tail)):  # at most len(s) - 1 starts, each a C-level comparison
                if s.startswith(tail[i:]):
                    best = max(best, len(tail) - i)
                    break
        return best

    def _emit(self, upto: str) -> str:
        delta = upto[len(self.emitted):]
        self.emitted = upto
        return delta
