"""`trace --commitment` in the terminal: each answer token and the layer from which the logit lens keeps it."""
from __future__ import annotations

from pipeline.stages.commitment import DEFINITIONS, Commitment


def _layer(layer: int | None, L: int) -> str:
    return "never" if layer is None else ("last" if layer == L else str(layer))


def print_commitment(tokenizer, c: Commitment, L: int) -> None:
    """One line per answer token: its text, then its layer by each definition (0 = embeddings, L = the last
    layer: 'last'; 'never': not even at the last layer), and the model's own probability of it."""
    print(f"\n== Where each token was decided (logit lens; layers 0-{L}, a choice of definition) " + "=" * 4)
    print(f"  {'token':16s} " + " ".join(f"{name:>7s}" for name in DEFINITIONS) + "  final p")
    for j, t in enumerate(c.token_ids):
        text = repr(tokenizer.decode([t]))[1:-1][:16]
        print(f"  {text:16s} " + " ".join(f"{_layer(c.layers[n][j], L):>7s}" for n in DEFINITIONS)
              + f"  {float(c.probs[-1, j]):7.1%}")
