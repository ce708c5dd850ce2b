"""Token text made readable (minbpe's render_token), one module per job:

- `byte_level`: GPT-2's byte map, a byte-level BPE piece ('Ġtom') -> the raw bytes it stands for;
- `readable`: bytes or text -> what a page shows (spaces and newlines visible, broken UTF-8 as <0xNN>);
- `token_names`: a tokenizer's ids -> readable text (special tokens keep their names);
- `per_tokenizer`: what is computed once per tokenizer, kept beside it (never written onto it);
- `graphemes`: bytes cut into UTF-8 characters and into characters as a reader sees them;
- `pieces`: every token placed in the characters it spells (`Piece`: '토 (1/3)');
- `unfinished`: tokens that start or end inside a character (an answer cut mid-character, a candidate
  that completes one);
- `stream_detokenizer`: ids -> text deltas that never need taking back (a streamed answer);
- `counts`: a count with its noun, in English (the one plural helper).

Token text is untrusted: it may hold `<img ...>`, `<s>` or control characters. This package only
makes it readable; escaping it for HTML or plotly is the views' job (`ui/escape.py`).
"""
