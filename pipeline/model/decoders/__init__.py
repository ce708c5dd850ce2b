"""What the decode loop steps, one module per decoder.

  protocol.py       `Decoder`, `RecordingDecoder`, and `CacheDecoder`: HF's forward over a KV cache (the captured path)
  plain.py          `PlainDecoder`: a Llama's decode step straight from its weights (the plain serving path)
  gemma.py          `GemmaPlainDecoder`: the same for Gemma 3
  graphed.py        `GraphedDecoder`: the plain step at fixed shapes, a CUDA graph on CUDA
  graphed_batch.py  `GraphedBatch`: the room's batched step at fixed shapes per bucket
  factory.py        `open_decoder`: the decoder that is exact for a model
"""
