"""Faster decode: ways to decode faster on the same hardware, each measured; here, more tokens per read."""
from views.chrome import page_header
from views.faster_decode_drafts import speculative_section

page_header("Faster decode", "Decoding one token reads the whole model once. To go faster, read fewer bytes per "
                             "token or get more tokens out of each read.")
speculative_section()
