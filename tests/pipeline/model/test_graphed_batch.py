"""The room's static batched decode step (pipeline.model.decoders.graphed_batch, stepped by
pipeline.stages.graphed_batch_decoding): every row's greedy ids equal the eager batched path's and the request's
alone, rows joining and leaving between steps; the step's shapes depend on the bucket only; the bucket choice; and
on CUDA each bucket captured once and replayed (skipped without CUDA)."""
import pytest
import torch
from kit.batching import assert_alone_equal, staggered
from kit.tensor_ops import logged_ops
from kit.tiny_models import TINY_APP_LAYOUT, make_tiny_lm
from kit.tolerance import any_logit_tolerance, assert_within

from pipeline.model.decoders.graphed_batch import GraphedBatch, batch_bucket, position_bucket
from pipeline.model.loader import LoadedModel
from pipeline.stages.batched_decoding import BatchDecoder
from pipeline.stages.graphed_batch_decoding import GraphedBatchDecoder, open_batch
from pipeline.stages.request import ChatRequest, GenerationOptions

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

QUESTIONS = [("Hi", 6), ("Are tomatoes fruit? Botanically, yes: a tomato is a fruit.", 9), ("Why?", 3),
             ("Name three colours of the rainbow, please.", 12), ("What is 2 + 2?", 5)]


def greedy_requests(n: int = len(QUESTIONS)) -> list[ChatRequest]:
    return [ChatRequest.from_question(q, options=GenerationOptions(max_new_tokens=k)) for q, k in QUESTIONS[:n]]


@pytest.fixture(scope="module")
def app_lm(tokenizer):
    return make_tiny_lm(tokenizer, seed=3, **TINY_APP_LAYOUT)


def test_bucket_choice():
    """Rows padded up to the next power of two (capped at the engine's max batch when they fit in it); positions
    to the next power of two, at least 64."""
    assert [batch_bucket(n) for n in (1, 2, 3, 4, 5, 8, 9, 17, 32, 33)] == [1, 2, 4, 4, 8, 8, 16, 32, 32, 64]
    assert [batch_bucket(n, max_batch=24) for n in (3, 17, 24, 25)] == [4, 24, 24, 32]
    assert [position_bucket(n) for n in (1, 64, 65, 200, 1000, 1024, 1025)] == [64, 64, 128, 256, 1024, 1024, 2048]
    with pytest.raises(ValueError):
        batch_bucket(0)


def test_rows_joining_and_leaving_get_the_eager_batchs_ids_and_their_ids_alone(app_lm):
    """Six greedy requests join a running batch at different steps and leave at their own ends (the batch goes
    1 -> 2 -> 4 -> 5 rows and down again, through the buckets 1, 2, 4, 8; rows leave in place inside a bucket too;
    the last one's 40 new tokens move every row from 64 to 128 positions): each one's ids and scores equal the
    eager batched path's (HF's forward over the left-padded cache) and the request run alone."""
    requests = greedy_requests() + [ChatRequest.from_question("Tell me a story.",
                                                              options=GenerationOptions(max_new_tokens=40))]
    join_at = [0, 1, 2, 2, 3, 5]
    static, engine = staggered(app_lm, requests, join_at, static_batch=True)
    eager, _ = staggered(app_lm, requests, join_at, static_batch=False)
    assert [t.generated_token_ids for t in static] == [t.generated_token_ids for t in eager]
    assert_alone_equal(app_lm, static, requests)  # ids, scores within 1e-4, KV use per step
    assert [[s.batch_size for s in t.steps] for t in static] == [[s.batch_size for s in t.steps] for t in eager]
    graphs = engine.graphs[id(app_lm)]
    assert max(s.batch_size for t in static for s in t.steps) == 5  # in the bucket of 8 rows
    assert set(graphs.buckets) == {(4, 128), (2, 128), (1, 128)}  # made since the buffer grew to 128 positions
    assert graphs.captures == 0  # nothing captured off CUDA


def test_a_second_batch_reuses_the_buckets_the_first_made(app_lm):
    """The engine keeps the static step (and its buckets, graphs on CUDA) when its batch empties: the next
    request in a bucket seen before runs on the very same tensors."""
    from pipeline.server.trace_engine import TraceEngine

    engine = TraceEngine(lambda r: app_lm, static_batch=True)
    for round_ in range(2):
        handle = engine.start((round_, greedy_requests(1)[0], None))
        while not engine.step():
            pass
        assert handle not in engine.started and not engine.batches
        graphs = engine.graphs[id(app_lm)]
        if round_ == 0:
            first = dict(graphs.buckets)
    assert graphs.buckets == first and all(graphs.buckets[k] is first[k] for k in first)


def launched_shapes(graphs: GraphedBatch, bucket, tokens, positions) -> list[tuple[str, tuple]]:
    """Every ATen op bucket's step runs for these tokens at these positions, with its tensors' shapes."""
    with torch.inference_mode():
        bucket.tokens.copy_(torch.tensor(tokens))
        bucket.positions.copy_(torch.tensor(positions))
        with logged_ops() as ops:
            graphs.static_step(bucket)
    return ops


def test_the_steps_shapes_depend_only_on_the_bucket(tiny_lm):
    """What one capture per bucket needs, checked on the CPU: other tokens at other positions, with one live row
    or all eight (the rest padding: token 0 at position 0), run the very same ops on the very same shapes, and no
    op reads a value back to the host; another bucket changes the shapes."""
    graphs = GraphedBatch(tiny_lm)
    bucket = graphs.bucket(8, 64)
    one_row = launched_shapes(graphs, bucket, [42] + [0] * 7, [5] + [0] * 7)
    all_rows = launched_shapes(graphs, bucket, list(range(100, 108)), [63, 1, 17, 30, 2, 9, 40, 55])
    assert one_row == all_rows and len(one_row) > 10 * tiny_lm.dims.L
    assert not [op for op, _ in one_row if "_local_scalar_dense" in op or "item" in op]
    other = launched_shapes(graphs, graphs.bucket(4, 128), [1, 2, 3, 4], [0, 1, 2, 3])
    assert [op for op, _ in other] == [op for op, _ in one_row] and other != one_row


def test_a_row_reads_only_its_own_cache_row_and_positions(tiny_lm):
    """Rows are independent: a row's logits do not change when the other rows hold other tokens, positions and
    cache contents (its own row and mask alone are read), to float rounding of the batch's matmuls."""
    graphs = GraphedBatch(tiny_lm)
    b = graphs.bucket(4, 64)
    torch.manual_seed(0)
    with torch.inference_mode():
        b.keys.normal_()
        b.values.normal_()
        b.tokens.copy_(torch.tensor([7, 8, 9, 10]))
        b.positions.copy_(torch.tensor([12, 3, 40, 0]))
    first = graphs.step(b)
    with torch.inference_mode():
        b.keys[:, 1:].normal_()  # the other rows' caches, tokens and positions changed
        b.values[:, 1:].normal_()
        b.keys[:, 0, :, 12].zero_()  # row 0's own slot 12 is rewritten by the step itself
        b.tokens.copy_(torch.tensor([7, 99, 3, 5]))
        b.positions.copy_(torch.tensor([12, 60, 0, 33]))
    again = graphs.step(b)
    assert_within(again[0], first[0], any_logit_tolerance(tiny_lm, 64), "row 0")  # the batch's matmuls' rounding
    assert not torch.allclose(again[1], first[1])


def test_the_cpu_keeps_the_eager_batch(tiny_lm, gemma_tokenizer):
    """Off CUDA the room's batch is BatchDecoder itself; asked for the static step, a model PlainDecoder does not
    cover (Gemma 3) keeps BatchDecoder too."""
    from kit.tiny_models import tiny_gemma3, wrap

    assert type(open_batch(tiny_lm)) is BatchDecoder
    assert type(open_batch(tiny_lm, static=True)) is GraphedBatchDecoder
    gemma = wrap(tiny_gemma3(gemma_tokenizer), gemma_tokenizer, "tiny-gemma")
    assert type(open_batch(gemma, static=True)) is BatchDecoder


@needs_cuda
def test_on_cuda_each_bucket_is_captured_once_and_replays_the_same_ids(tokenizer):
    """On CUDA the room's batch is GraphedBatchDecoder; every bucket is captured once (a second round of the same
    requests captures nothing more) and the ids equal the eager batched path's and each request's alone."""
    tiny = make_tiny_lm(tokenizer, seed=3, **TINY_APP_LAYOUT)
    lm = LoadedModel(model=tiny.model.to("cuda"), tokenizer=tokenizer, name="tiny-cuda", device=torch.device("cuda"))
    assert type(open_batch(lm)) is GraphedBatchDecoder
    requests, join_at = greedy_requests(), [0, 1, 2, 2, 3]
    static, engine = staggered(lm, requests, join_at, static_batch=None)
    eager, _ = staggered(lm, requests, join_at, static_batch=False)
    assert [t.generated_token_ids for t in static] == [t.generated_token_ids for t in eager]
    assert_alone_equal(lm, static, requests)
    graphs = engine.graphs[id(lm)]
    assert graphs.captures == len(graphs.buckets) > 1


@pytest.mark.model
def test_on_smollm2_the_static_batch_gives_the_eager_batchs_and_alone_ids(lm):
    """The real model (captured on CUDA, eager on a CPU): three requests joining at different steps."""
    requests, join_at = greedy_requests(3), [0, 1, 2]
    static, _ = staggered(lm, requests, join_at, static_batch=True)
    eager, _ = staggered(lm, requests, join_at, static_batch=False)
    assert [t.generated_token_ids for t in static] == [t.generated_token_ids for t in eager]
    assert_alone_equal(lm, static, requests)
