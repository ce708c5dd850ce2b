"""Why this token: the MLP's neurons that moved the token most at one layer and position
(pipeline.attribution.neurons), each with its activation and the tokens it promotes."""
import numpy as np
import pandas as pd
import streamlit as st

from pipeline.attribution.neurons import neuron_contributions, promoted_by_neuron
from pipeline.model.interface import LanguageModel
from pipeline.text.token_names import token_text
from ui.escape import markdown_text
from views.links.controls import linked
from views.links.params import WIDE, integer

SHOWN = 10


def neurons_section(lm: LanguageModel, rec, target: int, mlp_parts: np.ndarray, token_labels: list[str],
                    positions: tuple[int, ...] | None = None) -> None:
    """mlp_parts: (L,) each MLP's part of the score (the direct logit attribution's MLP bars), for the default layer.
    positions: each window position's place in the whole prompt (shown; default: the same)."""
    L, T = lm.dims.L, len(rec.ids)
    at = tuple(range(T)) if positions is None else positions
    st.markdown("**The MLP's neurons.** An MLP is a few thousand neurons; each writes a fixed direction, scaled by "
                "its activation. Read through the final norm and the output matrix, each neuron's part of the score "
                "is its activation × what its direction adds per unit; the parts add up to the MLP's bar.")
    n1, n2 = st.columns(2)
    layer = int(linked(n1.number_input, "why_neuron_layer", integer(0, L - 1), "MLP of layer", 0, L - 1,
                       int(np.argmax(np.abs(mlp_parts)))))
    # an option's label never depends on the step (a label that did stayed stale in the browser once the step moved)
    position = linked(n2.selectbox, "why_neuron_position", integer(0, WIDE),
                      f"position (the last, {at[-1]}, reads this score)", range(T - 1, -1, -1),
                      format_func=lambda p: f"{at[p]}: {token_labels[p]}",
                            help="An earlier position reads that position's own next-token score (the logit lens).")
    nc = neuron_contributions(rec, lm, layer, target, position)
    rows = []
    for n in nc.top(SHOWN):
        up = promoted_by_neuron(rec, lm, nc, n)
        rows.append({"neuron": n, "activation": round(float(nc.activations[n]), 3),
                     "adds to the score": round(float(nc.contributions[n]), 3),
                     "its write promotes": ", ".join(token_text(lm.tokenizer, t) for t, _ in up)})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    c = nc.contributions
    st.caption(f"Layer {layer}'s MLP adds **{nc.mlp_part:+.3f}** to the score of "
               f"“{markdown_text(token_text(lm.tokenizer, target))}” at position {at[position]}; its "
               f"{len(c):,} neurons add up to {c.sum():+.3f}, the {SHOWN} above to {c[nc.top(SHOWN)].sum():+.3f} "
               f"(pushing up: {int((c > 0).sum()):,}, down: {int((c < 0).sum()):,}).")
