"""Faster decode: ways to decode faster on the same hardware, each measured: fewer bytes per token (weight
formats, an 8-bit KV cache), then more tokens per read (speculative decoding)."""
from views.chrome.frame import page_header
from views.chrome.navigation import back_next
from views.pages.faster_decode.drafts import speculative_section
from views.pages.faster_decode.weights import weight_formats_section

page_header("Faster decode", "A decode step reads every weight once to move one token forward: on a CPU its time "
                             "follows the bytes it reads. To go faster, read fewer bytes per token, or get more "
                             "tokens out of each read.")
weight_formats_section()
speculative_section()
back_next()
