"""What the machine pays for a run: costs per pass (costs.py), this machine's ceilings (ceilings.py),
batched decode measured (sweep.py), temperature 0 alone vs in a batch (determinism.py), the room's four
metrics (metrics.py). Plain Python; torch only inside the functions that run it."""
