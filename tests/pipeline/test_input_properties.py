"""The fuzz findings (bench/fuzz_public.py): each public function below either accepts its input
or raises InputError naming the field, never another exception. Each failure the fuzzing found is kept
as an @example, so it is tried first on every run (fast tier)."""
import math

import numpy as np
import pytest
import quicktok
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from kit.hypothesis_profiles import examples

from pipeline.core import maths
from pipeline.core.errors import InputError
from pipeline.core.timing import compare_runs
from pipeline.model.dims import kv_bytes_formula
from pipeline.prompt_cache.audit import check_prices, default_prices
from pipeline.prompt_cache.engine import chain_hashes
from pipeline.server.run_queue import DECODE_STEP_COST, cost_of
from pipeline.stages import embeddings as es
from pipeline.stages import next_token as nt
from pipeline.stages.batch import batch_tensors, padding_share
from pipeline.stages.kv_cache import ModelShape, fit, human_bytes, load_configs
from pipeline.stages.position import inv_freq
from pipeline.stages.request import GenerationOptions
from pipeline.stages.tokens import encode
from pipeline.text.pieces import token_pieces
from pipeline.text.token_names import token_text, tokens_text
from pipeline.text.unfinished import continuation_label

NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**30, 10**30),
                    st.sampled_from([0, -1, 2**63, 10**400, float("nan"), float("inf"), True, "1", None]))
COUNTS = st.one_of(st.integers(-10, 10**6), st.integers(-10**30, 10**30), st.sampled_from([2**63, 1.5, True, None]))
ARRAYS = st.one_of(
    hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6),
               elements=st.floats(allow_nan=True, allow_infinity=True)),
    st.sampled_from([[], [[]], "abc", [1, "a"], None]))
TEXTS = st.one_of(st.text(max_size=20), st.sampled_from(["\ud800", "a\udfffb", "", "🍅\x00"]))
OPTIONS = st.builds(GenerationOptions, temperature=st.sampled_from([0.0, 0.7, 1.0]), top_k=st.sampled_from([0, 1, 5]),
                    top_p=st.sampled_from([0.5, 1.0]), min_p=st.sampled_from([0.0, 0.5]))
V = 49_152


def accepts_or_names(fields, fn, *args, **kwargs):
    """Call fn; an InputError must name one of `fields`. Returns the result, or None when refused."""
    try:
        return fn(*args, **kwargs)
    except InputError as e:
        assert e.field in fields, f"InputError names {e.field!r}, expected one of {fields}"
        return None


# ---- logits and draws ---------------------------------------------------------------------------
@settings(max_examples=examples(150))
@given(x=ARRAYS, axis=st.integers(-4, 4))
@example(x=np.zeros((0, 0, 0)), axis=-1)  # ValueError: zero-size array to reduction operation maximum
@example(x=np.zeros((1, 0)), axis=-1)
@example(x=np.float64(1.0), axis=-1)  # AxisError
@example(x=np.array([710.0, np.inf]), axis=0)  # gave [nan, 0]: inf / inf
@example(x=np.array([710.0, np.nan]), axis=0)  # gave [nan, 0]
def test_softmax_accepts_or_names_the_logits(x, axis):
    p = accepts_or_names({"logits"}, maths.softmax, x, axis)
    if p is not None:
        assert np.all((p >= 0) & (p <= 1))


@settings(max_examples=examples(150))
@given(x=ARRAYS, k=COUNTS)
@example(x=np.float64(0.0), k=2**63)  # AxisError
@example(x=np.zeros((2, 1)), k=2)  # ValueError: all keys need to be the same shape
@example(x=np.zeros((5, 5)), k=49_151)  # IndexError
@example(x=np.array([np.nan]), k=1)  # gave no index at all
def test_top_indices_accepts_or_names_its_input(x, k):
    idx = accepts_or_names({"logits", "k"}, maths.top_indices, x, k)
    if idx is not None:
        assert len(idx) == min(k, np.size(x)) and len(set(idx.tolist())) == len(idx)


@settings(max_examples=examples(150))
@given(logits=ARRAYS, options=OPTIONS, temperature=NUMBERS)
@example(logits=np.array([]), options=GenerationOptions(top_k=5, top_p=0.5, min_p=1.0), temperature=1.0)  # ValueError
@example(logits=np.float64(0.0), options=GenerationOptions(top_p=0.5), temperature=0.0)  # IndexError
@example(logits=np.zeros((2, 2)), options=GenerationOptions(temperature=1.0, top_p=0.5), temperature=0.0)
def test_filters_accept_or_name_the_logits(logits, options, temperature):
    for fn, args in ((nt.softmax, ()), (nt.tempered, (temperature,)), (nt.filter_stages, (options,)),
                     (nt.final_probs, (options,))):
        out = accepts_or_names({"logits", "temperature"}, fn, logits, *args)
        if fn is nt.final_probs and out is not None:
            assert math.isclose(float(out.sum()), 1.0, rel_tol=1e-9)


@settings(max_examples=examples(150))
@given(probs=ARRAYS, n=COUNTS, size=COUNTS)
@example(probs=np.array([]), n=10, size=3)  # IndexError: index -1 is out of bounds
@example(probs=np.zeros((0, 3)), n=6810, size=3)
@example(probs=np.float64(1.0), n=0, size=0)  # TypeError: len() of unsized object
@example(probs=np.array([0.5, 0.5]), n=12_371_154_742, size=2)  # MemoryError: 92 GiB
@example(probs=np.array([0.0, 0.0]), n=3, size=2)  # nothing to draw from
def test_draw_and_empirical_accept_or_name_their_input(probs, n, size):
    drawn = accepts_or_names({"probs", "draws"}, nt.draw, probs, n, np.random.default_rng(0))
    if drawn is not None:
        assert len(drawn) == n and (drawn < len(probs)).all()
        share = accepts_or_names({"size", "draws"}, nt.empirical, drawn, size)
        assert share is None or len(drawn) == 0 or math.isclose(float(share.sum()), 1.0)
    accepts_or_names({"draws", "size"}, nt.empirical, probs, size)  # floats are not token ids


@settings(max_examples=examples(100))
@given(step_logits=ARRAYS, ids=st.lists(COUNTS, max_size=4))
@example(step_logits=np.zeros((0, 0, 5)), ids=[0, 3421])  # IndexError
@example(step_logits=np.zeros((5, 0)), ids=[-1, -2])  # ValueError
@example(step_logits=np.zeros((2, 5)), ids=[2**63, 1])  # OverflowError
def test_answer_confidence_accepts_or_names_its_input(step_logits, ids):
    accepts_or_names({"step_logits", "chosen_ids", "logits"}, nt.answer_confidence, step_logits, ids)


# ---- token ids and text -------------------------------------------------------------------------
@settings(max_examples=examples(60))
@given(ids=st.lists(st.one_of(st.integers(-5, V + 5), st.sampled_from([2**63, -(2**63) - 1, 10**30, 1.5, None])),
                    min_size=1, max_size=5))
@example(ids=[V])  # convert_ids_to_tokens gives None: AttributeError/TypeError further on
@example(ids=[-1])  # OverflowError
@example(ids=[10**30])
def test_token_names_accept_or_name_the_ids(tokenizer, ids):
    accepts_or_names({"token_id"}, token_text, tokenizer, ids[0])
    for fn in (tokens_text, token_pieces):
        out = accepts_or_names({"token_ids"}, fn, tokenizer, ids)
        assert out is None or len(out) == len(ids)
    accepts_or_names({"token_ids"}, continuation_label, tokenizer, [], ids[0])


@settings(max_examples=examples(60))
@given(text=TEXTS)
@example(text="\ud800")  # TypeError inside the tokenizer
@example(text="tomato \udfff")
def test_encode_and_the_embedding_helpers_accept_or_name_the_text(tokenizer, text):
    accepts_or_names({"text"}, encode, tokenizer, text)
    table = np.ones((V, 4), dtype=np.float32)
    unit = es.unit_rows(table)
    accepts_or_names({"word"}, es.word_vector, tokenizer, table, text)
    accepts_or_names({"word"}, es.neighbours, unit, tokenizer, table, text, k=3)
    accepts_or_names({"word"}, es.analogy, unit, tokenizer, table, text, "man", "woman", k=3)
    accepts_or_names({"words"}, es.same_word_ids, tokenizer, [text])
    accepts_or_names({"words"}, es.parse_words, text)


@settings(max_examples=examples(60))
@given(table=ARRAYS, vectors=ARRAYS)
@example(table=np.zeros((0, 3)), vectors=np.zeros(3))  # word_vector: IndexError; pca_2d: LinAlgError
@example(table=np.array([np.nan, 1.0]), vectors=np.zeros((3, 1, 1)))  # pca_2d: ValueError (broadcast)
def test_embedding_arrays_accept_or_name_their_input(tokenizer, table, vectors):
    accepts_or_names({"table", "word"}, es.word_vector, tokenizer, table, "tomato")
    accepts_or_names({"table"}, es.unit_rows, table)
    accepts_or_names({"vectors"}, es.pca_2d, vectors)
    accepts_or_names({"coords"}, es.label_positions, vectors)


# ---- sizes and counts ---------------------------------------------------------------------------
def _the_most_that_fit(f):
    """A fit's count is the largest number of conversations whose caches fit in the free bytes."""
    if f.conversation_bytes <= 0:
        assert f.conversations == 0
        return
    assert f.conversations * f.conversation_bytes <= max(f.free_bytes, 0)
    assert (f.conversations + 1) * f.conversation_bytes > f.free_bytes
    assert f.free_bytes <= f.gpu_bytes - f.weights_bytes


@settings(max_examples=examples(150))
@given(gpu_gib=NUMBERS, tokens=COUNTS, kv=NUMBERS, weight=NUMBERS, reserve=NUMBERS)
@example(gpu_gib=float("nan"), tokens=4096, kv=2, weight=2, reserve=0.0)  # ValueError: NaN to integer
@example(gpu_gib=5.4e16, tokens=0, kv=2, weight=1e308, reserve=0.0)  # OverflowError
@example(gpu_gib=80, tokens=4096, kv=float("nan"), weight=2, reserve=0.0)
def test_fit_accepts_or_names_its_input(gpu_gib, tokens, kv, weight, reserve):
    model = load_configs()["models"]["SmolLM2-135M-Instruct"]
    f = accepts_or_names({"gpu_gib", "tokens", "bytes_per_value", "weight_bytes_per_param", "reserve"},
                         fit, model, gpu_gib, tokens, kv, weight, reserve)
    if f is not None:
        _the_most_that_fit(f)
        assert f.gpu_bytes == round(gpu_gib * 2**30)  # GiB: 2^30 bytes


@settings(max_examples=examples(100))
@given(fields=st.fixed_dictionaries({k: COUNTS for k in ("layers", "heads", "kv_heads", "head_dim", "context",
                                                         "sliding_layers", "sliding_window")}), params_b=NUMBERS)
@example(fields=dict(layers=49_152, heads=1, kv_heads=3669, head_dim=2**63, context=-1, sliding_layers=10,
                     sliding_window=1), params_b=float("nan"))  # fit: ValueError
def test_model_shape_accepts_or_names_its_field(fields, params_b):
    m = accepts_or_names(set(fields) | {"params_b"}, ModelShape, name="m", params_b=params_b, **fields)
    if m is not None:
        _the_most_that_fit(fit(m, 80, 4096, 2, 2))


@settings(max_examples=examples(100))
@given(n=NUMBERS, binary=st.booleans())
@example(n=float("nan"), binary=False)
@example(n=float("inf"), binary=True)
@example(n=10**400, binary=False)  # OverflowError
def test_human_bytes_accepts_or_names_the_number(n, binary):
    text = accepts_or_names({"bytes"}, human_bytes, n, binary)
    assert text is None or text.split()[-1].endswith("B")


@settings(max_examples=examples(100))
@given(values=st.tuples(COUNTS, COUNTS, COUNTS, COUNTS), bpv=NUMBERS)
@example(values=(2266358, 3449, -10**30, 10**30), bpv=2.7e282)  # OverflowError: float infinity to integer
@example(values=(1, 1, 1, 1), bpv=float("nan"))  # ValueError: NaN to integer
def test_kv_bytes_formula_accepts_or_names_its_input(values, bpv):
    out = accepts_or_names({"layers", "kv_heads", "head_dim", "tokens", "bytes_per_value"}, kv_bytes_formula,
                           *values, bpv)
    if out is not None:  # 2 (K and V) x layers x KV heads x head size x tokens x bytes per value
        assert out == pytest.approx(float(2 * math.prod(values)) * bpv, rel=1e-9, abs=1)


@settings(max_examples=examples(100))
@given(prompt=st.one_of(COUNTS, NUMBERS), new=st.one_of(COUNTS, NUMBERS))
@example(prompt=float("nan"), new=64)  # a NaN cost poisons the queue's ordering
@example(prompt=34, new=10**30)
def test_cost_of_accepts_or_names_its_input(prompt, new):
    cost = accepts_or_names({"prompt_tokens", "new_tokens"}, cost_of, prompt, new)
    if cost is not None:  # a decode step costs DECODE_STEP_COST prompt tokens of work
        assert isinstance(cost, int) and cost == prompt + DECODE_STEP_COST * new


@settings(max_examples=examples(100))
@given(head_dim=COUNTS, base=NUMBERS)
@example(head_dim=64, base=float("nan"))
@example(head_dim=10**12, base=100_000.0)  # MemoryError
@example(head_dim=-1, base=0.0)
def test_inv_freq_accepts_or_names_its_input(head_dim, base):
    f = accepts_or_names({"head_dim", "base"}, inv_freq, head_dim, base)
    assert f is None or (len(f) == head_dim // 2 and np.isfinite(f).all())


@settings(max_examples=examples(100))
@given(a=st.lists(NUMBERS, max_size=4), b=st.lists(NUMBERS, max_size=4))
@example(a=[], b=[])  # ValueError: min() arg is an empty sequence
@example(a=[0.0, 0.0], b=[0.1, 0.2])  # ZeroDivisionError in the verdict
@example(a=[0.1, 0.2], b=[0.0, 0.0])
@example(a=[float("nan")], b=[1.0])
@example(a=[1.0], b=[8.988465674311579e+307, 8.98846567431158e+307])  # their median overflowed to inf
def test_compare_runs_accepts_or_names_its_input(a, b):
    c = accepts_or_names({"a", "b"}, compare_runs, a, b)
    if c is not None:
        assert min(a) <= c.a_median <= max(a) and min(b) <= c.b_median <= max(b)
        separated = max(a) < min(b) or max(b) < min(a)
        assert c.separated == separated
        if not separated:
            assert c.verdict().startswith("no clear difference")
        else:  # the verdict names the side whose every run was faster
            assert c.verdict().startswith("A is" if max(a) < min(b) else "B is"), c.verdict()


@pytest.mark.parametrize("prices", [[], None, "x"])  # each raised AttributeError
def test_check_prices_names_the_prices(prices):
    with pytest.raises(InputError) as e:
        check_prices(prices)
    assert e.value.field == "prices"
    assert check_prices(default_prices())


@settings(max_examples=examples(100))
@given(seqs=st.lists(st.lists(st.one_of(st.integers(0, 100), st.integers()), max_size=4), max_size=3), block=COUNTS)
@example(seqs=[], block=0)  # batch_tensors/padding_share: ValueError (max of nothing); chain_hashes: range step 0
@example(seqs=[[8254, 0], [10**30, 0]], block=1)  # batch_tensors: ValueError (overflow when unpacking long long)
@example(seqs=[[-1]], block=2**63)  # decode_step_tensors: MemoryError for 2**63 cached positions
def test_batches_and_blocks_accept_or_name_their_input(seqs, block):
    from pipeline.stages.batch import decode_step_tensors

    accepts_or_names({"sequences"}, batch_tensors, seqs, 0)
    accepts_or_names({"n_cached", "token_id"}, decode_step_tensors, block, seqs[0][0] if seqs and seqs[0] else 0)
    accepts_or_names({"sequences"}, padding_share, seqs)
    accepts_or_names({"block_size"}, chain_hashes, [1, 2, 3], block)


@settings(max_examples=examples(40))
@given(name=st.one_of(st.sampled_from(["o200k_base", "cl100k_base", "llama3"]), TEXTS), text=TEXTS,
       ids=st.lists(st.integers(-3, 300_000), max_size=4))
@example(name="o200k_base", text="a\udfffb", ids=[])  # TypeError: encode_ordinary(): incompatible arguments
@example(name=" ", text="\x00", ids=[])  # RuntimeError: quicktok: unknown encoding
@example(name="cl100k_base", text="", ids=[-487_945_873])  # a negative id
def test_other_tokenizers_accept_or_name_their_input(name, text, ids):
    from pipeline.stages.tokens import compare, encode_other, other_pieces

    accepts_or_names({"name", "text"}, encode_other, name, text)
    accepts_or_names({"name", "ids"}, other_pieces, name, ids)
    out = accepts_or_names({"text"}, compare, text)
    for r in out or []:  # every accepted text comes back whole from its ids, one readable piece per id
        assert quicktok.get_encoding(r.name).decode(r.ids) == text and len(r.pieces) == len(r.ids), r.name


@settings(max_examples=examples(80))
@given(x=ARRAYS, positions=st.lists(st.one_of(st.integers(-3, 3), st.integers()), max_size=4), base=NUMBERS)
@example(x=np.float64(-1.7e308), positions=[351], base=10_000.0)  # IndexError: tuple index out of range
@example(x=np.zeros((2, 4)), positions=[0, -3742, 5], base=10_000.0)  # ValueError: broadcast
@example(x=np.zeros(4), positions=[2**63], base=10_000.0)
def test_rope_accepts_or_names_its_input(x, positions, base):
    from pipeline.stages.position import rotate, score_by_distance, shifted_scores, unrotate

    fields = {"x", "positions", "head_dim", "base", "q", "k", "shifts"}
    for fn in (rotate, unrotate):
        out = accepts_or_names(fields, fn, x, positions, base)
        assert out is None or out.shape == np.shape(x)
    accepts_or_names(fields, shifted_scores, x, np.ones(4), 0, positions[0] if positions else 0, positions, base)
    accepts_or_names(fields, score_by_distance, x, np.ones(4), positions, base)


@settings(max_examples=examples(80))
@given(a=ARRAYS, b=ARRAYS, head=COUNTS, positions=st.lists(COUNTS, max_size=4))
@example(a=np.zeros(1), b=np.float64(0.0), head=0, positions=[0])  # IndexError: tuple index out of range
@example(a=np.zeros((0, 2, 3)), b=np.zeros((0, 3)), head=252, positions=[134])  # ZeroDivisionError
@example(a=np.zeros((2, 2)), b=np.zeros((2, 2)), head=2**63, positions=[])  # OverflowError
def test_attention_and_layer_helpers_accept_or_name_their_input(a, b, head, positions):
    from pipeline.stages import attention as at
    from pipeline.stages import layers as ly

    accepts_or_names({"q_rot", "k_rot", "v", "head", "positions"}, at.attention_by_hand, a, b, b, head, positions)
    accepts_or_names({"rows"}, at.sharpest_head, a)
    accepts_or_names({"tiles", "gap"}, at.tile_grid, a)
    accepts_or_names({"rows", "start", "sinks"}, at.windowed, a, head, 1)
    accepts_or_names({"hidden_states"}, ly.norms, a)
    accepts_or_names({"hidden_states"}, ly.consecutive_cosine, a)
    accepts_or_names({"attn_out", "mlp_out"}, ly.contributions, a, b)
