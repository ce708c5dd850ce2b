"""Continuous batching through the static batched step (pipeline.model.decoders.graphed_batch): the room's
BatchDecoder, its joined rows stepped by one bucket's fixed-shape step (a replayed CUDA graph on CUDA).

Answers join and leave between steps as in BatchDecoder (their options, generators, streams and records are its
own); only where the joined rows' keys and values live and how one pass runs them differ. Row i of the batch is
row i of the bucket's cache, its positions 0 ... n-1 in slots 0 ... n-1 (no padding to the longest row). At a
merge the rows that stay are moved down over the holes of those that left, the joiners' prefill caches are written
behind them, and when the live rows or the longest need (positions held + tokens still allowed + 1) call for
another bucket, every live row is copied into it.

open_batch gives this decoder on CUDA for a Llama with float weights (where the plain path takes GraphedDecoder)
and BatchDecoder everywhere else, so the CPU path is unchanged:

    graphs = {}                               # kept by the caller across batches: id(lm) -> GraphedBatch
    batch = open_batch(lm, graphs)            # BatchDecoder on a CPU
    row = batch.join(answer, kv_cache); batch.step() ...
"""
from __future__ import annotations

import torch

from pipeline.model.decoders.factory import captures_graphs
from pipeline.model.decoders.graphed_batch import Bucket, GraphedBatch, batch_bucket, position_bucket
from pipeline.model.decoders.plain import supports
from pipeline.model.interface import LanguageModel
from pipeline.stages.batched_decoding import BatchDecoder, BatchRow
from pipeline.stages.kv_cache import held_bytes, position_bytes


def uses_graphed_batch(lm: LanguageModel) -> bool:
    """Whether the room's batched decode runs through the static batched step: where the plain path's step is a
    captured CUDA graph (float weights on CUDA) and PlainDecoder covers the model (a Llama)."""
    return captures_graphs(lm) and supports(lm.model)


def steps_static(lm: LanguageModel, static: bool | None = None) -> bool:
    """Whether lm's room batch steps through the static batched step: where uses_graphed_batch (static None), or
    static=True for a Llama on any device (a test on a CPU)."""
    return uses_graphed_batch(lm) if static is None else bool(static) and supports(lm.model)


def open_batch(lm: LanguageModel, graphs: dict[int, GraphedBatch] | None = None,
               static: bool | None = None) -> BatchDecoder:
    """The room's batched decoder for lm: GraphedBatchDecoder where steps_static, else BatchDecoder. graphs: the
    caller's {id(lm): GraphedBatch}, kept across batches so a bucket is captured once per model."""
    if not steps_static(lm, static):
        return BatchDecoder(lm)
    graphs = {} if graphs is None else graphs
    if id(lm) not in graphs:
        graphs[id(lm)] = GraphedBatch(lm)
    return GraphedBatchDecoder(lm, graphs[id(lm)])


def bucket_bytes(lm: LanguageModel, rows: int, longest: int, max_batch: int | None = None) -> int:
    """The key and value bytes of the bucket `rows` rows step in when the longest needs `longest` positions: every
    layer, the rows padded to batch_bucket, each row to position_bucket. By hand, SmolLM2 in float32 (30 layers,
    1,536 B a position in a layer), 20 rows, one of them needing 4,100 positions: 30 x 32 x 8,192 x 1,536 B =
    12.1 GB, where those rows' own positions may take a tenth of it."""
    return lm.dims.L * batch_bucket(rows, max_batch) * position_bucket(longest) * position_bytes(lm.dims)


def batch_held_bytes(lm: LanguageModel, rows: list[tuple[int, int]], graphs: GraphedBatch | None = None,
                     static: bool | None = None) -> int:
    """The KV bytes lm's rows (prompt tokens, max new tokens) hold together in the room's batch at their longest.
    BatchDecoder: each row its own cache (kv_cache.held_bytes at prompt + max new tokens). The static batched step:
    its bucket (bucket_bytes, the longest need as decoding's `need` counts it), or the buffer lm's GraphedBatch
    already keeps if that is larger (it is kept after its batch ends, for the next one)."""
    if not rows:
        return 0
    if not steps_static(lm, static):
        return sum(sum(held_bytes(lm.dims, prompt + new)) for prompt, new in rows)
    padded = bucket_bytes(lm, len(rows), max(prompt + new + 1 for prompt, new in rows),
                          graphs.max_batch if graphs is not None else None)
    kept = graphs.buffer.numel() * graphs.buffer.element_size() if graphs is not None else 0
    return max(padded, kept)


def need(row: BatchRow) -> int:
    """Positions a row may still reach: those it holds, one per token it may still take, and one more."""
    return row.length + row.answer.options.max_new_tokens - len(row.answer.generated) + 1


class GraphedBatchDecoder(BatchDecoder):
    """BatchDecoder whose joined rows live in a GraphedBatch bucket and step through its static step."""

    def __init__(self, lm: LanguageModel, graphs: GraphedBatch):
        super().__init__(lm)
        self.graphs = graphs
        self.bucket: Bucket | None = None

    def _merge(self, keep: list[int], joining: list[tuple[BatchRow, list]]) -> None:
        """Rows `keep` (moved down in order over the holes) then the joiners, in the bucket their number and their
        longest need call for (every live row copied over when that is another bucket)."""
        self.joining = []
        kept = [self.rows[i] for i in keep]
        rows = kept + [r for r, _ in joining]
        if not rows:
            self.rows, self.bucket = [], None
            return
        B = batch_bucket(len(rows), self.graphs.max_batch)
        T = position_bucket(max(need(r) for r in rows))
        old = self.bucket
        with torch.inference_mode():
            if old is not None and (old.B, old.T) == (B, T):
                for dst, src in enumerate(keep):  # dst <= src, ascending: a source is never overwritten first
                    if dst != src:
                        n = self.rows[src].length
                        old.keys[:, dst, :, :n] = old.keys[:, src, :, :n]
                        old.values[:, dst, :, :n] = old.values[:, src, :, :n]
                moved = []
            else:  # copied out first: every bucket's cache is a view of one buffer
                moved = [(old.keys[:, i, :, :r.length].clone(), old.values[:, i, :, :r.length].clone())
                         for i, r in zip(keep, kept)]
            self.bucket = b = self.graphs.bucket(B, T)
            for slot, (k, v) in enumerate(moved):
                b.keys[:, slot, :, :k.shape[2]], b.values[:, slot, :, :v.shape[2]] = k, v
            for slot, (row, layers) in enumerate(joining, start=len(kept)):
                for i, (k, v) in enumerate(layers):  # each (1, Hkv, n, Dh): the row's prefill
                    b.keys[i, slot, :, :row.length], b.values[i, slot, :, :row.length] = k[0], v[0]
        self.rows = rows

    def padding(self, row: BatchRow) -> int:
        """Slots of the bucket the last pass ran for `row` beyond its own positions (masked: after its position)."""
        return (self.bucket.T if self.bucket is not None else row.length) - row.length

    def _forward(self, tokens: list[int]) -> torch.Tensor:
        """The rows' tokens at their own positions through the bucket's step (the padding rows: token 0 at 0)."""
        b, pad = self.bucket, self.bucket.B - len(tokens)
        positions = [r.length for r in self.rows]
        if max(positions) >= b.T:
            raise ValueError(f"the bucket holds {b.T} positions a row; position {max(positions)} does not fit")
        with torch.inference_mode():
            b.tokens.copy_(torch.tensor(tokens + [0] * pad))
            b.positions.copy_(torch.tensor(positions + [0] * pad))
        return self.graphs.step(b)[:len(tokens)]
