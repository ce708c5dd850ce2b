"""Tokens: the prompt cut into pieces, each with its id; and the same text through other tokenizers."""
import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.core.errors import InputError
from pipeline.stages.template import turn_markers
from pipeline.stages.tokens import (
    Token,
    character_counts,
    compare,
    cost_table,
    encode_model,
    encode_other,
    other_pieces,
    role_counts,
    text_tokens,
)
from pipeline.text.pieces import token_pieces
from ui.chips import legend, text_spans, token_chips
from ui.escape import code_span, markdown_text
from ui.words import plural
from views.chrome.frame import end_page, page_header
from views.chrome.navigation import back_next
from views.links.controls import linked
from views.links.params import text as link_text
from views.request.model_pair import compared_keys, model_handle
from views.request.runs import run_for_page
from views.request.typed_text import typed_text
from views.server.state import get_model

CHIPS_SHOWN = 200  # chips drawn before the rest fold under "N more tokens below" (a long prompt stays short)
TEXT_LABEL = "Text to tokenize"
# The box's limits, in characters and in this model's tokens: the chips of 8 tokenizers are drawn, and the browser
# takes the time (Chromium on a busy 2-core machine: 4,000 characters of English, 744 tokens, 2.5 s; 4,000 of the
# sample below, 2,115 tokens, 4.5 s; the server's part 0.5 s of CPU). 70,000 characters had kept a core busy 244 s.
TEXT_CHARS = 4_000
TEXT_TOKENS = 3_000  # 4,000 characters of emoji are 11,200 tokens: 25 MB of chips, 20 s in the browser

page_header("Tokens", "The model never sees letters. A tokenizer cuts the text into pieces from a fixed list "
                      "(its vocabulary) and hands over each piece's number, its token id.")
lm = get_model()
trace = run_for_page()
markers = turn_markers(lm.tokenizer)  # the template's own: '<|im_start|>', '<|im_end|>' for SmolLM2


@st.cache_data(max_entries=64, show_spinner=False)
def compared(text: str) -> list:
    return compare(text, get_model().tokenizer, trace.dims.name)


@st.cache_data(max_entries=64, show_spinner=False)
def model_pieces(text: str, safe: bool) -> list[Token]:
    """safe=True keeps special-token look-alikes as plain text; False lets them become control tokens."""
    return text_tokens(get_model().tokenizer, text, safe)


@st.cache_data(max_entries=64, show_spinner=False)
def model_pieces_of(key: str, text: str) -> list[Token]:
    """`text` through the tokenizer of registry model `key`, special-token look-alikes kept as text."""
    return text_tokens(model_handle(key).tokenizer, text, True)


def explain_split(counts: dict, what: str, counted: str) -> None:
    """Say why there are more tokens than characters, when some characters took several tokens.
    counted: which text the characters were counted in, and how."""
    if counts["split_characters"]:
        st.info(f"{what} has {plural(counts['characters'], 'character')} ({counted}) but "
                f"{plural(counts['tokens'], 'token')}: "
                f"{plural(counts['split_characters'], 'character')} (for example Korean, Chinese or emoji) "
                f"{'is' if counts['split_characters'] == 1 else 'are'} spelled by several tokens each, "
                f"{plural(counts['partial_tokens'], 'token')} in all. The tokenizer works on UTF-8 bytes: a Korean "
                "syllable is 3 bytes, most emoji 4, and this mostly-English vocabulary has no single token for "
                "many of them. Such tokens are bracketed under their character; each chip shows its raw bytes "
                "as `<0x..>`.")


st.subheader(f"1. Your prompt as {plural(len(trace.tokens), 'token')}")
st.markdown("Each chip is one token; the small number is its id. `␣` marks a space and `↵` a line break: spaces "
            "usually belong to the start of the next word. A token that is only part of a character (for example "
            "in Korean or emoji) shows its raw bytes as `<0x..>`, bracketed with the other parts under the "
            "character they spell. Red boxes are special marker tokens. Hover a chip for its bytes.")
pieces = token_pieces(lm.tokenizer, trace.ids)  # one Piece per token: its bytes and the character(s) it spells
st.markdown(legend(), unsafe_allow_html=True)
st.markdown(token_chips(trace.tokens, pieces=pieces, shown=CHIPS_SHOWN), unsafe_allow_html=True)
explain_split(character_counts(pieces), "Your whole prompt",  # the Request & template page counts letters
              "as a reader counts them, template included; each marker"
              + (f" such as {code_span(markers.start)}" if markers.start else "") + " counts as one")
with st.expander("The same tokens over the original text (each token's stretch highlighted)"):
    st.caption("Alternating tints mark where one token ends and the next begins; a dashed outline is one "
               "character spelled by several tokens. Hover a stretch to see its tokens.")
    st.markdown(text_spans(pieces, [t.role for t in trace.tokens], shown=CHIPS_SHOWN), unsafe_allow_html=True)
counts = role_counts(trace.tokens)
cols = st.columns(len(counts) + 1)
cols[0].metric("Tokens in the prompt", len(trace.tokens))
for col, (role, n) in zip(cols[1:], counts.items()):
    col.metric(f"{role} tokens", int(n))

st.subheader("2. Text that looks like a control token")
safe_ids, naive_ids = trace.ids, [t.id for t in trace.naive_tokens]
if safe_ids != naive_ids:
    st.warning("Your text contains something that looks like a special token. A careful server (left) keeps it as "
               "ordinary text; a naive one (right) turns it into a real control token, letting a user fake the "
               "end of their turn or a system message.")
    c1, c2 = st.columns(2)
    c1.markdown(f"**Safe: {plural(len(safe_ids), 'token')}**")
    c1.markdown(token_chips([t for t in trace.tokens if t.role != "template"], shown=CHIPS_SHOWN),
                unsafe_allow_html=True)
    c2.markdown(f"**Naive: {plural(len(naive_ids), 'token')}**")
    c2.markdown(token_chips([t for t in trace.naive_tokens if t.role != "template"], shown=CHIPS_SHOWN),
                unsafe_allow_html=True)
else:
    st.markdown("Your messages contain no special-token look-alikes, so safe and naive tokenization agree."
                + (f" Try typing {code_span(markers.end)} in the box below (or in the question) to see the difference."
                   if markers.end else ""))

st.subheader("3. Try your own text")
sample = " ".join(["Summarise this contract in three points. 네, 과일입니다 🍅"] + [markers.end] * bool(markers.end))
text = typed_text(TEXT_LABEL, linked(st.text_area, "tok_text", link_text(TEXT_CHARS), TEXT_LABEL, sample, height=80,
                                     max_chars=TEXT_CHARS), TEXT_CHARS)
if not text:
    st.info("Type some text above.")
    end_page()
safe = model_pieces(text, True)
if len(safe) > TEXT_TOKENS:
    st.error(f"**{TEXT_LABEL}** is {len(safe):,} tokens for {markdown_text(trace.dims.name)}; this page draws at most "
             f"{TEXT_TOKENS:,} (emoji and rare scripts take several tokens a character). Please shorten it.")
    end_page()
safe_pieces = token_pieces(lm.tokenizer, [t.id for t in safe])
st.markdown(f"**{markdown_text(trace.dims.name)}: {plural(len(safe), 'token')}** (special-token look-alikes kept as "
            "text)")
st.markdown(token_chips(safe, pieces=safe_pieces, shown=CHIPS_SHOWN), unsafe_allow_html=True)
st.markdown(text_spans(safe_pieces, shown=CHIPS_SHOWN), unsafe_allow_html=True)
explain_split(character_counts(safe_pieces), "This text", "as a reader counts them")
naive = model_pieces(text, False)
if [t.id for t in naive] != [t.id for t in safe]:
    st.markdown(f"Tokenized naively the same text gives **{plural(len(naive), 'token')}**, with real control "
                "tokens in red:")
    st.markdown(token_chips(naive, pieces=token_pieces(lm.tokenizer, [t.id for t in naive]),
                            shown=CHIPS_SHOWN), unsafe_allow_html=True)


def both_vocabularies(pair: list) -> None:
    """Section 4: the typed text, the question and fixed samples through both models' tokenizers."""
    st.markdown(f"The two models this app runs learned different vocabularies: {pair[0].config_dims.V:,} pieces "
                f"and {pair[1].config_dims.V:,}. A bigger vocabulary has whole pieces for more words and more scripts, "
                "so the same text needs fewer tokens, but every token's score is computed over the whole list. "
                "Only the tokenizers run here, not the models.")
    samples = {"English": "Are tomatoes fruit?", "Korean": "토마토는 과일인가요, 채소인가요?",
               "Python": "def area(r):\n    return 3.14159 * r ** 2\n"}
    for col, handle in zip(st.columns(2), pair):
        with col:
            mine = model_pieces_of(handle.spec.key, text)
            st.markdown(f"**{markdown_text(handle.name)}** ({handle.config_dims.V:,} pieces): "
                        f"**{plural(len(mine), 'token')}**")
            st.markdown(token_chips(mine, pieces=token_pieces(handle.tokenizer, [t.id for t in mine]),
                                    shown=CHIPS_SHOWN), unsafe_allow_html=True)
    question = trace.request.messages[-1][1]  # the sidebar's question, the last user message
    st.dataframe(pd.DataFrame([{"text": name, **{h.name: len(model_pieces_of(h.spec.key, sample)) for h in pair}}
                               for name, sample in {"your question": question, **samples}.items()]),
                 hide_index=True, width="stretch")
    st.caption("Tokens for your question and a few fixed texts. Korean is where the bigger vocabulary shows "
               "most: the smaller one has few Korean pieces and spells many syllables byte by byte. Code comes out "
               "about even: the smaller vocabulary was made for a training mix with much code in it.")


st.subheader("4. The same text in both models' vocabularies")
try:
    other_models = [model_handle(k) for k in compared_keys()]
except InputError as e:  # the other model's files cannot be read or converted here (a read-only or full folder)
    st.info(f"The other model's tokenizer is not available on this server: {markdown_text(str(e))}")
else:
    both_vocabularies(other_models)

st.subheader("5. The same text through other tokenizers")
st.markdown("Every model family has its own vocabulary, so the same text costs a different number of tokens. "
            "Prices and context limits are counted in tokens, so this ratio is a ratio of cost.")
results = compared(text)
table = pd.DataFrame(cost_table(text, results))
st.dataframe(table, hide_index=True, width="stretch")
fig = go.Figure(go.Bar(x=table["tokenizer"], y=table["tokens"], text=table["tokens"], marker_color="#0ea5e9"))
fig.update_layout(height=280, margin=dict(l=10, r=10, t=10, b=10), xaxis_title="tokenizer",
                  yaxis_title="tokens for this text", font=dict(size=13))
st.plotly_chart(fig, width="stretch")
for r in results[1:]:
    st.markdown(f"**{r.name}** ({plural(r.count, 'token')})")
    st.markdown(token_chips([Token(n, i, p, "assistant", False) for n, (i, p) in enumerate(zip(r.ids, r.pieces))],
                            pieces=other_pieces(r.name, r.ids), shown=CHIPS_SHOWN), unsafe_allow_html=True)

st.subheader("6. Capitals and spaces change the token")
st.markdown("The same word is a different token depending on a leading space or a capital letter. To the model "
            "these are three unrelated numbers; it learns during training that they mean nearly the same thing.")
rows = []
for variant in (" contract", "Contract", "contract"):
    o = encode_other("o200k_base", variant)
    s = encode_model(lm.tokenizer, trace.dims.name, variant)
    rows.append({"text": repr(variant), "o200k_base ids": ", ".join(map(str, o.ids)),
                 f"{trace.dims.name} ids": ", ".join(map(str, s.ids)),
                 f"{trace.dims.name} pieces": " | ".join(s.pieces)})
st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
back_next()
