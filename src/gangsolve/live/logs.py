"""Structured logs: one line per event, `msg key=value ...` for people or one JSON object for machines."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import orjson

logger = logging.getLogger("gangsolve")


def log(level: int, msg: str, *, exc_info: BaseException | None = None, **fields: Any) -> None:
    """`exc_info`: an exception whose traceback goes into the record (field `exc`)."""
    logger.log(level, msg, exc_info=exc_info, extra={"fields": fields})


def info(msg: str, **fields: Any) -> None:
    log(logging.INFO, msg, **fields)


def warning(msg: str, **fields: Any) -> None:
    log(logging.WARNING, msg, **fields)


def error(msg: str, *, exc_info: BaseException | None = None, **fields: Any) -> None:
    log(logging.ERROR, msg, exc_info=exc_info, **fields)


def debug(msg: str, **fields: Any) -> None:
    log(logging.DEBUG, msg, **fields)


def _text(value: Any) -> str:
    s = str(value)
    return orjson.dumps(s).decode() if (not s or any(c in s for c in ' "=\n')) else s


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        fields = getattr(record, "fields", {})
        parts = [ts, record.levelname, record.getMessage()]
        parts += [f"{k}={_text(v)}" for k, v in fields.items()]
        line = " ".join(parts)
        if record.exc_info:
            line += " exc=" + _text(self.formatException(record.exc_info))
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
            **getattr(record, "fields", {}),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def setup(fmt: str = "text", level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
