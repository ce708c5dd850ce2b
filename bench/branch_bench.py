"""What a branch costs next to running the request again with the same token forced.

  .venv/bin/python bench/branch_bench.py [--prompt-tokens 500] [--step 20] [--repeats 3]

The request has a ~500-token prompt; its answer is captured once. Then, interleaved and repeated:
  branch  - `branch_trace`: the prompt's keys/values rebuilt from the capture, the answer so far fed
            once, the second-best token forced at --step, decoding goes on (no prompt pass);
  re-run  - `run_trace(..., force={step: token})`: the whole request again, prompt pass included.
Both must choose the same tokens (checked); the figures are medians with their ranges, and the ratio
is only claimed when the ranges do not overlap (pipeline/core/timing.py).
"""
from __future__ import annotations

import argparse
import sys

from pipeline.core.timing import interleave
from pipeline.model.loader import shared_model
from pipeline.run.trace import branch_trace, run_trace
from pipeline.stages.request import ChatRequest, GenerationOptions

PARAGRAPH = ("Tomatoes grow on vines in warm gardens. Botanists call them fruit because they form from the "
             "flower and hold seeds, while cooks treat them as vegetables because they taste savoury. ")


def long_request(lm, prompt_tokens: int, new_tokens: int) -> ChatRequest:
    """A question after enough background text that the whole prompt is about `prompt_tokens` long."""
    per_paragraph = len(lm.tokenizer.encode(PARAGRAPH))
    background = PARAGRAPH * max(1, (prompt_tokens - 40) // per_paragraph + 1)
    return ChatRequest.from_question(background + "\nSo, are tomatoes fruit? Explain in a few sentences.",
                                     options=GenerationOptions(max_new_tokens=new_tokens))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompt-tokens", type=int, default=500)
    ap.add_argument("--step", type=int, default=20)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    lm = shared_model()
    request = long_request(lm, args.prompt_tokens, args.new_tokens)
    original = run_trace(request, lm)
    step = min(args.step, len(original.steps) - 1)
    token = original.steps[step].top[1].id  # the runner-up at that step
    branches, reruns = [], []

    def branch():
        branches.append(branch_trace(original, step, token, lm))
        return branches[-1].timings.total_s

    def rerun():
        reruns.append(run_trace(request, lm, force={step: token}))
        return reruns[-1].timings.total_s

    cmp = interleave(branch, rerun, args.repeats)
    assert all(b.generated_token_ids == r.generated_token_ids for b, r in zip(branches, reruns)), \
        "the branch and the forced re-run chose different tokens"
    n_after = len(branches[0].generated_token_ids) - step
    print(f"prompt {len(original.ids)} tokens; answer forced at step {step} to token {token} "
          f"({lm.tokenizer.decode([token])!r}), {n_after} tokens from there; same tokens both ways")
    print(f"  branch (cut cache, no prompt pass) {cmp.a_median * 1e3:8,.0f} ms "
          f"(range {cmp.a_range[0] * 1e3:,.0f}-{cmp.a_range[1] * 1e3:,.0f})")
    print(f"  re-run with the token forced       {cmp.b_median * 1e3:8,.0f} ms "
          f"(range {cmp.b_range[0] * 1e3:,.0f}-{cmp.b_range[1] * 1e3:,.0f})")
    print(f"  branch / re-run: {cmp.ratio:.2f} of the cost; {cmp.verdict('the branch', 'the re-run')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
