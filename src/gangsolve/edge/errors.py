"""Input errors that name the object and field at fault; the CLI prints them as one line and exits 2."""

from __future__ import annotations

import reprlib

# Values quoted in messages are cut short: a bad value may be megabytes long or nested a thousand deep.
_short = reprlib.Repr()
_short.maxlevel, _short.maxstring, _short.maxother = 3, 60, 60
_short.maxlist = _short.maxdict = _short.maxtuple = _short.maxset = 4
MAX_MESSAGE = 300
MAX_NAME = 253  # the longest name Kubernetes allows


def printable(text: str) -> str:
    """`text` with control and other unprintable characters escaped: a name read from a snapshot must not
    move the cursor, recolour the terminal or split a one-line error in two."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shown(value: object) -> str:
    """A short, printable repr of a value from the input, for messages."""
    return printable(_short.repr(value))


class InputError(Exception):
    def __init__(self, obj: str, field: str, message: str) -> None:
        self.obj, self.field = printable(obj), printable(field)
        message = printable(message)
        self.message = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 1] + "…"
        text = f"{self.obj}: {self.field}: {self.message}" if field else f"{self.obj}: {self.message}"
        super().__init__(text)


def describe(obj: dict) -> str:
    """`Kind namespace/name` (or `Kind name` for cluster-scoped objects) for error messages; printable and
    short whatever the object holds."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    return named(obj.get("kind", "<no kind>"), meta.get("name", "<unnamed>"), meta.get("namespace"))


def named(kind: object, name: object, namespace: object) -> str:
    """`Kind namespace/name`, as `describe` names an object."""
    return f"{_text(kind)} {_text(namespace) + '/' if namespace else ''}{_text(name)}"


def _text(value: object) -> str:
    if not isinstance(value, str):
        return shown(value)
    return printable(value if len(value) <= MAX_NAME else value[: MAX_NAME - 1] + "…")
