"""Token Pipeline Explorer backend: plain Python, no Streamlit, no HTML. Its packages stand on floors, each importing
only from the floors below (tests/project/test_layering.py):

  core          the one error type, input checks, atomic files, honest timing, long jobs as chunks
  text          token text made readable
  model         the model: loading, the one door every forward pass goes through, capture, prefill, decoders
  stages        one module per stage of a request's life
  attribution   why a token was chosen
  training      scoring under teacher forcing, one training step
  faster        weight formats, the plain serving path, speculative decoding
  costs         what the machine pays: FLOPs, bytes, ceilings, batching, temperature 0
  prompt_cache  blocks of K/V reused across requests, and the cache audit
  run           one request end to end into its Trace
  server        the queue, its engines, the stores, rooms
  lessons       lesson files: ordered stages a room walks through, checked with their lines
  cli           the command line (`__main__.py`: `python -m pipeline`)
  api           the OpenAI- and Anthropic-compatible API's bodies: parsed, checked, answered (server.py serves them)
"""
