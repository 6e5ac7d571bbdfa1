"""Input errors that name the object and field at fault; the CLI prints them as one line and exits 2."""

from __future__ import annotations


class InputError(Exception):
    def __init__(self, obj: str, field: str, message: str) -> None:
        self.obj, self.field, self.message = obj, field, message
        super().__init__(f"{obj}: {field}: {message}" if field else f"{obj}: {message}")


def describe(obj: dict) -> str:
    """`Kind namespace/name` (or `Kind name` for cluster-scoped objects) for error messages."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
    name = meta.get("name", "<unnamed>")
    ns = meta.get("namespace")
    return f"{obj.get('kind', '<no kind>')} {ns + '/' if ns else ''}{name}"
