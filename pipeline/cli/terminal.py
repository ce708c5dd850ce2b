"""What the CLI prints, made safe for a terminal.

User text and token text may hold control characters: '\\x1b[2J' clears the screen, '\\x1b]0;pwned\\x07'
retitles the window, '\\r' overwrites a line, U+202E reverses what follows. Everything the CLI writes
to stdout and stderr passes through `terminal_text`, which shows them escaped; newlines and tabs stay.
"""
from __future__ import annotations

import re
from contextlib import contextmanager, redirect_stderr, redirect_stdout

# C0 controls but tab and newline, DEL and C1, bidi embeddings/overrides/isolates, lone surrogates
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def terminal_text(text: str) -> str:
    """'\\x1b[2Jhi\\n' -> '\\\\x1b[2Jhi\\n' (the escape shown as four characters, the newline kept)."""
    return UNSAFE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) <= 0xFF else f"\\u{ord(m[0]):04x}", text)


class SafeStream:
    """A text stream that escapes what it is given, then writes it to `stream`."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(terminal_text(text))
        return len(text)

    def __getattr__(self, name):  # flush, fileno, isatty, encoding, ...
        return getattr(self.stream, name)


@contextmanager
def safe_output():
    """stdout and stderr escaped for the terminal while the block runs."""
    import sys

    with redirect_stdout(SafeStream(sys.stdout)), redirect_stderr(SafeStream(sys.stderr)):
        yield
