"""The commitment strip: the whole answer, each token shaded by the layer from which the logit lens keeps it
(pipeline.stages.commitment; its pass views/server/commitment.py, its chips ui/commitment.py), a choice among three
definitions; a picked token's lens at every layer below it (Journey's compact strip links here, to that token)."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from pipeline.model.interface import LanguageModel
from pipeline.stages.commitment import DEFINITIONS, LENS_TOP
from pipeline.text.pieces import token_pieces
from pipeline.text.unfinished import continuation_label
from ui.commitment import layer_words, legend, strip_html
from ui.escape import code_span, one_html_block
from ui.words import plural
from views.chrome.frame import fragment
from views.links.controls import linked
from views.links.params import WIDE, choice, integer
from views.server.commitment import run_commitment


@fragment
def commitment_strip(lm: LanguageModel, trace) -> None:
    """Draws the strip for `trace`'s answer on `lm` (the model that ran it)."""
    st.subheader("Where each answer token was decided")
    answer = list(trace.generated_token_ids)
    if not answer:
        st.caption("This run has no answer tokens.")
        return
    L = trace.dims.L
    rule = linked(st.radio, "ly_commit_rule", choice(list(DEFINITIONS)), "definition of \"decided\"",
                  list(DEFINITIONS), format_func=DEFINITIONS.__getitem__, horizontal=True,
                  help="A choice of definition, not a fact about the model: the three can name different layers.")
    st.caption("Each token of the answer, shaded by the first layer from which the logit lens keeps it through the "
               f"last layer ({L}). \"Decided\" is a choice of definition, not a fact about the model: the three above "
               "can name different layers for the same token. Hover a token for its layer and the model's final "
               "probability of it; pick one below for the lens at its position.")
    c = run_commitment(list(trace.ids), answer)
    layers = c.layers[rule]
    pieces = token_pieces(lm.tokenizer, answer)
    st.markdown(strip_html([p.label for p in pieces], layers, c.probs[-1], L), unsafe_allow_html=True)
    st.markdown(one_html_block(f"<div style='font-size:0.85em'>{legend(L)}</div>"), unsafe_allow_html=True)
    settled = [x for x in layers if x is not None and x < L]
    st.caption(f"Settled before the last layer ({DEFINITIONS[rule]}): {len(settled)} of "
               f"{plural(len(answer), 'token')}. The lens at these positions comes from one more pass of the model "
               "over the prompt and the answer (the decode steps keep no per-layer vectors), its turn in the "
               f"server's queue; it read {plural(c.reused_positions, 'prompt position')} from the server's prefix "
               "cache rather than running them again.")
    j = linked(st.selectbox, "ly_commit_token", integer(0, WIDE), "logit lens at the answer token",
               range(len(answer)), within=(0, len(answer) - 1),
               format_func=lambda k: f"({k}) {pieces[k].label}: {layer_words(layers[k], L)}")
    context = list(trace.ids) + answer[:j]  # what the position that chose answer token j had read
    rows = [{"layer": ("0 (embeddings)" if i == 0 else f"{i} (last)" if i == L else str(i)),
             **{f"top {r + 1}": f"{continuation_label(lm.tokenizer, context, int(c.top_ids[i, j, r]), short=True)} "
                                f"{float(c.top_probs[i, j, r]):.1%}" for r in range(LENS_TOP)},
             "answer token's rank": int(c.ranks[i, j]) + 1, "its probability": f"{float(c.probs[i, j]):.1%}"}
            for i in range(L + 1)]
    st.dataframe(pd.DataFrame(rows[::-1]), hide_index=True, width="stretch")
    st.caption(f"Rows from the last layer down; the answer token is {code_span(pieces[j].label)}, rank 1 = the "
               "lens's top-1 (a tie at the top counts as rank 1).")
