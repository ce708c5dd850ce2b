"""The commitment strip's HTML (pipeline.stages.commitment): one chip per answer token shaded by the layer from which
the logit lens keeps it, a legend of the shades. Layers draws it whole; Journey compact, each chip a link to the
lens at that position on Layers. Token text is escaped by `chip`; a link's address is escaped too."""
from __future__ import annotations

from .chips import chip
from .escape import html_text, one_html_block
from .more_below import fold

LAST_LAYER_SHADE = "#fde68a"  # amber: decided only at the last layer
NEVER_SHADE = "#fecaca"  # pale red: not kept even at the last layer (sampled or forced below the top)
SHOWN_CHIPS = 240  # chips drawn before the rest fold under "N more tokens below"


def layer_shade(layer: int | None, L: int) -> str:
    """A background for a token decided at `layer` of 0..L: blue, darkest for the embeddings and paler layer by
    layer up to L - 1; its own shades for the last layer only (L) and for never (None)."""
    if layer is None:
        return NEVER_SHADE
    if layer >= L:
        return LAST_LAYER_SHADE
    x = layer / max(L - 1, 1)
    return f"hsl(205,70%,{50 + 42 * x:.0f}%)"


def layer_words(layer: int | None, L: int) -> str:
    if layer is None:
        return "never (not even at the last layer)"
    if layer == 0:
        return "layer 0 (the embeddings)"
    return f"layer {L} (only at the last layer)" if layer == L else f"layer {layer}"


def strip_html(labels: list[str], layers: list[int | None], final_probs, L: int, shown: int = SHOWN_CHIPS,
               hrefs: list[str] | None = None) -> str:
    """One chip per answer token (labels: its readable text, escaped by `chip`), shaded by its layer, the layer and
    the model's final probability of it in the tooltip; past `shown` the rest fold under a cue. hrefs: a link per
    token (the chip becomes one)."""
    chips = [chip(label, background=layer_shade(layer, L),
                  title=f"({j}) {label}: {layer_words(layer, L)}; final probability {float(p):.1%}")
             for j, (label, layer, p) in enumerate(zip(labels, layers, final_probs))]
    if hrefs is not None:
        chips = [f"<a href='{html_text(href)}' target='_self' class='tpe-commit-link' style='text-decoration:none'>"
                 f"{c}</a>" for c, href in zip(chips, hrefs)]
    return one_html_block(f"<div style='line-height:2.1'>{fold(chips, shown)}</div>")


def legend(L: int) -> str:
    marks = [0, L // 2, L - 1, L, None]
    return "".join(chip(layer_words(m, L), background=layer_shade(m, L)) for m in dict.fromkeys(marks))
