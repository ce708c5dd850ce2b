"""The weights in fewer bytes: one network converted to float32 (as loaded), bfloat16 or int8 weight-only.

A decode step reads every weight once, so a step's time follows the bytes read per token (SmolLM2 in
float32: 540 MB). Fewer bytes per weight means less to read:

    fp32  as loaded (the reference every figure is compared with)
    bf16  every tensor in bfloat16 (`model.to(torch.bfloat16)`): 2 bytes a weight, activations in bf16 too
    int8  each block's Linear weights as int8 with one float32 scale per output row (torchao's
          `Int8WeightOnlyConfig`, which runs on a CPU and a GPU); activations, norms, embeddings and the
          tied vocabulary projection stay float32 (the projection is V x D: quantizing it too costs
          quality and, tied to the embeddings, would keep both copies)

The hook names and shapes stay as they are: the modules are the same, only their weights change, so the
captures work on every format. The plain decoder (pipeline/model/decoders/plain.py) reads an int8 weight through
`Int8Rows.project`: on a CPU torch's int8 weight-only GEMV (`_weight_int8pack_mm`, bf16 activations into
it), elsewhere the rows de-quantized per call. It runs a bf16 step of one token inside `aten_bf16_gemv`:
ATen's own bf16 kernel instead of oneDNN's, which repacks every weight on every call.

    model = convert(copy.deepcopy(fp32_model), "int8")
    parameter_bytes(model)   # what it holds; bytes_per_token(model) what one decode step reads

The names and `check_weights` load without torch (a request validates its `weights` with them).
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from pipeline.core.errors import InputError

if TYPE_CHECKING:
    import torch

WEIGHT_FORMATS = ("fp32", "bf16", "int8")
DEFAULT_WEIGHTS = "fp32"
FORMAT_NOTES = {
    "fp32": "float32 weights, as loaded",
    "bf16": "bfloat16 weights and activations",
    "int8": "int8 weights (one scale per row) in every block; float32 activations, embeddings and vocabulary "
            "projection",
}
NOT_BUILT = {"int4": "torchao 0.18's int4 weight-only does not run on this CPU (its CPU packing format is refused, "
                     "the plain one needs the mslk package)"}


def check_weights(value) -> str:
    """The `weights` option: one of WEIGHT_FORMATS, else an InputError naming the field."""
    if value not in WEIGHT_FORMATS:
        extra = f" ({NOT_BUILT[value]})" if value in NOT_BUILT else ""
        raise InputError("weights", f"must be one of {', '.join(WEIGHT_FORMATS)}, got {value!r}{extra}.")
    return value


def is_block_linear(module: torch.nn.Module, name: str) -> bool:
    """The Linears int8 quantizes: every one inside the decoder blocks (not the vocabulary projection)."""
    import torch

    return isinstance(module, torch.nn.Linear) and ".layers." in f".{name}"


def convert(model: torch.nn.Module, weights: str) -> torch.nn.Module:
    """Convert `model` (float32, loaded) to `weights` in place and return it."""
    import torch

    check_weights(weights)
    if weights == "bf16":
        model.to(torch.bfloat16)
    elif weights == "int8":
        from torchao.quantization import Int8WeightOnlyConfig, quantize_

        quantize_(model, Int8WeightOnlyConfig(), filter_fn=is_block_linear)
    return model


def is_int8(weight: torch.Tensor) -> bool:
    """A weight torchao quantized to int8 (its data and scales readable as `qdata`, `scale`)."""
    import torch

    return getattr(weight, "qdata", None) is not None and weight.qdata.dtype == torch.int8


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a tensor holds: an int8 weight's data and its scales, else numel x element size."""
    if is_int8(t):
        return tensor_bytes(t.qdata) + tensor_bytes(t.scale)
    return t.numel() * t.element_size()


def parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes of every distinct parameter (tied ones once)."""
    seen = {id(p): p for p in model.parameters()}
    return sum(tensor_bytes(p) for p in seen.values())


def bytes_per_token(model: torch.nn.Module) -> int:
    """Weight bytes one decode step reads: every block's weights and the vocabulary projection in full, one
    row of the embeddings (a tied projection is read whole as the head). The KV cache read is apart."""
    head = model.get_output_embeddings().weight
    embed = model.get_input_embeddings().weight
    rest = {id(p): p for p in model.parameters() if p is not head and p is not embed}
    row = tensor_bytes(embed) // embed.shape[0]
    return sum(tensor_bytes(p) for p in rest.values()) + tensor_bytes(head) + (0 if embed is head else row)


def weights_of(model: torch.nn.Module) -> str:
    """Which format a converted model is in (the loaded one: fp32)."""
    import torch

    if any(is_int8(p) for p in model.parameters()):
        return "int8"
    return "bf16" if next(model.parameters()).dtype == torch.bfloat16 else "fp32"


@dataclass
class Int8Rows:
    """An int8 weight (N, D) and its row scales (N,), for one token's projection in the plain decoder."""

    qdata: torch.Tensor  # (N, D) int8
    scale: torch.Tensor  # (N,) float32
    scale_bf16: torch.Tensor  # (N,) the same in bfloat16, as the CPU kernel takes them

    @classmethod
    def of(cls, weight: torch.Tensor) -> "Int8Rows":
        import torch

        scale = weight.scale.reshape(-1).float()
        return cls(weight.qdata, scale, scale.to(torch.bfloat16))

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """x (n, D) float32 -> x @ (qdata * scale).T (n, N) float32."""
        import torch
        import torch.nn.functional as F

        if x.device.type == "cpu":  # one fused int8 GEMV on every core (bf16 in, bf16 out)
            return torch._weight_int8pack_mm(x.to(torch.bfloat16), self.qdata, self.scale_bf16).to(x.dtype)
        return F.linear(x, self.qdata.to(x.dtype)) * self.scale.to(x.dtype)


ATEN_GEMV = True  # False: a bf16 step on oneDNN as before (bench/weight_formats_bench.py's "bf16 oneDNN" row)
_gemv_lock = threading.Lock()
_gemv_users = 0  # steps inside aten_bf16_gemv now; oneDNN is off for bf16 while it is above 0


@contextmanager
def aten_bf16_gemv(weight: torch.Tensor, n: int) -> Iterator[None]:
    """One token's bf16 matmuls on a CPU through ATen's own kernel, not oneDNN's (nothing changes otherwise).

    Where the CPU has native bf16, torch hands every bf16 matmul to oneDNN. Its kernel (brgemm) wants the
    weight in its own blocked layout and copies the plain (N, D) weight into it on every call: for one row of
    input that copy is a second read and a write of every weight, so a bf16 decode step read its 269 MB about
    three times (SmolLM2, 2 AMD EPYC cores: 63 ms of CPU a step in bf16 against 71 in fp32, not half).
    ATen's kernel is one dot product per output in float32, each weight read once (38 ms, half of fp32).
    Per row, though, it reads the weight again: from 4 rows oneDNN's copy pays for itself (bench/RESULTS.md,
    2026-12-06), so only n == 1, a decode step, takes this path; a prefill or a verify pass keeps oneDNN.

        with aten_bf16_gemv(weight, len(tokens)):   # weight: any of the step's weights (its dtype, device)
            logits = project(x, head)

    torch's switch (`torch.backends.mkldnn.enabled`) is process-wide: while a step runs here, a bf16 matmul
    of another thread runs on ATen's kernel too (the same sums in another order; fp32 matmuls use MKL either
    way). Steps overlapping in two threads are counted, and oneDNN comes back when the last one ends.
    """
    import torch

    global _gemv_users
    if not ATEN_GEMV or n != 1 or weight.dtype != torch.bfloat16 or weight.device.type != "cpu":
        yield
        return
    with _gemv_lock:
        ours = _gemv_users > 0 or torch.backends.mkldnn.enabled  # else the user switched oneDNN off: leave it
        if ours:
            _gemv_users += 1
            torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        if ours:
            with _gemv_lock:
                _gemv_users -= 1
                if _gemv_users == 0:
                    torch._C._set_mkldnn_enabled(True)
