"""Speculative decoding with no second model: drafts from the text so far (drafts.py), checked by the full model in
one pass and rolled back past the first miss (verify.py), what each verify pass records and the option's bounds,
torch-free (rounds.py), measured against plain greedy decoding (measure.py)."""
