"""`trace --samples N` in the terminal: each sample's answer, then the positions where the samples disagree and by how
much (pipeline.stages.disagreement.MEASURE)."""
from __future__ import annotations

from pipeline.run.samples import SampleSet


def print_samples(tokenizer, samples: SampleSet) -> None:
    n = len(samples.samples)
    print(f"\n== {n} samples drawn together in one batch " + "=" * 40)
    for i, s in enumerate(samples.samples):
        print(f"  [{i}] seed {s.seed}, temperature {s.temperature:g}, {len(s.generated_token_ids)} tokens "
              f"({s.finish_reason}): {s.text!r}")
    if samples.all_identical:
        print("  All the samples are identical: raise their temperature (--temperature, or --temperatures one per "
              "sample) to see them part.")
        return
    parted = [p for p in samples.positions if p.disagree]
    print(f"  They disagree at {len(parted)} of {len(samples.positions)} positions; how much there: {samples.measure}.")
    for p in parted[:12]:
        tokens = " | ".join("-" if t is None else repr(tokenizer.decode([t]))[1:-1][:12] for t in p.token_ids)
        print(f"  position {p.position:3d}: {p.divergence if p.divergence is not None else 0:.3f} bits  {tokens}")
    if len(parted) > 12:
        print(f"  … and {len(parted) - 12} more in the JSON (--json).")
    print(f"  drawing them took {samples.draw_s:.2f} s (prefill once, then one batched pass per step).")
