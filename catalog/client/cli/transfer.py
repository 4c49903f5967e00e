"""The remote commands that move a store: export it to an archive and import one, with progress
and the archive checked on the way."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from catalog.client.cli.base import client_for, wants_json
from catalog.client.errors import CatalogError
from catalog.client.output import print_raw

# --- backup and restore --------------------------------------------------------------------------

MIB = 1024 * 1024


class Transfer:
    """`<verb> 12.0 MiB (4,000 lines)…` on stderr while an archive goes by, when stderr is a
    terminal, at most ten times a second."""

    def __init__(self, verb: str, total: int | None = None) -> None:
        self.verb = verb
        self.total = total
        self.live = sys.stderr.isatty()
        self.shown = 0.0

    def update(self, done: int, lines: int | None = None) -> None:
        now = time.monotonic()
        if not self.live or now - self.shown < 0.1:
            return
        self.shown = now
        size = f"{done / MIB:.1f} MiB" + (f" of {self.total / MIB:.1f} MiB" if self.total else "")
        more = f" ({lines:,} lines)" if lines is not None else ""
        sys.stderr.write(f"\r{self.verb} {size}{more}…")
        sys.stderr.flush()

    def note(self, text: str) -> None:
        if self.live:
            sys.stderr.write(f"\r\033[K{text}…")
            sys.stderr.flush()
            self.shown = time.monotonic()

    def done(self) -> None:
        if self.live and self.shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


class ArchiveCheck:
    """An archive as it arrives, checked as the server checks one it imports: it ends with its
    manifest, which counts the lines before it and holds their sha256 (each line with its
    newline). `finish` raises CatalogError `TRUNCATED` or `CORRUPT` otherwise."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()
        self.rest = b""  # after the last newline so far
        self.held: bytes | None = None  # the last complete line (the manifest, if it is the last)
        self.lines = 0  # complete lines hashed
        self.size = 0

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        *complete, self.rest = (self.rest + chunk).split(b"\n")
        for line in complete:
            if self.held is not None:
                self.digest.update(self.held + b"\n")
                self.lines += 1
            self.held = line

    def finish(self) -> dict[str, Any]:
        """The manifest, once the archive is known whole."""
        try:
            manifest = json.loads(self.held) if self.held is not None and not self.rest else None
        except ValueError:
            manifest = None
        if not isinstance(manifest, dict) or manifest.get("kind") != "manifest":
            raise CatalogError(
                0,
                "TRUNCATED",
                f"the archive ended after {self.size} bytes without its manifest line: the export did not "
                "finish (the server's request timeout, CATALOG_REQUEST_TIMEOUT, may be too short for it)",
            )
        if manifest.get("lines") != self.lines or manifest.get("sha256") != self.digest.hexdigest():
            raise CatalogError(0, "CORRUPT", "the archive does not match its manifest (lines or sha256)")
        return manifest


_WORDS = {
    "entry_version": "version",
    "transcript": "transcript vector",
    "lineage": "lineage edge",
    "origin": "transcript lineage edge",
}


def _counted(counts: dict[str, Any]) -> str:
    """`12 entries, 20 entry versions, 2 grants, ...`: the kinds that are there."""
    shown = []
    for kind, count in counts.items():
        if kind == "store" or not count:
            continue
        words = _WORDS.get(kind, kind.replace("_", " "))
        plural = words[:-1] + "ies" if words.endswith("y") else words + "s"
        shown.append(f"{count} {words if count == 1 else plural}")
    return ", ".join(shown) or "nothing but its definition"


def export_store(args: argparse.Namespace) -> int:
    output = Path(args.output) if args.output else None
    out = output.open("wb") if output is not None else sys.stdout.buffer
    progress, check = Transfer("exported"), ArchiveCheck()
    try:
        with client_for(args) as client:
            for chunk in client.memory_stores.export(args.store, scope=args.scope):
                out.write(chunk)
                check.feed(chunk)
                progress.update(check.size, check.lines)
        progress.done()
        manifest = check.finish()
        out.flush()
    except BaseException:
        progress.done()
        if output is not None:
            out.close()
            output.unlink(missing_ok=True)  # no partial archive is left behind
        raise
    if output is not None:
        out.close()
    where = f" to {output}" if output is not None else ""
    print(
        f"exported {args.store}{where}: {_counted(manifest.get('counts') or {})} "
        f"({check.lines + 1} lines, {check.size / MIB:.1f} MiB, sha256 {str(manifest.get('sha256'))[:16]}…)",
        file=sys.stderr,
    )
    return 0


def _archived_store(data: bytes) -> str:
    """The store an archive was exported from (its header's `memory_store`)."""
    try:
        header = json.loads(data.split(b"\n", 1)[0])
    except ValueError:
        header = None
    name = header.get("memory_store") if isinstance(header, dict) and header.get("kind") == "header" else None
    if not isinstance(name, str):
        raise CatalogError(
            0, "USAGE", "the file does not start with an archive's header: name the store with --into"
        )
    return name


def import_store(args: argparse.Namespace) -> int:
    data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    target = args.into or _archived_store(data)
    progress = Transfer("sent", len(data))

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(data), MIB):
            yield data[start : start + MIB]
            progress.update(min(start + MIB, len(data)))
        progress.note(f"importing into {target}")

    try:
        with client_for(args) as client:
            result = client.memory_stores.import_archive(target, chunks() if progress.live else data)
    finally:
        progress.done()
    if wants_json(args):
        print_raw(json.dumps(result))
        return 0
    how = "a new store" if result.get("created") else "an empty store"
    line = (
        f"imported {result.get('source')} into {result.get('memory_store')} ({how}): "
        f"{_counted(result.get('counts') or {})}"
    )
    if result.get("reembedded"):
        line += f"; {result['reembedded']} to embed anew (another model made their vectors)"
    if result.get("conversations_renamed"):
        line += f"; {result['conversations_renamed']} conversations given a new id (theirs is taken here)"
    print(line)
    return 0
