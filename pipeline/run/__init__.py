"""One request end to end, above the stages (docs/life-of-a-request.md follows one through the code).

  record.py          `Trace`: the typed record of one run that every page and the CLI read (`to_json`)
  trace.py           `run_trace`, `run_traces`: the stages in order; branches and constrained runs
  samples.py         many answers at once: N samples in one batch, compared position by position
  statistics.py      log-probabilities of a finished run
  compare_models.py  one request through two or more models, side by side
  compare_paths.py   the plain serving path and the captured run timed on one request, now
"""
