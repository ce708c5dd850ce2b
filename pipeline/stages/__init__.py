"""One module per stage of a request's life, named like the page that shows it.

  request.py         the request and its options, checked when built; the ranges the app offers
  logit_bias.py      a logit bias typed as text ('13:-100, 42:2.5'), checked against the vocabulary
  vendor_bodies.py   the request as OpenAI's and Anthropic's JSON bodies
  request_lifecycle.py  its id, its states (queued -> completed) and `check_fits` (the prompt fits the window)
  template.py        the chat template and its segments
  tokens.py          tokens, tagged with their roles; other tokenizers
  batch.py           tensors and batch padding
  embeddings.py      the embedding table as a space
  position.py        RoPE recomputed with the model's base and head width
  layers.py          the residual stream and the logit lens
  commitment.py      where each answer token was decided: the first layer from which the lens keeps it
  attention.py       which earlier tokens each token reads from
  next_token.py      from logits to one token: penalties, bias, temperature, filters, a draw
  disagreement.py    how much several samples' next-token distributions differ (Jensen–Shannon)
  penalties.py       penalties and logit bias on the raw scores
  generation.py      the decode loop (`Answer`, `stream_answer`, `decode_loop`)
  decode_record.py   what the decode loop produced, as torch-free records (`Decode`, `Step`)
  batched_decoding.py        continuous batching (`BatchDecoder`)
  graphed_batch_decoding.py  the same through the static batched step (`open_batch`)
  kv_cache.py        what the KV cache holds, saves and costs
  branch.py          what if: an answer continued from any step with another token
  constrained.py     constrained output: a grammar as a mask at every step
  model_map.py       the architecture map as plain data, each part naming its page
"""
