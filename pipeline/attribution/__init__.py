"""Why this token: attribution of one prediction, one module per job. Plain Python and torch, no Streamlit.

  record.py         the one captured pass a step's attribution reads (`record_step`: `StepRecord`)
  window.py         the positions attribution reads when a step has more than record.MAX_POSITIONS
  dla.py            direct logit attribution: embedding, each layer's attention and MLP, each head
  graph.py          the contribution graph (Ferrando & Voita 2024): L1-proximity shares, thresholded routes
  nodes.py          the graph's nodes one at a time: what each writes towards the prediction, what removing it does
  qk.py             why a head attends where it does: its score split into query-side x key-side parts
  gradients.py      input attribution: gradient x input, integrated gradients on the embeddings
  interventions.py  ablating a head or an MLP; activation patching clean -> corrupted
  prefix.py         patched runs that skip the prefix clean and corrupted prompts share
  component_patching.py  attribution patching of every head and MLP, real patching of the top ones
  neurons.py        an MLP's neurons: each one's part of a token's logit, and the tokens it promotes
  explain.py        one step's explanation as a plain document (the CLI's `explain --json`)
"""
