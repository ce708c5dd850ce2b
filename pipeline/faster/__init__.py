"""Faster decode, measured against the captured run (docs/faster-decode.md).

  fast_path.py   the plain serving path: no hooks, no per-step tables, its own decoders (`generate`, `open_answer`)
  formats.py     what each weight format costs and buys: bytes, speed and quality against fp32
  speculative/   drafts from the text so far, verified by the full model in one pass
"""
