"""The model and its capture: loading (offline), the one door every Hugging Face forward pass goes
through (the plain serving path's decoder steps around it, see loader.py), the model's dimensions,
named hooks, and the prefill that records every internal tensor."""
