"""What the machine pays for a run. Plain Python; torch only inside the functions that run the model.

  pass_costs.py     FLOPs and bytes of one forward pass, from the model's dimensions (the one count every page uses)
  ceilings.py       this machine's two ceilings, measured: FLOP/s and memory bandwidth
  roofline.py       a pass placed on the roofline: its shares of the two ceilings
  regimes.py        what holds a placed pass back (memory, compute or the fixed cost of a pass), in one sentence
  plain_steps.py    the plain serving path's passes on the roofline, and this machine's fixed cost of a pass
  launches.py       how many operations a pass dispatches
  named_time.py     a time named by what it measured and the path it ran on (TTFT, TPOT; captured, plain, batched)
  verdicts.py       every speed verdict kept, dated
  batched.py        a plain batched greedy decode (the sweep and the determinism check share it)
  sweep.py          batching measured: B requests decoded together, tokens/s and ms per token
  determinism.py    temperature 0 alone and inside a batch
  temperature_zero.py  one greedy request run N times through the room's continuous batching
  parting.py        where identical greedy requests part, counted on plain lists
  metrics.py        the four numbers a serving team watches, for the room now
  report.py         everything the serving command measures, as one JSON-ready dict
"""
