"""One error type for bad input, printed as a single line naming file, field and value."""


class InputError(Exception):
    """Bad user input: a file, a field in it, and the offending value.

    The message is one line so that a failing MPI rank or a CLI prints something a person can
    act on: ``<file>: field '<field>': <problem> (value <value>)``.
    """

    def __init__(self, path, problem, field=None, value=None):
        self.path = str(path) if path is not None else None
        self.field = field
        self.value = value
        self.problem = problem
        parts = []
        if self.path:
            parts.append(self.path)
        if field is not None:
            parts.append(f"field '{field}'")
        text = problem if value is None else f"{problem} (value {_short(value)})"
        parts.append(text)
        super().__init__(": ".join(parts))


def _short(value, limit=80):
    text = repr(value) if not isinstance(value, str) else value
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
