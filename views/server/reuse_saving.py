"""How many of a run's prompt positions the server's prefix cache gave it, and (on a click) what that saved: its
prefill timed again over the reused K/V against the same prompt uncached (pipeline.prompt_cache.saving). Shown on
Generation and on Prompt caching."""
from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from pipeline.model.dims import held_positions
from pipeline.model.interface import LanguageModel
from pipeline.prompt_cache.outcomes import blocks_not_kept
from pipeline.server.run_queue import cost_of
from ui.words import plural
from views.server.measured import measured_when
from views.server.state import get_model
from views.server.waiting import result_through_queue


def reuse_caption(trace) -> str:
    """'96 of 130 prompt positions reused ...' or why none were."""
    n, T = trace.reused_positions, len(trace.ids)
    if not n:
        past_window = blocks_not_kept(T, held_positions(trace.dims.sliding_window, T))
        return (f"Prompt positions reused from the server's prefix cache: 0 of {T:,}. Every position ran through the "
                "model: no earlier request had kept the blocks this prompt starts with (or they had expired)."
                + (f" Its own blocks were {past_window}" if past_window else ""))
    return (f"Prompt positions reused from the server's prefix cache: **{n:,} of {T:,}** ({n / T:.0%}). Their keys "
            f"and values were computed by an earlier request that started the same way; this run's prefill ran "
            f"only the last {plural(T - n, 'position')}. The reused positions' captures (every layer's tensors) "
            "were kept with the blocks, so every page still shows them.")


def server_cache_caption(reuse, lm: LanguageModel) -> str:
    """What the server's prefix cache holds for this model now (reuse: pipeline.prompt_cache.reuse.ServerReuse)."""
    cache = reuse.cache_for(lm)
    return (f"The server's prefix cache for this model holds {plural(len(cache.blocks), 'block')} of "
            f"{cache.config.block_size} positions now, {cache.bytes_held / 2**20:,.1f} MiB of its "
            f"{cache.config.max_bytes / 2**20:,.0f} MiB budget (keys, values and the captures kept with them; the "
            f"least recently used go first past it, and a block unused for {cache.config.ttl_seconds / 60:.0f} "
            f"minutes expires). {cache.token_hit_rate:.0%} of the prompt positions it has seen were reused.")


def reuse_section(trace, key: str) -> None:
    """The caption, and a button that measures the saving (through the queue, once a minute per run)."""
    st.markdown(reuse_caption(trace))
    if not trace.reused_positions or not st.button("⏱ Measure what the reuse saved", key=f"{key}_reuse_measure",
                                                   help="This run's prefill over its reused keys and values, against "
                                                        "the same prompt with nothing reused: 3 times each, "
                                                        "interleaved, medians and ranges."):
        return
    from pipeline.prompt_cache.saving import TIMING_REPEATS, reuse_saving

    runs = 2 * TIMING_REPEATS + 1
    saving = result_through_queue(("reuse saving", trace.request.id, time.strftime("%Y-%m-%d %H:%M")),
                                  lambda: reuse_saving(get_model(), trace), cost=cost_of(runs * len(trace.ids), 0),
                                  prompt_tokens=len(trace.ids))
    show_saving(saving)


def show_saving(saving) -> None:
    c = saving.timing
    rows = [{"prefill": name, "median": t.shown, "range": f"{t.low * 1e3:,.0f}–{t.high * 1e3:,.0f} ms",
             "positions run": positions}
            for name, t, positions in (("reusing the cached positions", saving.reused,
                                        saving.prompt_positions - saving.reused_positions),
                                       ("uncached (nothing reused)", saving.uncached, saving.prompt_positions))]
    st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
    st.caption(f"{saving.reused.label}, {plural(c.repeats, 'run')} each, interleaved (reused, uncached, …), measured "
               f"{measured_when(saving.measured_at)}: saved {saving.saved_s * 1e3:,.0f} ms (medians). "
               f"**{c.verdict('Reusing', 'uncached')}**.")
