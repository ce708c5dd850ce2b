"""Which kernel a bf16 decode step reads its weights with (pipeline.model.weight_formats.aten_bf16_gemv): on a CPU
with native bf16, a one-token step runs no oneDNN matmul (oneDNN copies every weight into its own layout on every
call), a pass over several tokens still does, and torch's process-wide switch comes back however a step ends.
Fast tier (tiny models); bench/weight_formats_bench.py measures what it buys on the real model."""
import ctypes

import pytest
from kit.texts import DEFAULT_QUESTION
from kit.tiny_models import tiny_llama_or_gemma


def native_bf16() -> bool:
    """Whether torch hands bf16 matmuls to oneDNN on this CPU (AVX-512 with bf16, or AMX)."""
    import torch

    return torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()


@pytest.fixture(scope="module", params=["llama", "gemma"])
def bf16_lm(request, tokenizer):
    """A tiny random Llama (the plain decoder), then a tiny Gemma 3 (its own plain decoder), in bf16."""
    from pipeline.model.loader import converted_copy

    base = tiny_llama_or_gemma(request, tokenizer, request.param)
    return converted_copy(base, "bf16")


def onednn_matmuls(capfd, run) -> int:
    """How many oneDNN matmul primitives `run()` executes: oneDNN's verbose log, one line per execution, read from
    the process's stdout (C's buffer flushed first)."""
    import torch

    capfd.readouterr()
    with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
        run()
    ctypes.CDLL(None).fflush(None)
    return sum(",primitive,exec,cpu,matmul," in line for line in capfd.readouterr().out.splitlines())


@pytest.mark.skipif(not native_bf16(), reason="this CPU has no native bf16: torch never hands bf16 to oneDNN")
def test_a_bf16_decode_step_runs_no_onednn_matmul_and_a_pass_over_tokens_does(bf16_lm, capfd):
    """Before aten_bf16_gemv a bf16 step ran its projections on oneDNN (7 on the tiny Llama; 1, the head, on the
    tiny Gemma, whose other matmuls are under oneDNN's size floor)."""
    from pipeline.model.decoders.factory import open_decoder

    ids = bf16_lm.tokenizer(DEFAULT_QUESTION)["input_ids"]
    dec = open_decoder(bf16_lm, len(ids) + 8)
    token = int(dec.prefill(ids).argmax())
    assert onednn_matmuls(capfd, lambda: dec.step(token)) == 0
    assert onednn_matmuls(capfd, lambda: dec.run([token] * 4)) > 0  # 4 rows: oneDNN's copy pays for itself


def test_onednn_comes_back_when_the_last_overlapping_step_ends_or_fails():
    import torch

    from pipeline.model.weight_formats import aten_bf16_gemv

    w16, w32 = torch.zeros(2, 2, dtype=torch.bfloat16), torch.zeros(2, 2)
    assert torch.backends.mkldnn.enabled
    with aten_bf16_gemv(w16, 1):
        assert not torch.backends.mkldnn.enabled
        with aten_bf16_gemv(w16, 1):  # a second step overlapping the first (another thread)
            pass
        assert not torch.backends.mkldnn.enabled  # the first is still running
    assert torch.backends.mkldnn.enabled
    with pytest.raises(RuntimeError), aten_bf16_gemv(w16, 1):
        raise RuntimeError("a step that fails")
    assert torch.backends.mkldnn.enabled
    for weight, n in ((w16, 4), (w32, 1)):  # several tokens, or float32 weights: oneDNN (or MKL) as before
        with aten_bf16_gemv(weight, n):
            assert torch.backends.mkldnn.enabled


def test_a_user_who_switched_onednn_off_keeps_it_off():
    import torch

    from pipeline.model.weight_formats import aten_bf16_gemv

    torch.backends.mkldnn.enabled = False
    try:
        with aten_bf16_gemv(torch.zeros(2, 2, dtype=torch.bfloat16), 1):
            assert not torch.backends.mkldnn.enabled
        assert not torch.backends.mkldnn.enabled
    finally:
        torch.backends.mkldnn.enabled = True
