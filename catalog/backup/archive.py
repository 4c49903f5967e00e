"""An archive of one store as this server reads it (`read`: checked whole before anything is
written: its version, its manifest, each line's kind and fields, their order), and the errors it
answers (`ArchiveError`: 400 naming what is wrong). The lines themselves are `catalog.backup.schemas`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from catalog.backup.schemas import (
    FORMAT,
    ORDER,
    VERSION,
    AnyLine,
    Header,
    Line,
    Manifest,
    Store,
)
from catalog.context import Context
from catalog.errors import InvalidParameter

KINDS = ORDER[1:-1]  # what the manifest counts
L = TypeVar("L", bound=Line)


class ArchiveError(InvalidParameter):
    """The archive cannot be imported: 400 naming what is wrong (the field is `archive`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "archive")


def model_id(ctx: Context) -> str:
    """The id of the embedding model this server's vectors are made by."""
    assert ctx.search is not None, "backup needs the search engine (its embedding model)"
    return ctx.search.embedder.model_id


# --- reading an archive ---------------------------------------------------------------------------


@dataclass
class Archive:
    header: Header
    store: Store
    manifest: Manifest
    lines: dict[str, list[tuple[int, Line]]] = field(default_factory=dict)  # by kind: (line number, line)

    def of(self, kind: str, type_: type[L]) -> list[tuple[int, L]]:
        return [(n, line) for n, line in self.lines.get(kind, []) if isinstance(line, type_)]


def _json(data: bytes) -> Any:
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        return None


def read(body: bytes) -> Archive:
    """The archive, checked whole before anything is written (ArchiveError otherwise): its
    version, its manifest (every line there, none altered), each line's kind and fields, and the
    order of the kinds."""
    if not body.strip():
        raise ArchiveError("the archive is empty")
    raw = body.split(b"\n")
    if raw[-1] == b"":
        raw.pop()  # the newline that ends the last line
    first = _json(raw[0])
    is_header = isinstance(first, dict) and first.get("kind") == "header" and first.get("format") == FORMAT
    if is_header and first.get("version") != VERSION:
        raise ArchiveError(
            f"archive version {first.get('version')!r} is not supported: this server reads version "
            f"{VERSION} of {FORMAT}"
        )
    last = _json(raw[-1]) if len(raw) > 1 else None
    if not (isinstance(last, dict) and last.get("kind") == "manifest"):
        raise ArchiveError(
            f"the archive is truncated or corrupt: its last line (line {len(raw)}) is not the manifest "
            "that ends every archive"
        )
    try:
        manifest = msgspec.convert(last, Manifest)
    except msgspec.ValidationError as exc:
        raise ArchiveError(f"the archive's manifest (line {len(raw)}) is corrupt: {exc}") from None
    held = len(raw) - 1
    if manifest.lines != held:
        raise ArchiveError(
            f"the archive is truncated or corrupt: its manifest counts {manifest.lines} lines before "
            f"it, the archive holds {held}"
        )
    digest = hashlib.sha256()
    for data in raw[:-1]:
        digest.update(data)
        digest.update(b"\n")
    if digest.hexdigest() != manifest.sha256:
        raise ArchiveError(
            f"the archive is corrupt: the sha256 of lines 1-{held} is {digest.hexdigest()}, its "
            f"manifest (line {len(raw)}) says {manifest.sha256}"
        )
    if not is_header:
        raise ArchiveError(f"line 1 is not the header of a {FORMAT} archive")
    decoder = msgspec.json.Decoder(AnyLine)
    found: dict[str, list[tuple[int, Line]]] = {}
    rank = 0
    for number, data in enumerate(raw[:-1], start=1):
        try:
            line = decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ArchiveError(f"line {number}: {exc}") from None
        kind = type(line).__struct_config__.tag
        assert isinstance(kind, str)
        at = ORDER.index(kind)
        if number == 2 and kind != "store":
            raise ArchiveError(f"line 2: a {kind} line where the store's definition (a store line) belongs")
        if number > 2 and kind in ("header", "store", "manifest"):
            raise ArchiveError(f"line {number}: a second {kind} line (an archive holds only one)")
        if at < rank:
            raise ArchiveError(
                f"line {number}: a {kind} line after a {ORDER[rank]} line (an archive holds its kinds in "
                f"the order {', '.join(ORDER)})"
            )
        rank = at
        found.setdefault(kind, []).append((number, line))
    if "store" not in found:
        raise ArchiveError("the archive has no store line (the store's definition, line 2)")
    counts = {kind: len(found.get(kind, [])) for kind in KINDS}
    claimed = {kind: manifest.counts.get(kind, 0) for kind in KINDS}
    if counts != claimed or set(manifest.counts) - set(KINDS):
        wrong = sorted(
            k for k in set(counts) | set(manifest.counts) if counts.get(k) != manifest.counts.get(k, 0)
        )
        kind = wrong[0]
        raise ArchiveError(
            f"the archive is corrupt: its manifest counts {manifest.counts.get(kind, 0)} {kind} lines, "
            f"the archive holds {counts.get(kind, 0)}"
        )
    header, store = found["header"][0][1], found["store"][0][1]
    assert isinstance(header, Header) and isinstance(store, Store)
    return Archive(header, store, manifest, found)
