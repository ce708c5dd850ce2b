"""Predict, then reveal: a room's polls (the presenter asks, learners answer, Reveal shows the class beside the model).

  record.py   `Poll`, the five kinds (`KINDS`), what counts as an answer (bounded, cleaned)
  store.py    `PollStore`: polls and answers kept beside the room's file (replicas share them), the presenter's rights
  real.py     the model's real figure of each kind, from the functions the pages use
  tally.py    the class's answers counted beside that figure (the class view's rows)
  summary.py  the room summary's rows and CSV
"""
