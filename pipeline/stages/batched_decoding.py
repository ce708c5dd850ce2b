"""Continuous batching: answers decoded together, one forward pass per step for all of them; an answer
joins before any step and leaves at its own end."""
from __future__ import annotations

import time
from typing import Sequence

import torch

from pipeline.model.decoders.protocol import CacheDecoder, Decoder
from pipeline.model.interface import LanguageModel
from pipeline.model.kv_tensors import bytes_per_layer, cache_layers, cache_len, cache_with_room, place_rows, room_left
from pipeline.model.passes import current_counter, passes_for
from pipeline.stages.decode_record import Decode
from pipeline.stages.generation import TOP_CANDIDATES, Answer
from pipeline.stages.request import GenerationOptions

SPARE_POSITIONS = 64  # a batch's new cache has room for this many positions more than its rows may add ...


SPARE_ROWS = 4  # ... and for this many rows more (at least; half its rows), so most joins and leaves are in place


class BatchRow:
    """One answer in a BatchDecoder: its own cache's real positions, or a decoder of its own (`solo`)."""

    def __init__(self, answer: Answer, length: int, per_position: list[int], decoder=None):
        self.answer, self.length, self.per_position, self.decoder = answer, length, per_position, decoder
        self.counter = current_counter()  # whose passes its steps are (the caller that joined it)
        self.ended = False
        self._kv_at_end: tuple[int, int] | None = None  # (bytes, positions) it held when it ended
        self._decode: Decode | None = None

    def end(self) -> None:
        """The answer has ended: its completed event is sent now (the stream's order) and what it held noted."""
        kv_tokens, kv_bytes = self.usage()
        self._kv_at_end = (sum(kv_bytes), kv_tokens)
        self.answer.close()
        self.ended = True

    @property
    def result(self) -> Decode | Answer | None:
        """Once ended: the Decode (recorded; assembled when first asked for, which may be on a thread that
        finishes runs away from the decode loop: stacking its step scores is ~30 ms) or the Answer."""
        if not self.ended:
            return None
        if not self.answer.record:
            return self.answer
        if self._decode is None:
            self._decode = self.answer.result(*self._kv_at_end)
        return self._decode

    def usage(self) -> tuple[int, list[int]]:
        """(positions it holds, its bytes per layer): its own, never the batch's padding."""
        if isinstance(self.decoder, CacheDecoder):
            return self.decoder.usage()
        return self.length, [b * self.length for b in self.per_position]


class BatchDecoder:
    """Answers decoded together, one forward pass per step for all of them, as servers do; an answer may
    join before any step and leaves at its own end (continuous batching: pipeline.server.run_queue steps it).

    Each answer keeps its own options, random generator and stream. Their KV caches are joined into one
    batch, left-padded to the longest (B, Hkv, T, Dh) with an attention mask that hides the padding; each
    row continues at its own position. The answers that joined since the last step and the rows that left
    in it are merged together at the step (`_merge`): in place when the cache has room (only those rows
    copied), else into a new cache, each position copied once, where the padding every row has in common is
    cut. Each step writes its new position into the cache's room (kv_tensors.cache_with_room).
    A cache that cannot be padded into the batch is decoded on its own (`solo`), in the same step: a
    plain-path decoder, or a cache whose sliding-window layer (Gemma 3) keeps fewer positions than the
    request holds or would before the answer ends (padded rows past a window would shift it), so every
    answer is the one it would be alone, up to the batch's rounding.
    """

    def __init__(self, lm: LanguageModel):
        self.lm = lm
        self.rows: list[BatchRow] = []  # in the joined cache's row order
        self.joining: list[tuple[BatchRow, list]] = []  # joined since the last step: (row, its cache's layers)
        self.solo: list[BatchRow] = []
        self.cache, self.mask = None, None  # the joined DynamicCache and its (B, T) mask, 1 = real
        windows = [w for w in (lm.dims.window(i) for i in range(lm.dims.L)) if w]
        self.window = min(windows) if windows else None

    def __len__(self) -> int:
        return len(self.rows) + len(self.joining) + len(self.solo)

    def join(self, answer: Answer, cache=None, decoder: Decoder | None = None) -> BatchRow:
        """Add an answer after its prefill: its HF cache (joined into the batch when it can be) or a decoder
        of its own. It chooses its next token at the next step (where its cache is merged into the batch)."""
        if decoder is not None:
            row = BatchRow(answer, 0, [], decoder)
            self.solo.append(row)
            return row
        n = cache_len(cache)
        per_position = [b // max(n, 1) for b in bytes_per_layer(cache)]  # bytes one position holds, per layer
        batched = self.rows + [r for r, _ in self.joining]
        width = [self.mask.shape[1]] if self.mask is not None else []  # with the padding a merge in place keeps
        T = max([n] + [r.length for r in batched] + width)  # the joined cache's length once it is in
        left = answer.options.max_new_tokens - len(answer.generated)
        longest = max([left] + [r.answer.options.max_new_tokens - len(r.answer.generated) for r in batched])
        cropped = any(k.shape[2] != n for k, _ in cache_layers(cache))
        if cropped or (self.window is not None and T + longest >= self.window - 1):
            row = BatchRow(answer, n, per_position, CacheDecoder(self.lm, cache))
            self.solo.append(row)
            return row
        row = BatchRow(answer, n, per_position)
        self.joining.append((row, cache_layers(cache)))
        return row

    def padding(self, row: BatchRow) -> int:
        """Positions the last pass ran for `row` beyond its own: the left padding up to the longest row."""
        return (self.mask.shape[1] if self.mask is not None else row.length) - row.length

    def step(self) -> list[BatchRow]:
        """Every answer chooses its next token; those that ended leave (`ended`, their `result` ready, returned);
        the others' tokens go through the model: one pass for the joined rows, one each for the solo ones."""
        size, ended, tokens = len(self), [], {}
        for row in self.rows + [r for r, _ in self.joining] + self.solo:
            answer = row.answer
            token = answer.choose(*(row.usage() if answer.record else (0, None)), batch_size=size)
            if token is None:
                row.end()
                ended.append(row)
            else:
                tokens[id(row)] = token
        self.solo = [r for r in self.solo if not r.ended]
        if self.joining or any(r.ended for r in self.rows):
            self._merge([i for i, r in enumerate(self.rows) if not r.ended],
                        [(r, layers) for r, layers in self.joining if not r.ended])
        t_fed = time.perf_counter()
        if self.rows:
            for r in self.rows:
                r.answer.t_prev = t_fed
            with passes_for([r.counter for r in self.rows]):  # one pass for every row's caller
                last = self._forward([tokens[id(r)] for r in self.rows])  # (B, V)
            for r in self.rows:
                r.length += 1
            logits = last.cpu().numpy()
            kth = [None] * len(self.rows)
            if any(r.answer.record for r in self.rows):  # every row's k-th best score in one pass: 1.1 ms for
                # 28 rows, where a partition per row (maths.top_indices) takes 0.28 ms each
                kth = torch.topk(last, min(TOP_CANDIDATES, last.shape[1]), dim=-1).values[:, -1].tolist()
            for i, r in enumerate(self.rows):
                r.answer.fed(logits[i], kth[i])
        for r in self.solo:
            r.answer.t_prev = time.perf_counter()
            with passes_for([r.counter]):  # its own pass
                r.answer.fed(r.decoder.step(tokens[id(r)]))
            r.length += 1
        return ended

    def _forward(self, tokens: list[int]) -> torch.Tensor:
        """The joined rows' tokens through the model in one pass, each row at its own next position (its `length`).
        Returns the logits (B, V) float32."""
        self.mask = torch.cat([self.mask, torch.ones((len(self.rows), 1), dtype=self.mask.dtype,
                                                     device=self.mask.device)], dim=1)
        positions = torch.tensor([[r.length] for r in self.rows], device=self.mask.device)  # (B, 1)
        out = self.lm.forward([[t] for t in tokens], cache=self.cache, attention_mask=self.mask,
                              position_ids=positions)
        return out.logits[:, -1].float()

    def _merge(self, keep: list[int], joining: list[tuple[BatchRow, list]]) -> None:
        """The joined cache of rows `keep` then the `joining` ones. In place when the cache has room for them
        (the rows that left are filled by the last rows, the joiners written into spare rows: only those rows
        copied); else one new cache left-padded to the longest row (the padding every row had in common cut),
        each position copied once, with room for every position the rows may still add and for more rows."""
        self.joining = []
        kept = [self.rows[i] for i in keep]
        rows = kept + [r for r, _ in joining]
        if not rows:
            self.rows, self.cache, self.mask = [], None, None
            return
        room = 1 + max(r.answer.options.max_new_tokens - len(r.answer.generated) for r in rows)
        spare_rows, spare_positions = room_left(self.cache) if kept else (0, 0)
        T = self.mask.shape[1] if kept else 0
        if (kept and len(rows) - len(self.rows) <= spare_rows and spare_positions >= room
                and all(r.length <= T for r, _ in joining)):
            holes = [i for i in range(len(kept)) if i not in set(keep)]
            moves = list(zip([i for i in keep if i >= len(kept)], holes))  # the last rows fill the holes
            order = list(range(len(kept)))
            for src, dst in moves:
                order[dst] = src
            self.rows = [self.rows[i] for i in order] + [r for r, _ in joining]
            place_rows(self.cache, moves, len(self.rows))
            self._write_joiners(len(kept), joining, T)
        else:
            self.rows, T = rows, max(r.length for r in rows)  # every row's own positions are its last `length`
            old = cache_layers(self.cache) if kept else []
            every = keep == list(range(len(old[0][0]))) if kept else True  # no row left: copied as they are
            index = slice(None) if every else torch.tensor(keep, device=self.mask.device)
            parts = old if kept else joining[0][1]  # any part, for the shapes: (B', Hkv, t, Dh) per layer
            self.cache = cache_with_room([(len(rows), k.shape[1], T, k.shape[3]) for k, _ in parts], parts[0][0],
                                         self.lm.config, room + SPARE_POSITIONS, max(SPARE_ROWS, len(rows) // 2))
            for (k_new, v_new), (k, v) in zip(cache_layers(self.cache), old):
                w = min(k.shape[2], T)  # the old positions still needed
                k_new[:len(kept), :, :T - w], v_new[:len(kept), :, :T - w] = 0, 0
                k_new[:len(kept), :, T - w:] = k[index, :, k.shape[2] - w:]
                v_new[:len(kept), :, T - w:] = v[index, :, v.shape[2] - w:]
            self._write_joiners(len(kept), joining, T)
        mask = torch.zeros((len(self.rows), T), dtype=torch.long, device=self.lm.device)
        for i, r in enumerate(self.rows):
            mask[i, T - r.length:] = 1
        self.mask = mask

    def _write_joiners(self, first: int, joining: list[tuple[BatchRow, list]], T: int) -> None:
        """The joiners' own caches into rows first, first + 1, ... of the joined cache (T positions wide)."""
        for li, (k_new, v_new) in enumerate(cache_layers(self.cache)):
            for j, (row, own) in enumerate(joining, start=first):
                pad = T - row.length
                k_new[j, :, :pad], v_new[j, :, :pad] = 0, 0  # the padding: zeros, and hidden by the mask
                k_new[j, :, pad:], v_new[j, :, pad:] = own[li][0][0], own[li][1][0]


def decode_batch(lm: LanguageModel, caches: list, first_logits: list[torch.Tensor], options: list[GenerationOptions],
                 rids: list[str], started_at: list[float],
                 prompt_ids: list[Sequence[int]] | None = None) -> list[Decode]:
    """Several requests decoded together from the start (a static batch): a BatchDecoder stepped to its end.
    The bytes recorded per request are its own rows' (real positions, not padding).
    prompt_ids: each request's prompt ids (for its repetition penalty)."""
    batch = BatchDecoder(lm)
    prompts = prompt_ids or [None] * len(rids)
    rows = [batch.join(Answer(lm, lg, o, r, t, prompt_ids=ids), c)
            for c, lg, o, r, t, ids in zip(caches, first_logits, options, rids, started_at, prompts)]
    while len(batch):
        batch.step()
    return [row.result for row in rows]
