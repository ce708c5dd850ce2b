"""The questions and texts tests ask with."""

DEFAULT_QUESTION = "Are tomatoes fruit?"
KOREAN = "토마토는 과일이야?"  # "Is a tomato a fruit?"; SmolLM2's greedy answer: 'The word "토마…', 토 over steps 3-5

LONG_NOTES = " ".join(f"Box {i} is {('red', 'green', 'blue', 'yellow')[i % 4]} and holds {i * 7 % 13} apples."
                      for i in range(45)) + " Which box holds the most apples?"  # ~600 tokens
LONG_QUESTION = " ".join(f"Box {i} is {('red', 'green', 'blue', 'yellow')[i % 4]} and holds {i * 7 % 13} apples."
                         for i in range(48)) + " Which box holds the most apples?"  # ~600 prompt tokens
CLEAN, CORRUPTED = "Are tomatoes fruit? Yes, they", "Are carrots fruit? Yes, they"  # a patching pair
