"""The model and its capture: loading (offline), the one door every Hugging Face forward pass goes
through (the plain serving path's decoder steps around it, see loader.py), the model's dimensions,
named hooks, and the prefill that records every internal tensor.

  registry.py        the models by name (or a folder), and what each one is
  model_kind.py      what the pages say about how a model was trained (instruct, base, unknown)
  weights_cache.py   each model's weights on disk, converted once from its GGUF
  hf_imports.py      names from transformers, imported under one lock
  loader.py          `LoadedModel` and its `forward`: the one door (lock, inference mode, attention kernel, count)
  handle.py          `ModelHandle`: what the app holds; name, dimensions and tokenizer at once, the network on first use
  interface.py       `LanguageModel`: what every stage asks of the model
  warm_up.py         a model's first-call set-up, before any request
  dims.py            `ModelDims`: the dimensions in the house letters
  vocabulary.py      token names and special ids, straight from tokenizer.json
  passes.py          forward passes counted, everyone's and each caller's
  capture.py         named forward hooks (`LlamaLayout`, `Gemma3Layout`)
  prefill.py         the prompt through the model, every internal tensor captured (`run_prefill`)
  prefill_record.py  that prefill as a torch-free record (`Prefill`)
  past.py            what a prefill continues from: positions an earlier request computed (`Past`)
  rope.py            rotary position embedding, written once
  kv_tensors.py      reading an HF KV cache: per-layer tensors, length, bytes
  kv_int8.py         the KV cache in 8 bits (measured, not served)
  weight_formats.py  the network in fewer bytes: fp32, bf16, int8 weight-only
  decoders/          what the decode loop steps
"""
