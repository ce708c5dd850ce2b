"""How it learned, section 5: the memory a training step needs against inference's, by formula, for the loaded model
and the real configurations of larger ones (pipeline/training/memory.py)."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from pipeline.model.interface import LanguageModel
from pipeline.stages.kv_cache import load_configs
from pipeline.training import memory
from views.links.controls import linked
from views.links.params import choice, integer
from views.pages.how_it_learned.training import gib, parameter_count


def memory_section(lm: LanguageModel) -> None:
    st.subheader("5. The memory a training step needs")
    st.markdown("Inference keeps the weights and the KV cache. Training also keeps a gradient per weight, the "
                "optimizer's state (Adam: two running averages per weight), and every layer's activations for the "
                "backward pass. Estimates by formula: ZeRO's 16 bytes per parameter for mixed-precision Adam "
                "(Rajbhandari et al. 2019); activations as in Korthikanti et al. 2022, 34 bytes per token, layer and "
                "unit of width in 16-bit.")
    configs = load_configs()
    c1, c2, c3 = st.columns(3)
    tokens = int(linked(c1.number_input, "learn_mem_tokens", integer(1, 131_072), "Tokens per sequence", 1, 131_072,
                        2048))
    precision = linked(c2.selectbox, "learn_mem_dtype", choice(configs["weight_dtypes"]), "Weights",
                       list(configs["weight_dtypes"]), index=1)
    optimizer = linked(c3.radio, "learn_mem_opt", choice(("adam", "sgd")), "Optimizer ", ("adam", "sgd"),
                       format_func=str.upper, horizontal=True)
    wb = configs["weight_dtypes"][precision]
    d = lm.dims
    shapes = [(f"{lm.name} (loaded here)", parameter_count(lm), d.L, d.D, d.V, d.Hkv, d.Dh,
               [d.window(i) for i in range(d.L)])]
    shapes += [(name, int(m.params_b * 1e9), m.layers, m.heads * m.head_dim, None, m.kv_heads, m.head_dim,
                list(m.windows())) for name, m in configs["models"].items()]
    rows = []
    for name, p, L, D, V, Hkv, Dh, windows in shapes:
        train = memory.training_memory(p, L, D, tokens, V, wb, optimizer)
        held = [tokens if w is None else min(tokens, w) for w in windows]
        infer = memory.inference_memory(p, L, Hkv, Dh, tokens, V, wb, held)
        rows.append({"model": name, **{k: gib(v) for k, v in train.parts().items()},
                     "training step": gib(train.total), "inference": gib(infer.total),
                     "training ÷ inference": f"{train.total / infer.total:.1f}×"})
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch", height=35 * (len(rows) + 1) + 3,  # every row
                 column_config={"model": st.column_config.TextColumn(width=250)})  # the loaded model's name whole
    st.caption("One sequence, no activation recomputation. The public configurations list neither the model width "
               "nor the vocabulary: width is taken as heads × head width, and their logits are not counted. "
               "Inference: the weights, the KV cache of one sequence (sliding layers keep only their window, in the "
               "weights' precision) and one row of logits.")
