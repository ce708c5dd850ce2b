"""One error type for bad input, always naming the field that is wrong."""


class InputError(ValueError):
    """Raised for input a user can fix; `field` names the request field at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
