"""Faster decode: reading fewer bytes per token (weight formats, an 8-bit KV cache)."""
from views.chrome import page_header
from views.faster_decode_weights import weight_formats_section

page_header("Faster decode", "A decode step reads every weight once to move one token forward: on a CPU its time "
                             "follows the bytes it reads. Fewer bytes per weight, fewer bytes per token.")
weight_formats_section()
