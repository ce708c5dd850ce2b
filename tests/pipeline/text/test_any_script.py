"""Any script, not only English: tokens that are parts of a character are named by that character.

Fast tests: the grouping against the real tokenizer's decode (Korean, Chinese, emoji with joiners,
flags and skin tones, accented text composed and decomposed), the analogy's exclusion of every
spelling of an input word, the entropy maths. `app` tests: every page opened with a Korean and an
emoji question, without an exception and with the character in the page's labels.
"""
import json
import math
import os
import re
import unicodedata

import numpy as np
import pytest
from kit.texts import KOREAN, LONG_QUESTION

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


# ---- every page, opened with a Korean and an emoji question -----------------------------------
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VIEWS = ["journey", "request", "tokens", "tensors", "embeddings", "position", "layers",
         "attention", "next_token", "generation", "kv_cache", "prompt_caching"]  # every stage page, in order
NAMES_PROMPT_TOKENS = {"journey", "request", "tokens", "embeddings", "position", "layers", "attention"}
QUESTIONS = {"korean": (KOREAN, "토"), "emoji": ("Are 🍅 fruit? 👩‍🔬", "🍅")}


def page_strings(at) -> str:
    """Everything a page names: markdown (HTML too), captions, plotly specs, tables, widget options, code."""
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [c.value for c in at.code]
    parts += [json.dumps(json.loads(c.proto.spec), ensure_ascii=False) for c in at.get("plotly_chart")]
    parts += [df.value.to_string() for df in at.dataframe]
    parts += [str(o) for box in list(at.selectbox) + list(at.multiselect) for o in box.options]
    parts += [j.proto.body for j in at.json]
    return " ".join(parts)


@pytest.mark.parametrize("lang", list(QUESTIONS))
@pytest.mark.parametrize("view", VIEWS)
def test_every_page_names_tokens_by_their_character(view, lang, tiny_app):
    from kit.apptest import page_app

    question, char = QUESTIONS[lang]
    at = page_app(view, req_question=question, req_max_new_tokens=12)  # the answer's length does not matter here
    at.run()
    assert not at.exception, at.exception
    text = page_strings(at)
    if view in NAMES_PROMPT_TOKENS:
        assert char in text, f"{view}: {char} not in the page's labels"
    if view in {"tokens", "journey", "attention", "layers", "embeddings", "position"}:
        grouped = [f"{char} (1/", f"␣{char} (1/",  # axis and table labels: '토 (1/3)'
                   f"part 1 of 3 of {char}", f"part 1 of 3 of ␣{char}"]  # a chip's title, under the bracket
        assert any(g in text for g in grouped), f"{view}: no grouped label for {char}"


# ---- What if and the cut answer, in Korean -------------------------------------------------------


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


@pytest.mark.app
def test_what_if_names_answer_tokens_by_their_character():
    """Step 5 sits inside 토: the answer so far and the candidates are named as Journey names them,
    never as bare bytes ('answer so far: …<0xED><0x86>', '<0xA0> (id 117)')."""
    from kit.apptest import page_app

    at = page_app("what_if", req_question=KOREAN, req_max_new_tokens=8, br_step=5)
    at.run()
    assert not at.exception, at.exception
    so_far = at.code[0].value
    assert "토 (1–2/3)" in so_far and "<0xED><0x86>" not in so_far, so_far
    assert "토 (3/3)" in so_far  # the run's own choice at step 5 completes it
    options = at.selectbox(key="br_pick").options
    bare = [o for o in options if o.startswith("<0x") and not any(w in o for w in ("→", "byte", "continues"))]
    assert not bare, bare
    at.text_input(key="br_typed").input("토마토").run()  # a typed token is named the same way
    typed = [c.value for c in at.caption if "starts with token" in c.value]
    assert typed and not re.search(r"token `+ <0x[0-9A-F]{2}> `+", typed[0]), typed
    at.button(key="br_go").click().run()
    assert not at.exception, at.exception
    sides = [m.value for m in at.markdown if "per token" in m.value]
    assert len(sides) == 2 and all("from step 5 on" in m for m in sides)


@pytest.mark.app
def test_journey_says_a_korean_answer_was_cut_and_sends_no_u_fffd():
    """5 tokens end after 2 of 토's 3 bytes: no '�' in a text_delta or the completed text, and the page says so."""
    from kit.apptest import page_app

    at = page_app("journey", req_question=KOREAN, req_max_new_tokens=5)
    at.run()
    assert not at.exception, at.exception
    assert any("The answer was cut" in i.value and "<0xED><0x86>" in i.value for i in at.info)
    assert not any("\ufffd" in c.value for c in at.code)  # the deltas and the completed event


def test_journey_tells_one_story_about_a_long_prefill(tiny_app):
    """Over 512 tokens the prefill runs in chunks: section 4 must not say 'one pass' while section 7 says 2."""
    from kit.apptest import page_app

    at = page_app("journey", req_question=LONG_QUESTION, req_max_new_tokens=3)
    at.run()
    assert not at.exception, at.exception
    section4 = next(m.value for m in at.markdown if "Each token id picks one row" in m.value)
    assert "one pass" not in section4 and "2 passes of up to 512 tokens" in section4, section4
    assert any("a prefill in 2 chunks of up to 512 tokens" in c.value for c in at.caption)


def test_request_and_tokens_pages_say_which_text_their_character_counts_count(tokenizer, tiny_app):
    """R&T once said 'Characters in the prompt 165', Tokens '114 characters but 66 tokens' for the same Korean
    request. Both count the whole prompt; they differ only by the markers, letter by letter vs one each."""
    import re

    from kit.apptest import page_app

    from ui.escape import code_span

    rt = page_app("request", req_question=KOREAN)
    rt.run()
    assert not rt.exception, rt.exception
    letters = next(m for m in rt.metric if m.label == "Characters in the whole prompt text")
    assert f"{code_span('<|im_start|>')} alone is 12" in letters.proto.help  # the marker read from the template
    tk = page_app("tokens", req_question=KOREAN)
    tk.run()
    assert not tk.exception, tk.exception
    info = next(i.value for i in tk.info if i.value.startswith("Your whole prompt has"))
    assert f"template included; each marker such as {code_span('<|im_start|>')} counts as one" in info
    read = int(re.search(r"has ([\d,]+) characters", info).group(1).replace(",", ""))
    from pipeline.stages.request import ChatRequest
    from pipeline.stages.tokens import tokenize_request

    tokens = tokenize_request(tokenizer, ChatRequest.from_question(KOREAN)).tokens
    markers = [t.text for t in tokens if t.special]
    assert markers and int(str(letters.value).replace(",", "")) - read == sum(len(m) - 1 for m in markers)
