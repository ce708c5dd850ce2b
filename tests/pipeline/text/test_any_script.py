"""Any script, not only English: tokens that are parts of a character are named by that character.

Fast tests: the grouping against the real tokenizer's decode (Korean, Chinese, emoji with joiners,
flags and skin tones, accented text composed and decomposed), the analogy's exclusion of every
spelling of an input word, the entropy maths. Every page opened with a Korean and an emoji question:
tests/pages/test_any_script_pages.py; Journey's and What if's own: their page's folder in tests/pages/.
"""
import math
import unicodedata

import numpy as np
import pytest

from pipeline.stages.attention import colour_values, entropy_bits, sharpest_head, windowed
from pipeline.stages.decode_record import silent_steps
from pipeline.stages.embeddings import analogy, label_positions, same_word_ids, unit_rows, word_key
from pipeline.stages.next_token import answer_confidence
from pipeline.stages.tokens import character_counts, encode
from pipeline.text.graphemes import graphemes, utf8_chars
from pipeline.text.pieces import group_pieces, token_pieces
from pipeline.text.readable import render_text
from pipeline.text.unfinished import continuation_label

TEXTS = {
    "korean": "토마토는 과일이야?",
    "chinese": "番茄是水果吗？",
    "emoji": "Are 🍅 fruit? 👩‍🔬",
    "flags and skin tones": "🇰🇷 👍🏽 🏳️‍🌈",
    "accented (composed)": "café naïve Ångström",
    "accented (decomposed)": unicodedata.normalize("NFD", "café naïve Ångström"),
    "mixed": "Tomatoes 토마토 are 番茄 🍅!",
}


# ---- the grouping, by hand ----------------------------------------------------------------------
def test_one_korean_syllable_cut_into_bytes_is_named_by_it():
    pieces = group_pieces([b"\xed", b"\x86", b"\xa0", "마".encode()])  # 토 = ED 86 A0, then a whole 마
    assert [p.label for p in pieces] == ["토 (1/3)", "토 (2/3)", "토 (3/3)", "마"]
    assert [p.text for p in pieces[:3]] == ["<0xED>", "<0x86>", "<0xA0>"]  # the bytes are still there
    assert [(p.start, p.end) for p in pieces] == [(0, 1), (1, 2), (2, 3), (3, 6)]
    assert [(p.char_start, p.char_end) for p in pieces] == [(0, 1)] * 3 + [(1, 2)]
    assert pieces[0].with_bytes == "토 (1/3) · bytes <0xED>" and pieces[3].with_bytes == "마"


def test_a_space_and_the_start_of_a_character_share_one_token():
    pieces = group_pieces([b" \xea", b"\xb3", b"\xbc"])  # ' 과' = 20 | EA B3 BC
    assert [p.label for p in pieces] == ["␣과 (1/3)", "␣과 (2/3)", "␣과 (3/3)"]


def test_an_emoji_built_with_a_joiner_is_one_character():
    raw = "👩‍🔬".encode()  # 👩 + ZWJ + 🔬: 11 bytes, one character for a reader
    pieces = group_pieces([raw[i:i + 1] for i in range(len(raw))])
    assert {p.group_text for p in pieces} == {"👩‍🔬"} and [p.part for p in pieces] == list(range(1, 12))
    assert graphemes(raw) == [(0, 11, "👩‍🔬")]


def test_bytes_that_never_finish_a_character_stay_bytes():
    pieces = group_pieces([b"\xed", b"a", b"\xed\x86"])  # the answer stopped mid-character
    assert [p.label for p in pieces] == ["<0xED>", "a", "<0xED><0x86>"]
    assert utf8_chars(b"a\xed\x86\xa0\xed") == [(0, 1, "a"), (1, 4, "토"), (4, 5, None)]


def test_special_tokens_keep_their_names_and_are_never_grouped():
    pieces = group_pieces([b"<|im_end|>", b"\xed", b"\x86", b"\xa0"], special=[True, False, False, False],
                          texts=["<|im_end|>", "<0xED>", "<0x86>", "<0xA0>"])
    assert [p.label for p in pieces] == ["<|im_end|>", "토 (1/3)", "토 (2/3)", "토 (3/3)"]
    assert pieces[0].special and not pieces[1].special


def test_direction_overrides_are_shown_even_inside_a_character():
    assert "\u202e" not in group_pieces(["a\u202e".encode()])[0].group_text
    assert render_text("\u202e") == "\\u202e"


def test_character_counts_explain_more_tokens_than_characters():
    pieces = group_pieces([b"\xed", b"\x86", b"\xa0", b"\xeb", b"\xa7", b"\x88", b"!"])  # 토마!
    assert character_counts(pieces) == {"tokens": 7, "characters": 3, "split_characters": 2, "partial_tokens": 6}


# ---- the grouping on the real tokenizer ----------------------------------------------------------
@pytest.mark.parametrize("name", list(TEXTS))
def test_groups_match_the_tokenizers_own_decode(tokenizer, name):
    text = TEXTS[name]
    ids = encode(tokenizer, text)
    pieces = token_pieces(tokenizer, ids)
    assert b"".join(p.raw for p in pieces) == text.encode()
    assert tokenizer.decode(ids) == text
    starts = [k for k, p in enumerate(pieces) if p.part == 1]
    for a, b in zip(starts, starts[1:] + [len(pieces)]):
        group = pieces[a:b]
        decoded = tokenizer.decode(ids[a:b])
        assert "\ufffd" not in decoded, (name, a)  # a group is whole characters
        assert decoded == text[group[0].char_start:group[0].char_end]
        assert {p.group_text for p in group} == {_readable(decoded)}
        assert [p.part for p in group] == list(range(1, b - a + 1)) and {p.parts for p in group} == {b - a}
        if b - a == 1:
            assert group[0].label == group[0].text  # a whole token keeps its own text
        else:  # a part: named by its character, and alone it does not decode to text
            assert all(p.label.startswith(p.group_text) and f"({p.part}/{p.parts})" in p.label for p in group)
            assert any("\ufffd" in tokenizer.decode([i]) for i in ids[a:b])
    # groups are as small as possible: every group boundary is a character boundary
    for a in starts:
        assert "\ufffd" not in tokenizer.decode(ids[:a])


def _readable(text: str) -> str:
    from pipeline.text.graphemes import _render_grapheme

    return "".join(_render_grapheme(g) for g in _clusters(text))


def _clusters(text: str) -> list[str]:
    import regex

    return regex.findall(r"\X", text)


def test_korean_question_labels(tokenizer):
    labels = [p.label for p in token_pieces(tokenizer, encode(tokenizer, "토마토는 과일이야?"))]
    assert labels[:3] == ["토 (1/3)", "토 (2/3)", "토 (3/3)"]
    assert "␣과 (1/3)" in labels and labels[-1] == "?"
    assert not any(label.startswith("<0x") for label in labels)


def test_emoji_question_labels(tokenizer):
    labels = [p.label for p in token_pieces(tokenizer, encode(tokenizer, "Are 🍅 fruit? 👩‍🔬"))]
    assert labels[:4] == ["Are", "␣🍅 (1/3)", "␣🍅 (2/3)", "␣🍅 (3/3)"]
    assert labels[-1] == "␣👩‍🔬 (8/8)"


def test_candidates_say_what_they_do_to_an_unfinished_character(tokenizer):
    ids = encode(tokenizer, "토")  # 3 one-byte tokens
    assert continuation_label(tokenizer, [], ids[0]) == "<0xED> (byte 1 of 3)"
    assert continuation_label(tokenizer, ids[:1], ids[1]) == "<0x86> (byte 2 of 3)"
    assert continuation_label(tokenizer, ids[:2], ids[2]) == "<0xA0> → 토"
    assert continuation_label(tokenizer, ids[:2], ids[2], short=True) == "→토"
    assert continuation_label(tokenizer, [], ids[0], short=True) == "<0xED>…"
    the = encode(tokenizer, " the")[0]
    assert continuation_label(tokenizer, ids, the) == "␣the"


# ---- the analogy leaves out every spelling of its inputs ----------------------------------------
def test_word_key_ignores_spaces_and_capitals():
    assert word_key(" Paris") == word_key("PARIS") == word_key("paris ") == "paris"


def test_same_word_ids_finds_every_spelling(tokenizer):
    ids = same_word_ids(tokenizer, ["Paris"])
    spellings = {tokenizer.decode([i]) for i in ids}
    assert {" Paris", "Paris"} <= spellings
    assert all(s.strip().lower() == "paris" for s in spellings)
    assert not any("Parish" in s for s in spellings)


def test_analogy_never_returns_an_input_word_in_another_spelling(tokenizer):
    rng = np.random.default_rng(0)
    table = rng.normal(size=(len(tokenizer), 16)).astype(np.float32)  # (V, D) random rows
    # make every spelling of "japan" and "paris" point exactly where paris - france + japan points
    target = rng.normal(size=16).astype(np.float32)
    for word in ("japan", "paris", "france"):
        for i in same_word_ids(tokenizer, [word]):
            table[i] = target
    unit = unit_rows(table)
    _, top = analogy(unit, tokenizer, table, "Paris", "France", "Japan", k=20)
    assert not {word_key(r["text"].replace("␣", " ")) for r in top} & {"paris", "france", "japan"}
    _, top_all = analogy(unit, tokenizer, table, "Paris", "France", "Japan", k=5, exclude_inputs=False)
    assert word_key(top_all[0]["text"].replace("␣", " ")) in {"paris", "japan", "france"}


def test_label_positions_move_close_neighbours_apart():
    assert label_positions(np.array([[0, 0], [0.01, 0], [5, 5]])) == ["middle left", "middle right", "top center"]
    assert label_positions(np.array([[0, 0], [0, 0.01], [5, 5]])) == ["bottom center", "top center", "top center"]


# ---- entropy, by hand -----------------------------------------------------------------------------
def test_answer_confidence_worked_example():
    logits = np.log(np.array([[0.5, 0.25, 0.25], [0.9, 0.05, 0.05]]))  # (S, V) = (2, 3)
    c = answer_confidence(logits, [1, 0])
    # step 0: H = 0.5*1 + 0.25*2 + 0.25*2 = 1.5 bits -> 2^1.5 = 2.83 choices; chosen p = 0.25, rank 2
    np.testing.assert_allclose(c["prob"], [0.25, 0.9])
    np.testing.assert_allclose(c["entropy"][0], 1.5)
    np.testing.assert_allclose(c["choices"][0], 2 ** 1.5)
    h1 = -(0.9 * math.log2(0.9) + 2 * 0.05 * math.log2(0.05))  # 0.569 bits
    np.testing.assert_allclose(c["entropy"][1], h1)
    assert list(c["rank"]) == [2, 1]


def test_answer_confidence_with_masked_logits():
    c = answer_confidence(np.array([[0.0, -np.inf, 0.0, -np.inf]]), [2])  # two equal survivors
    np.testing.assert_allclose([c["prob"][0], c["entropy"][0], c["choices"][0]], [0.5, 1.0, 2.0])


def test_attention_entropy_and_the_head_to_open():
    assert entropy_bits([0.5, 0.5, 0, 0]) == pytest.approx(1.0)
    assert entropy_bits(np.full(8, 1 / 8)) == pytest.approx(3.0)
    rows = np.full((2, 2, 4), 0.25)  # (L, H, T)
    rows[0, 1] = [1.0, 0, 0, 0]  # parked on token 0 (a sink): 0 bits but nothing to see
    rows[1, 0] = [0.0, 0.1, 0.9, 0]  # focused on token 2
    assert sharpest_head(rows) == (1, 0)


def test_windowed_keeps_the_sinks_and_sums_the_middle():
    rows = np.random.default_rng(1).dirichlet(np.ones(10), size=(3, 4))  # (H, W, T) = (3, 4, 10)
    out, sinks = windowed(rows, start=6, sinks=2)
    assert sinks == 2 and out.shape == (3, 4, 2 + 1 + 4)
    np.testing.assert_allclose(out[..., 2], rows[..., 2:6].sum(-1))
    np.testing.assert_allclose(out.sum(-1), 1.0)


def test_colour_scales_map_ticks_onto_weights():
    values, ticks, texts = colour_values(np.array([0.01, 0.25]), "sqrt")
    np.testing.assert_allclose(values, [0.1, 0.5])
    assert texts[ticks.index(0.5)] == "25 %"
    values, ticks, texts = colour_values(np.array([0.0, 0.001]), "log")
    np.testing.assert_allclose(values, [-4, -3])
    assert texts == ["0.01 %", "0.1 %", "1 %", "10 %", "100 %"]


def test_silent_steps_name_why_a_token_sent_no_text():
    pieces = group_pieces([b"\xed", b"\x86", b"\xa0", b"<|im_end|>"], special=[False, False, False, True],
                          texts=["<0xED>", "<0x86>", "<0xA0>", "<|im_end|>"])
    events = [{"event": "text_delta", "delta": "토", "step": 2}]
    assert silent_steps(4, events, pieces, "eos") == {"end": [3], "character": [0, 1], "other": []}


# ---- spelled names, mean log probability, prefill passes ---------------------------------------


def test_spelled_names_a_character_cut_short_by_its_parts(tokenizer):
    from pipeline.stages.tokens import encode
    from pipeline.text.pieces import spelled, token_pieces

    pieces = token_pieces(tokenizer, encode(tokenizer, "Hi 토마"))  # Hi | ␣토 in 3 | 마 in 3
    assert [spelled(pieces, n) for n in (1, 2, 3, 4, 7)] == ["Hi", "Hi␣토 (1/3)", "Hi␣토 (1–2/3)", "Hi␣토", "Hi␣토마"]
    assert spelled(pieces[2:4]) == "␣토 (2–3/3)"  # a slice that starts inside a character


def test_mean_log_probability_worked_example():
    from types import SimpleNamespace

    from pipeline.run.statistics import mean_log_probability

    logits = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [0.25, 0.25, 0.5]]))
    steps = [SimpleNamespace(token_id=i) for i in (0, 1, 2)]
    t = SimpleNamespace(step_logits=logits, steps=steps)
    assert mean_log_probability(t, 1) == pytest.approx((np.log(0.8) + np.log(0.5)) / 2)


def test_prefill_passes_follow_the_chunking():
    from pipeline.model.prefill_record import FULL_ATTENTION_MAX_TOKENS, PREFILL_CHUNK, prefill_passes

    assert prefill_passes(300) == 1 and prefill_passes(FULL_ATTENTION_MAX_TOKENS) == 1
    assert prefill_passes(612) == 2 == -(-612 // PREFILL_CHUNK)
