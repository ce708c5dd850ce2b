"""Faster decode: ways to decode faster on the same hardware, each measured: fewer bytes per token (weight
formats, an 8-bit KV cache), then more tokens per read (speculative decoding)."""
from views.chrome import page_header
from views.faster_decode_drafts import speculative_section
from views.faster_decode_weights import weight_formats_section
from views.page_path import back_next

page_header("Faster decode", "A decode step reads every weight once to move one token forward: on a CPU its time "
                             "follows the bytes it reads. To go faster, read fewer bytes per token, or get more "
                             "tokens out of each read.")
weight_formats_section()
speculative_section()
back_next()
