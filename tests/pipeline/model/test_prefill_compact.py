"""A long prompt's captures are float16 (pipeline.model.prefill) except where a value does not fit: Gemma 3's
residual stream passes 65,504 on a few tokens of a 600-token prompt, where float16 held inf and Layers said
"Mean over tokens: ... middle nan, last nan". Tiny model, one embedding row made huge."""
import numpy as np
import torch
from kit.tiny_models import make_tiny_lm
from kit.tolerance import assert_within, float16_storage_tolerance

import pipeline.model.prefill as prefill_module


def test_a_long_prompt_keeps_values_past_float16_and_stays_compact_elsewhere(tokenizer, monkeypatch):
    monkeypatch.setattr(prefill_module, "FULL_ATTENTION_MAX_TOKENS", 16)  # 40 tokens count as a long prompt
    monkeypatch.setattr(prefill_module, "PREFILL_CHUNK", 16)  # three chunks: the huge value comes in the third
    lm = make_tiny_lm(tokenizer)
    big_id = 7
    with torch.no_grad():
        lm.model.get_input_embeddings().weight[big_id] = 1e5  # past float16's largest, 65,504
    ids = [11 + i for i in range(40)]
    ids[35] = big_id
    p = prefill_module.run_prefill(lm, ids).prefill
    assert p.attention is None  # the long-prompt path
    assert np.isfinite(p.hidden_states).all() and p.hidden_states.dtype == np.float32
    assert np.all(p.hidden_states[0, 35] == 1e5)  # the embedding itself (1e5 is a float32), not inf
    assert p.q_rot.dtype == np.float16 and np.isfinite(p.q_rot).all()  # after the norm: fits, kept compact
    rows = lm.model.get_input_embeddings().weight[ids[:35]].detach().numpy()  # earlier chunks, kept in float16 and
    # widened: each within float16's rounding
    assert_within(p.hidden_states[0, :35], rows, float16_storage_tolerance(rows), "earlier chunks")
