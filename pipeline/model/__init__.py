"""The model and its capture: loading (offline), the one door every forward pass goes through,
the model's dimensions, named hooks, and the prefill that records every internal tensor."""
