"""Why this token: attribution of one prediction, one module per job. Plain Python and torch, no Streamlit.

  record.py         the one captured pass a step's attribution reads (`record_step`: `StepRecord`)
  dla.py            direct logit attribution: embedding, each layer's attention and MLP, each head
  graph.py          the contribution graph (Ferrando & Voita 2024): L1-proximity shares, thresholded routes
  gradients.py      input attribution: gradient x input, integrated gradients on the embeddings
  interventions.py  ablating a head or an MLP; activation patching clean -> corrupted
  component_patching.py  attribution patching of every head and MLP, real patching of the top ones
  neurons.py        an MLP's neurons: each one's part of a token's logit, and the tokens it promotes
"""
