"""Token text made readable (pipeline/text/) and untrusted text made safe (ui/escape.py, ui/chips.py)."""
import html

from pipeline.stages.tokens import Token
from pipeline.text.byte_level import piece_bytes
from pipeline.text.readable import piece_text, render_bytes, render_text
from pipeline.text.token_names import token_text, tokens_text
from ui.chips import chip, token_chips
from ui.escape import axis_labels, code_span, html_text, plotly_label
from ui.words import plural


def test_visible_whitespace_and_bytes():
    assert render_bytes(b" the\n") == "␣the↵"
    assert render_bytes("토".encode()[:2]) == "<0xED><0x86>"
    assert render_bytes(b"\x00\x07") == "\\x00\\x07"
    assert render_bytes(b"ok\xffgo") == "ok<0xFF>go"  # valid runs decoded, the bad byte shown alone
    assert render_bytes("토".encode()) == "토"
    assert piece_bytes("Ġí") == b" \xed"
    assert piece_bytes("Ġtom") == b" tom" and piece_text("Ġtom") == "␣tom"
    assert piece_bytes("<|im_end|>") == b"<|im_end|>"  # not byte-level text: kept as UTF-8
    assert piece_bytes("a\ud800") == b"a\xed\xa0\x80"  # a lone surrogate keeps its (invalid) bytes...
    assert render_bytes(piece_bytes("a\ud800")) == "a<0xED><0xA0><0x80>"  # ...and shows as bytes


def test_render_text_escapes_invisible_characters():
    assert render_text("a\tb\r") == "a⇥b␍"
    assert render_text("\u200b\u202e") == "\\u200b\\u202e"  # zero-width space, right-to-left override
    assert render_text("\ud800") == "\\ud800"
    assert render_text("é🍅") == "é🍅"


def test_token_text_of_the_real_tokenizer(tokenizer):
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    space_tom = tokenizer.convert_tokens_to_ids("Ġtom")
    assert token_text(tokenizer, eos) == "<|im_end|>"  # special tokens keep their name
    assert token_text(tokenizer, space_tom) == "␣tom"
    ids = tokenizer("토마토 <img> \n", add_special_tokens=False)["input_ids"] + [eos]
    assert tokens_text(tokenizer, ids) == [token_text(tokenizer, i) for i in ids]
    # concatenating the pieces' bytes gives the text back
    raw = b"".join(piece_bytes(p) for p in tokenizer.convert_ids_to_tokens(ids[:-1]))
    assert raw.decode() == "토마토 <img> \n"


def _utf8_character_holding(byte: int) -> str | None:
    """A character whose UTF-8 encoding holds `byte` (None for the 13 bytes valid UTF-8 never uses)."""
    if byte < 0x80:
        return chr(byte)
    if 0x80 <= byte <= 0xBF:
        return chr(0x80 + (byte - 0x80))  # U+0080..U+00BF: C2 80 .. C2 BF
    if 0xC2 <= byte <= 0xDF:
        return bytes([byte, 0x80]).decode()
    if 0xE0 <= byte <= 0xEF:
        return bytes([byte, 0xA0 if byte == 0xE0 else 0x80, 0x80]).decode()
    if 0xF0 <= byte <= 0xF4:
        return bytes([byte, 0x90 if byte == 0xF0 else 0x80, 0x80, 0x80]).decode()
    return None


def test_the_byte_map_agrees_with_the_tokenizers_library_over_all_256_bytes():
    """The hand-built GPT-2 byte table against `tokenizers`' own ByteLevel: the same 256 characters as its
    alphabet, and for every byte a character of valid UTF-8 holding it, spelled in the table's characters,
    decodes through `decoders.ByteLevel` to that character. The 13 bytes valid UTF-8 never uses decode to
    U+FFFD there, so the library cannot give one token's raw bytes (why the table is kept)."""
    from tokenizers import decoders, pre_tokenizers

    from pipeline.text.byte_level import _byte_decoder

    table = _byte_decoder()
    char_of = {b: ch for ch, b in table.items()}
    assert sorted(char_of) == list(range(256))
    assert set(table) == set(pre_tokenizers.ByteLevel.alphabet())
    decoder, never_utf8 = decoders.ByteLevel(), []
    for byte in range(256):
        character = _utf8_character_holding(byte)
        if character is None:
            never_utf8.append(byte)
            assert decoder.decode([char_of[byte]]) == "\ufffd" and piece_bytes(char_of[byte]) == bytes([byte])
            continue
        pieces = ["".join(char_of[b] for b in character.encode())]
        assert byte in character.encode()
        assert decoder.decode(pieces) == character
        assert piece_bytes(pieces[0]) == character.encode()
    assert never_utf8 == [0xC0, 0xC1, *range(0xF5, 0x100)]


def test_piece_bytes_spells_every_piece_of_smollm2s_vocabulary_as_its_table_says(tokenizer):
    """piece_bytes (one str.translate) against the byte map read character by character: every byte-level piece of
    SmolLM2's vocabulary is the bytes its characters stand for; a piece with a character outside the map (a plain
    space, '▁', a lone surrogate, Gemma's SentencePiece text) is its UTF-8, '▁' read as a space."""
    from pipeline.text.byte_level import SENTENCEPIECE_SPACE, _byte_decoder

    table = _byte_decoder()
    pieces = [p for p in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer)))) if p is not None]
    pieces += ["a b", "▁tomatoes", "Ġ\ud83c", "\x00", "ĠtoÿĀ", "<0xG1>", "<0x41"]  # outside the map, and near misses
    for piece in pieces:
        if all(ch in table for ch in piece):
            assert piece_bytes(piece) == bytes(table[ch] for ch in piece), piece
        else:
            assert piece_bytes(piece) == piece.replace(SENTENCEPIECE_SPACE, " ").encode("utf-8", "surrogatepass"), piece
    assert piece_bytes("<0xEB>") == b"\xeb"


def test_what_is_known_per_tokenizer_is_kept_beside_it_not_written_onto_it(tokenizer):
    """Vocabulary size, special ids and the word table are computed once per tokenizer and kept in a
    weak dictionary: nothing is set on the Hugging Face object (it once got `_tpe_special_ids`), and a
    tokenizer's entry goes with it."""
    import gc

    from pipeline.stages.embeddings import same_word_ids
    from pipeline.text import per_tokenizer as memo
    from pipeline.text.pieces import token_pieces

    before = set(vars(tokenizer))
    token_text(tokenizer, 2), tokens_text(tokenizer, [1, 2]), token_pieces(tokenizer, [19, 2])
    same_word_ids(tokenizer, ["tomato"])
    assert set(vars(tokenizer)) == before

    class Counting:  # a tokenizer that counts what it is asked
        asked = 0

        def __len__(self):
            Counting.asked += 1
            return 4

        @property
        def all_special_ids(self):
            Counting.asked += 1
            return [3]

        def convert_ids_to_tokens(self, ids):
            return [["a", "b", "c", "<end>"][i] for i in ids]

    counting = Counting()
    assert [token_text(counting, i) for i in (0, 3, 3)] == ["a", "<end>", "<end>"]
    assert Counting.asked == 2  # once for the size, once for the special ids
    import weakref

    alive = weakref.ref(counting)
    assert counting in memo._memo
    del counting
    gc.collect()  # (other tokenizers that died earlier may go at the same time: count nothing else)
    assert alive() is None  # the memo held no strong reference: the tokenizer and its entry are gone


def test_plural():
    assert plural(1, "token") == "1 token"
    assert plural(2, "token") == "2 tokens"
    assert plural(12_345, "entry", "entries") == "12,345 entries"


def test_untrusted_text_is_escaped():
    evil = "<img src=x onerror=alert(1)><s>"
    assert "<" not in html_text(evil) and "<" not in plotly_label(evil)
    assert html.unescape(html_text(evil)) == evil and html.unescape(plotly_label(evil)) == evil
    assert html_text("a'b\"c") == "a&#x27;b&quot;c"  # safe inside attributes too
    assert plotly_label("&lt;") == "&amp;lt;"  # an already-escaped look-alike stays literal
    assert axis_labels(["a", "a"]) == ["(0)a", "(1)a"]
    assert axis_labels(["<s>"]) == ["(0)&lt;s&gt;"]


def test_code_span_shows_backticks_literally():
    assert code_span("x") == "` x `"
    assert code_span("a`b") == "`` a`b ``"
    assert code_span("``") == "``` `` ```"


def test_chips_escape_token_text():
    evil = "<img src=x onerror=alert(1)>"
    out = chip(evil, 7, "user", False, title="it's <b>")
    assert "<img" not in out and "&lt;img" in out and "<b>" not in out and ">7</sub>" in out
    block = token_chips([Token(0, 5, evil, "user", False), Token(1, 2, "<|im_end|>", "template", True)])
    assert "<img" not in block and "&lt;|im_end|&gt;" in block and block.count("<span") == 2


def test_highlighted_text_keeps_one_html_block_whatever_the_line_breaks(tokenizer):
    """'\\r\\r' is a blank line to Markdown: left raw, it ended the HTML block and the rest was read as Markdown."""
    from kit.markdown_links import foreign_links

    from pipeline.stages.template import Segment
    from pipeline.text.pieces import token_pieces
    from ui.chips import highlighted_template, text_spans

    hostile = "a\r\r[Log in](http://evil.example/login)\n\nb\r\n\r\nc"
    spans = text_spans(token_pieces(tokenizer, tokenizer(hostile)["input_ids"]))
    template = highlighted_template([Segment(hostile, "user", True)], [])
    for out in (spans, template):
        assert "\r" not in out and "\n" not in out
        assert not foreign_links(out), out
