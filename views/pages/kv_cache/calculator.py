"""KV cache, section 3: the memory calculator for real models on real GPUs (assets/model_configs.json): how many
conversations fit beside the weights (pipeline/stages/kv_cache.py's fit)."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from pipeline.stages.kv_cache import GIB, bytes_per_token, fit, human_bytes, load_configs
from views.links.controls import linked
from views.links.params import choice, integer, number


def memory_calculator() -> None:
    st.subheader("3. Memory calculator for real models")
    st.markdown("On a server the cache lives in GPU memory next to the model's weights. The longer the conversations "
                "and the bigger the model, the fewer users fit on one GPU at once.")
    cfg = load_configs()
    c1, c2, c3 = st.columns(3)
    model_name = linked(c1.selectbox, "kv_model", choice(cfg["models"]), "Model", list(cfg["models"]),
                        index=list(cfg["models"]).index("Qwen3-8B"))
    gpu_name = linked(c2.selectbox, "kv_gpu", choice(cfg["gpus"]), "GPU", list(cfg["gpus"]),
                      index=list(cfg["gpus"]).index("NVIDIA H100 80GB"),
                      format_func=lambda g: f"{g} ({cfg['gpus'][g]} GiB)",
                            help="Card sizes are binary: an '80GB' card holds 80 GiB = 80 × 2³⁰ B = 85.9 × 10⁹ B.")
    dtypes = list(cfg["dtypes"])
    kv_dtype = linked(c3.selectbox, "kv_dtype", choice(dtypes), "Cache precision", dtypes, index=1)
    c1, c2, c3 = st.columns(3)
    w_dtypes = list(cfg["weight_dtypes"])
    w_dtype = linked(c1.selectbox, "kv_wdtype", choice(w_dtypes), "Weight precision", w_dtypes, index=1)
    tokens = linked(c2.number_input, "kv_tokens", integer(1, 1_000_000), "Tokens per conversation", 1, 1_000_000, 4096,
                    step=512)
    reserve = linked(c3.slider, "kv_reserve", number(0.0, 0.3), "Memory kept free for the runtime", 0.0, 0.3, 0.1,
                     0.01, help="Activations, buffers and fragmentation; servers typically use about 90% for weights "
                                "+ cache.")
    model = cfg["models"][model_name]
    f = fit(model, cfg["gpus"][gpu_name], int(tokens), cfg["dtypes"][kv_dtype], cfg["weight_dtypes"][w_dtype], reserve)
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("KV bytes per token", human_bytes(f.bytes_per_token),
              help=f"2 × {model.layers} L × {model.kv_heads} Hkv × "
              f"{model.head_dim} Dh × {cfg['dtypes'][kv_dtype]} B = {f.bytes_per_token:,} B "
              f"(decimal KB: 1 KB = 1,000 B; = {human_bytes(f.bytes_per_token, binary=True)})")
    c2.metric("One conversation", human_bytes(f.conversation_bytes, binary=True),
              help=f"{f.conversation_bytes:,} B (1 MiB = 2²⁰ B, 1 GiB = 2³⁰ B)")
    c3.metric("Weights", human_bytes(f.weights_bytes, binary=True),
              help=f"{model.params_b} billion parameters × {cfg['weight_dtypes'][w_dtype]} B = {f.weights_bytes:,} B")
    c4.metric("Conversations that fit", f"{f.conversations:,}")
    if f.free_bytes <= 0:
        st.error(f"The weights alone ({human_bytes(f.weights_bytes, binary=True)}) do not fit in {gpu_name} "
                 f"({human_bytes(f.gpu_bytes, binary=True)}) with this reserve: "
                 "split the model over several GPUs or use lower precision.")
    slides = [w for w in model.windows() if w is not None]
    if slides:
        st.caption(f"{model_name}: {len(slides)} of its {model.layers} layers only look at the last "
                   f"{', '.join(f'{w:,}' for w in sorted(set(slides)))} tokens, so their cache stops growing there: "
                   f"one conversation = Σ over layers min(tokens, window) × 2 × {model.kv_heads} Hkv × "
                   f"{model.head_dim} Dh × {cfg['dtypes'][kv_dtype]} B.")
    mem = go.Figure()
    kv_bytes = f.conversations * f.conversation_bytes
    for part, value, colour in [("weights", f.weights_bytes, "#64748b"),
                                ("KV cache of the conversations that fit", kv_bytes, "#0ea5e9"),
                                ("kept free / unused", max(f.gpu_bytes - f.weights_bytes - kv_bytes, 0), "#e2e8f0")]:
        mem.add_trace(go.Bar(y=["GPU memory"], x=[value / GIB], name=part, orientation="h", marker_color=colour,
                             hovertemplate="%{x:.1f} GiB<extra>" + part + "</extra>"))
    mem.update_layout(barmode="stack", height=170, margin=dict(l=10, r=10, t=10, b=10),
                      xaxis_title=f"GiB (1 GiB = 2³⁰ B); {gpu_name} = {cfg['gpus'][gpu_name]} GiB")
    st.plotly_chart(mem, width="stretch")
    st.caption("Units: GPU memory, weights and conversations in binary GiB/MiB (how card sizes are really counted: "
               "'80GB' is 80 GiB, about 7% more than 80 × 10⁹ B); bytes per token in decimal KB (1 KB = 1,000 B).")
    table = pd.DataFrame([{
        "model": name, "params (B)": mdl.params_b, "L": mdl.layers, "H": mdl.heads, "Hkv": mdl.kv_heads,
        "Dh": mdl.head_dim,
        "KV per token": human_bytes(bytes_per_token(mdl, cfg["dtypes"][kv_dtype])),
        f"conversations of {int(tokens):,} tokens on {gpu_name}":
            fit(mdl, cfg["gpus"][gpu_name], int(tokens), cfg["dtypes"][kv_dtype], cfg["weight_dtypes"][w_dtype],
                reserve).conversations,
    } for name, mdl in cfg["models"].items()])
    st.dataframe(table, hide_index=True, width="stretch")
    st.caption("Shapes from each model's published configuration (assets/model_configs.json). Fewer key/value heads "
               "than query heads (Hkv < H, grouped-query attention) is what keeps these caches small.")
