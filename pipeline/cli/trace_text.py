"""A readable walk through a trace, stage by stage, for the terminal."""
from __future__ import annotations

import json

from pipeline.costs.named_time import tpot, ttft
from pipeline.run.record import Trace


def _h(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 66 - len(title)))


def print_trace(t: Trace) -> None:
    m = t.dims
    _h("1. Request")
    print(f"id {t.request.id}  states: " + " -> ".join(f"{s['state']}@{s['t_s']:.3f}s" for s in t.request.states))
    print(json.dumps(t.request.openai, ensure_ascii=False, indent=1))
    _h("2. Chat template")
    print(t.prompt_text)
    _h("3. Tokens")
    print(f"{len(t.tokens)} tokens")
    for tok in t.tokens:
        print(f"  [{tok.index:3d}] {tok.id:6d}  {tok.role:9s} {tok.text}")
    if [x.id for x in t.naive_tokens] != t.ids:
        print(f"  (tokenized naively, special-token look-alikes would give {len(t.naive_tokens)} tokens)")
    _h("4. Tensors")
    for name, d in t.batch["single"].items():
        print(f"  {name:15s} shape {d['shape']} dtype {d['dtype']}")
    _h("5. Prefill")
    print(f"  model {m.name}: L={m.L} H={m.H} Hkv={m.Hkv} Dh={m.Dh} D={m.D} V={m.V} {m.dtype} on {m.device}")
    for name, array in t.tensors().items():
        print(f"  {name:14s} {list(array.shape)}")
    print(f"  prefill took {t.prefill.seconds * 1000:.1f} ms; "
          f"KV cache holds {sum(t.prefill.kv_bytes_per_layer):,} bytes")
    _h("6. Decode")
    for s in t.steps:
        top = ", ".join(f"{c.text} {c.prob:.0%}" for c in s.top[:3])
        print(f"  step {s.step:3d}  {s.token_id:6d} {s.token_text:14s} cache {s.kv_cache_tokens:5d} tok "
              f"{s.kv_cache_bytes:>11,} B  {s.seconds * 1000:6.1f} ms  [{top}]")
    _h("7. Completed")
    first, per_token = ttft(t), tpot(t)
    tpot_text = f"{per_token.label} {per_token.seconds * 1000:.0f} ms" if per_token else "TPOT n/a (one token)"
    print(f"  finish_reason={t.finish_reason}  {first.label} {first.seconds * 1000:.0f} ms  {tpot_text}")
    print(f"  usage {t.usage.to_json()}")
    print(f"  released {t.cleanup.kv_bytes_released:,} bytes of KV cache")
    print(f"  text: {t.text}")
