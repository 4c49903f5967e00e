"""How the remote commands print for people: plain tables, `name: value` lines, UTC times, and
progress on stderr while a long list is read."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

CELL = 60  # longest table cell, in characters (the whole value is in --json)


def when(epoch_ms: int | None) -> str:
    if not epoch_ms:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch_ms / 1000))


def cell(value: Any, width: int = CELL) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        value = ", ".join(str(v) for v in value)
    text = " ".join(str(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    cells = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = []
    for row in [list(headers), *cells]:
        padded = [text.ljust(widths[i]) for i, text in enumerate(row)]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def fields(pairs: Iterable[tuple[str, Any]]) -> str:
    """`name: value` lines, names aligned (values whole: one object, not a table)."""
    shown = [(name, value) for name, value in pairs if value not in (None, "", [], {})]
    width = max((len(name) for name, _ in shown), default=0)
    out = []
    for name, value in shown:
        text = ", ".join(str(v) for v in value) if isinstance(value, list) else str(value)
        out.append(f"{name + ':':<{width + 1}} {text}")
    return "\n".join(out)


def print_raw(text: str) -> None:
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


class Progress:
    """`read N <things>` on stderr while a list is read page after page, when stderr is a
    terminal (a pipe or a log gets nothing, so a failure stays one line)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.shown = False
        self.live = sys.stderr.isatty()

    def update(self, count: int, pages: int) -> None:
        if self.live and pages > 1:
            sys.stderr.write(f"\rread {count} {self.what} ({pages} pages)…")
            sys.stderr.flush()
            self.shown = True

    def done(self) -> None:
        if self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
