"""Memory a long prompt may cost the server, pinned from the dimensions, not from a timing.

The Layers page's reductions over the (L+1, T, D) captures read a few positions at a time: what they
allocate (numpy reports its arrays to tracemalloc) stays under layers.derived_bytes_bound, far less
than one float32 copy of the captures, which is what they used to make (three at once for the cosine).
"""
import tracemalloc

import numpy as np
import pytest
from kit.tolerance import assert_within, float32_tolerance, lens_tolerance

from pipeline.stages import layers as la

L, D = 30, 576  # SmolLM2-135M


def peak_bytes(fn, *args) -> int:
    tracemalloc.start()
    try:
        fn(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def long_captures():
    """float16 (L+1, T, D) captures as a long prompt stores them, T = 2,048 (73 MB)."""
    rng = np.random.default_rng(0)
    T = 2048
    return rng.standard_normal((L + 1, T, D), dtype=np.float32).astype(np.float16)


def test_the_layer_reductions_of_a_long_prompt_stay_within_their_bound(long_captures):
    h = long_captures
    T = h.shape[1]
    bound = la.derived_bytes_bound(L, T, D)
    assert bound < (L + 1) * T * D * 4 / 3  # well under one float32 copy of the captures
    for name, fn, args in [("norms", la.norms, (h,)), ("cosine", la.consecutive_cosine, (h,)),
                           ("contributions", la.contributions, (h[1:], h[:-1]))]:
        assert peak_bytes(fn, *args) <= bound, name


def test_the_reductions_in_chunks_equal_the_whole_computation():
    """Across chunk edges (T not a multiple of the chunk) and with float16 values whose squares overflow float16."""
    rng = np.random.default_rng(1)
    T = la.POSITION_CHUNK * 2 + 37
    h = (rng.standard_normal((5, T, 16)) * 300).astype(np.float16)
    h[2, 3] = 25_000  # 25,000² overflows float16; float32 chunks do not
    x = h.astype(np.float64)
    # float32 sums of 16 terms against float64: a norm's relative error is its sum of squares' (all terms positive),
    # a cosine's (at most 1) three such sums'
    D = h.shape[-1]
    norms = np.linalg.norm(x, axis=-1)
    assert_within(la.norms(h), norms, float32_tolerance(D, 1.0) * norms, "norms")
    ref = (x[:-1] * x[1:]).sum(-1) / (np.linalg.norm(x[:-1], axis=-1) * np.linalg.norm(x[1:], axis=-1))
    assert_within(la.consecutive_cosine(h), ref, float32_tolerance(D, 1.0, depth=3), "cosines")
    c = la.contributions(h[1:], h[:-1])
    assert_within(c["attention"], norms[1:], float32_tolerance(D, 1.0) * norms[1:], "attention's part")
    assert_within(c["mlp"], norms[:-1], float32_tolerance(D, 1.0) * norms[:-1], "the MLP's part")
    assert la.norms(h).shape == (5, T) and la.consecutive_cosine(h).shape == (4, T)


def live_peak_bytes(fn, *args) -> int:
    """The most bytes torch held at once on the CPU while fn ran (the profiler's allocation records)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn(*args)
    events = sorted((e for e in prof.events() if e.name == "[memory]"), key=lambda e: e.time_range.start)
    live = peak = 0
    for e in events:
        live += e.cpu_memory_usage  # + allocated, - freed
        peak = max(peak, live)
    return peak


def test_the_logit_lens_holds_at_most_two_chunks_of_vocabulary_scores(tiny_lm):
    """Each chunk of rows is scored over the whole vocabulary: (rows, V) float32 logits and one temporary of
    that size for logsumexp, never the whole window at once nor a second array for the softmax."""
    L1, P, D = 3, 300, tiny_lm.model.config.hidden_size
    V = tiny_lm.model.get_output_embeddings().weight.shape[0]
    hidden = np.random.default_rng(2).standard_normal((L1, P, D)).astype(np.float16)
    bound = 2 * la.LENS_CHUNK_ROWS * V * 4 + 4 * L1 * P * D * 4 + 2**20
    assert L1 * P > 2 * la.LENS_CHUNK_ROWS  # several chunks
    assert live_peak_bytes(la.logit_lens, tiny_lm, hidden) <= bound
    ids, probs = la.logit_lens(tiny_lm, hidden, k=3)
    assert ids.shape == probs.shape == (L1, P, 3)
    import torch

    x = torch.from_numpy(hidden.astype(np.float32))
    norm = tiny_lm.model.model.norm
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon) * norm.weight.detach()
    ref = torch.softmax(x @ tiny_lm.model.get_output_embeddings().weight.detach().T, dim=-1).topk(3, dim=-1)
    # the same formula over other chunks: a logit within the norm's and the head's rounding (kit.tolerance), a
    # probability p within p (2 of those + the softmax's sum of V terms)
    want = ref.values.numpy()
    rtol = 2 * lens_tolerance(tiny_lm, x.numpy()) + float32_tolerance(V, 1.0, depth=2)
    assert_within(probs, want, rtol * want, "top probabilities")
    near = np.zeros(want.shape, dtype=bool)  # ranks whose neighbour's probability is within rounding: either order
    close = np.abs(np.diff(want, axis=-1)) <= 2 * rtol * want[..., :-1]
    near[..., :-1] |= close
    near[..., 1:] |= close
    assert np.all((ids == ref.indices.numpy()) | near)


def long_record_bytes(L: int, H: int, Hkv: int, Dh: int, D: int, V: int, T: int) -> int:
    """What a prompt past FULL_ATTENTION_MAX_TOKENS stores, from the dimensions: float16 captures (no
    attention pattern) and float32 last logits."""
    values = (L + 1) * T * D + 2 * L * T * D + L * H * T * Dh + 2 * L * Hkv * T * Dh + 2 * T * D
    return values * 2 + V * 4


def test_a_long_prompts_stored_record_is_what_its_dimensions_say(tiny_lm):
    from pipeline.model.prefill import run_prefill
    from pipeline.model.prefill_record import FULL_ATTENTION_MAX_TOKENS

    T = FULL_ATTENTION_MAX_TOKENS + 40
    ids = tiny_lm.tokenizer(" tomato" * T)["input_ids"][:T]
    prefill = run_prefill(tiny_lm, ids).prefill
    m = tiny_lm.dims
    assert prefill.attention is None
    assert prefill.nbytes == long_record_bytes(m.L, m.H, m.Hkv, m.Dh, m.D, m.V, T)
    # SmolLM2-135M at the app's 4,096-token cap: 675 MB (657 MB at the bench's 3,990 tokens)
    assert long_record_bytes(30, 9, 3, 64, 576, 49_152, 4096) < 700 * 10**6


def test_a_words_vector_reads_the_embedding_table_without_copying_it(tokenizer):
    """The Embeddings page looks up four words in the (V, D) float32 table (neighbours, and a, b, c of the analogy):
    each lookup allocates its own rows only. It once converted the whole table to float64 per word: Gemma's
    262,144 x 640 table, 1.3 GB a word. Here SmolLM2's vocabulary at width 64 (12.6 MB float32)."""
    from pipeline.stages.embeddings import word_vector

    table = np.random.default_rng(0).standard_normal((len(tokenizer), 64)).astype(np.float32)  # (V, D)
    wv = word_vector(tokenizer, table, "tomatoes")
    np.testing.assert_array_equal(wv.vector, table[wv.ids].mean(axis=0))
    assert peak_bytes(word_vector, tokenizer, table, "tomatoes") < table.nbytes / 10
