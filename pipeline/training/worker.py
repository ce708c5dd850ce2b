"""The child process of one training step: `python -m pipeline.training.worker` reads a job as JSON on stdin
({"model", "ids", "other_ids", "optimizer", "lr"}), loads its own copy of the model's weights from the
weights cache, takes the step (pipeline.training.train_step.take_step) and prints the result as one JSON
line; bad input prints {"error": {"field", "message"}}. Nothing it changes outlives it."""
from __future__ import annotations

import json
import resource
import sys
import time


def main() -> int:
    from pipeline.core.errors import InputError

    try:
        job = json.loads(sys.stdin.read())
        t0 = time.perf_counter()
        from pipeline.model.loader import load_model
        from pipeline.training.train_step import take_step

        lm = load_model(job["model"], log=lambda msg: print(msg, file=sys.stderr))
        load_s = time.perf_counter() - t0
        result = take_step(lm.model, job["ids"], job["other_ids"], job["optimizer"], job["lr"])
    except InputError as e:
        print(json.dumps({"error": {"field": e.field, "message": e.message}}))
        return 0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    print(json.dumps({**result, "load_s": load_s, "peak_rss_bytes": peak, "model": lm.name}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
