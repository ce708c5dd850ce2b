"""One error type for bad input, always naming the field that is wrong."""


class InputError(ValueError):
    """Raised for input a user can fix; `field` names the request field at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def json_error(e) -> str:
    """A json.JSONDecodeError in words, its place last: 'Unterminated string starting at line 1, column 12'
    (json's own message ends in 'starting at' and gives the place apart); 'Expecting value at line 2, column 5'."""
    where = f"line {e.lineno}, column {e.colno}"
    return f"{e.msg} {where}" if e.msg.endswith(" at") else f"{e.msg} at {where}"
