"""The static-shape decode step (pipeline.model.decoders.graphed): greedy ids equal to the plain decoder's and to
HF generate's, on the tiny model here (the step run eagerly), on SmolLM2 (model tier) and on CUDA with the step
captured as a CUDA graph (skipped without CUDA)."""
import pytest
import torch
from kit.tensor_ops import logged_ops
from kit.tiny_models import TINY_APP_LAYOUT, make_tiny_lm, prompt_ids
from kit.tolerance import agreed_steps, any_logit_tolerance, assert_within

from pipeline.model.decoders.factory import captures_graphs, open_decoder
from pipeline.model.decoders.graphed import GraphedDecoder
from pipeline.model.decoders.plain import PlainDecoder, rollback
from pipeline.model.loader import LoadedModel

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
SPARE = 8  # positions the graphed decoder holds past the steps run: masked, never written


def hf_greedy(lm, ids: list[int], n: int) -> list[int]:
    """HF generate, greedy: the reference outside our code."""
    x = torch.tensor([ids], device=lm.device)
    with lm.lock, torch.inference_mode():
        out = lm.model.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n)
    return out[0, len(ids):].tolist()


def greedy(decoder, ids: list[int], n: int) -> tuple[list[int], list[torch.Tensor]]:
    """n greedy tokens from a decoder, and the logits each was chosen from."""
    logits, out, seen = decoder.prefill(ids), [], []
    for _ in range(n):
        seen.append(logits)
        out.append(int(logits.argmax()))
        logits = decoder.step(out[-1])
    return out, seen


def check_against_plain_and_hf(lm, ids: list[int], n: int) -> GraphedDecoder:
    graphed = GraphedDecoder(lm, len(ids) + n + SPARE)
    mine, my_logits = greedy(graphed, ids, n)
    plain, plain_logits = greedy(PlainDecoder(lm, len(ids) + n), ids, n)
    reference = hf_greedy(lm, ids, n)
    # the same dot products in another layout (attention also sums the masked zeros): float32 rounding apart
    # (kit.tolerance), the same ids unless a step's two best scores tie within it
    tol = any_logit_tolerance(lm, len(ids) + n)
    agreed = agreed_steps(mine, plain, torch.stack(plain_logits).numpy(), tol, "graphed against plain")
    assert agreed == len(plain)
    assert mine[:len(reference)] == reference  # generate stops at an end-of-turn token
    for a, b in zip(my_logits, plain_logits):
        assert_within(a, b, tol, "step scores")
    return graphed


def test_static_step_gives_the_plain_decoders_greedy_ids_and_hf_generates(tokenizer):
    """On the CPU the static step runs eagerly: the same ids as PlainDecoder and HF generate on the tiny model
    with SmolLM2's heads, and a cache position is written only at the step's own position."""
    lm = make_tiny_lm(tokenizer, seed=3, **TINY_APP_LAYOUT)
    ids = prompt_ids(lm)
    graphed = check_against_plain_and_hf(lm, ids, 24)
    assert graphed.T == len(ids) + 24 and graphed.captures == 0  # nothing captured off CUDA
    with torch.inference_mode():
        assert graphed.keys[:, :, :, :graphed.T].abs().amax(-1).gt(0).all()  # every position up to T written
        assert graphed.keys[:, :, :, graphed.T:].shape[3] == SPARE and not graphed.keys[:, :, :, graphed.T:].any()


def test_static_step_reads_its_token_and_position_from_tensors_and_rolls_back(tokenizer):
    """The step depends on the `token` and `position` tensors only (what a replayed graph reads), so a
    rollback (a speculative pass's rejected drafts) followed by the same token gives the same logits."""
    lm = make_tiny_lm(tokenizer, seed=3, **TINY_APP_LAYOUT)
    ids = prompt_ids(lm)
    decoder = GraphedDecoder(lm, len(ids) + 8)
    decoder.prefill(ids)
    first = decoder.step(42)
    decoder.step(7)
    decoder.step(9)
    rollback(decoder, len(ids))
    again = decoder.step(42)
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    with torch.inference_mode():  # the step by hand: the same buffers, the same output
        decoder.token.fill_(42)
        decoder.position.fill_(len(ids))
        decoder.static_step()
    torch.testing.assert_close(decoder.logits, first, rtol=0, atol=0)


def launched_ops(decoder: GraphedDecoder, token: int, position: int) -> list[tuple[str, tuple]]:
    """Every ATen op the static step runs for this token at this position, with its tensors' shapes."""
    with torch.inference_mode():
        decoder.token.fill_(token)
        decoder.position.fill_(position)
        with logged_ops() as ops:
            decoder.static_step()
    return ops


def test_the_static_step_runs_the_same_ops_on_the_same_shapes_at_every_position(tiny_lm, tokenizer):
    """What a CUDA graph needs, checked on the CPU: another token at another position runs the very same ops on
    the very same shapes, and no op reads a value back to the host (`.item()`), so one capture serves every step."""
    ids = tokenizer("Are tomatoes fruit?")["input_ids"]
    decoder = GraphedDecoder(tiny_lm, len(ids) + 16)
    decoder.prefill(ids)
    early, late = launched_ops(decoder, 42, len(ids)), launched_ops(decoder, 7, len(ids) + 11)
    assert early == late and len(early) > 10 * tiny_lm.dims.L
    assert not [op for op, _ in early if "_local_scalar_dense" in op or "item" in op]


def test_the_cpu_keeps_the_plain_decoder(tiny_lm):
    """Off CUDA nothing changes: open_decoder gives PlainDecoder itself."""
    assert not captures_graphs(tiny_lm)
    assert type(open_decoder(tiny_lm, 8)) is PlainDecoder


@needs_cuda
def test_on_cuda_the_step_is_captured_once_and_replays_the_same_ids(tokenizer):
    """On CUDA open_decoder gives GraphedDecoder; the step is captured once, and its replays give the plain
    decoder's and HF generate's greedy ids."""
    tiny = make_tiny_lm(tokenizer, seed=3, **TINY_APP_LAYOUT)
    lm = LoadedModel(model=tiny.model.to("cuda"), tokenizer=tokenizer, name="tiny-cuda", device=torch.device("cuda"))
    ids = prompt_ids(lm)
    assert type(open_decoder(lm, len(ids) + 4)) is GraphedDecoder
    graphed = check_against_plain_and_hf(lm, ids, 24)
    assert graphed.captures == 1


@pytest.mark.model
def test_on_smollm2_the_static_step_gives_hf_generates_greedy_ids(lm):
    """The real model, on whichever device it loaded (captured on CUDA): 32 tokens of the default question."""
    check_against_plain_and_hf(lm, prompt_ids(lm), 32)


@needs_cuda
def test_on_cuda_a_replayed_step_dispatches_a_handful_of_operations_not_a_thousand(tokenizer):
    """What the graph is for (docs/gpu.md): the eager step dispatches every operation, one kernel launch each; a
    replay dispatches the copies of its token and position and launches the recorded step at once."""
    import copy

    from pipeline.costs.launches import operations

    def one_step(lm, kind) -> int:
        """The operations of a step after the first two (where the graph is captured)."""
        decoder = kind(lm, len(ids) + 8)
        token = int(decoder.prefill(ids).argmax())
        for _ in range(2):
            token = int(decoder.step(token).argmax())
        return operations(lambda: decoder.step(token)).total

    tiny = make_tiny_lm(tokenizer, seed=3, **TINY_APP_LAYOUT)
    lm = LoadedModel(model=copy.deepcopy(tiny.model).to("cuda"), tokenizer=tokenizer, name="tiny-cuda",
                     device=torch.device("cuda"))
    ids = prompt_ids(lm)
    counts = {kind: one_step(lm, kind) for kind in (PlainDecoder, GraphedDecoder)}
    assert counts[PlainDecoder] > 10 * TINY_APP_LAYOUT["num_hidden_layers"]  # dozens a layer
    assert counts[GraphedDecoder] <= 10, counts
    assert one_step(tiny, PlainDecoder) == counts[PlainDecoder]  # on the CPU: the count does not follow the device
