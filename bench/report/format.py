"""How the report writes a figure: a share, a duration, a number; "-" where there is none."""

from __future__ import annotations


def pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f}%"


def secs(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1000:.0f}ms" if x < 1 else f"{x:.2f}s"


def num(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)
