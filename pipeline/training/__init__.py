"""How the model learned: teacher forcing on any text (`score.py`), the memory a training step needs
(`memory.py`) and one real optimizer step on a copy of the weights in a child process (`train_step.py`,
run by `worker.py`). Plain Python: no Streamlit, no HTML; torch comes in inside the functions."""
