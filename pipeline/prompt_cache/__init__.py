"""Prompt caching: the engine (real K/V blocks reused across requests), the scenarios (a
conversation, the traps and their fixes) and their playback on the model.

  engine.py     blocks of real K/V reused across requests
  reuse.py      the server's prefix cache: every request the queue serves goes through it
  saving.py     what a run's reuse saved, measured against the same prompt uncached
  outcomes.py   what happened to one block (hit, miss, ...), torch-free
  scenarios.py  the conversation, traps and fixes as data
  playback.py   playing them on the model
  audit/        the cache audit: a real request log replayed under the providers' rules
"""
