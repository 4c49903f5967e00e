"""One full-text index slot shared by several processes on one machine (the workers of
`catalog serve --workers N`): one writes it, the others read what it commits, and every search
still holds every write committed before it (read-your-writes), as in one process.

Rules:
- the writer is the process holding the slot's Tantivy writer lock (`fulltext.writer_held`); it
  tails the change log as every indexer does (`catalog.search.indexer`), and answers its readers
  on a datagram socket named after the slot's directory (`address`: Linux's abstract namespace,
  so nothing is left on disk by a process that dies, and no path is too long);
- a reader that must hold everything committed before now (a search) sends the writer `wake`
  and waits for `done <started> <commit> <watermark>` (a reader that committed a write sends
  `poke`, answered alike; the writer lets a poke's write gather with others for one commit, as
  its own, `Indexer.commit_interval`, and serves a wake at once): the writer ran a pass that
  *started* at `started` (CLOCK_MONOTONIC, one clock for every process of the machine), so a
  pass started after the reader asked has applied every change committed before it asked, the
  rule of one process's `Indexer.wait_fresh` (every reader that asked hears of each pass: one
  whose search knows its request's head is answered by a pass in progress whose `watermark`
  reaches it). `commit` names the writer's last commit: the reader reloads its searcher when it
  changed, before the search goes on; `watermark` is the change-log row up to which that commit
  holds everything, so a search that knows the log's head from its request (at or below the
  watermark its searcher holds) need not ask at all (`holds`);
- a writer that is failing (a full disk) answers `fail <reason>` at once, and the reader searches
  what the index holds and says so (`degraded`), as one process does;
- nothing answers when no writer lives (it died; the kernel let go of its lock): the reader
  searches what it holds (`degraded`) and tries to take the writer lock itself; the one that gets
  it becomes the writer (`Indexer`), catching up from the watermark file like any start;
- messages are small and lost only when a reader's queue is full or the reader is gone: a
  reader that hears nothing stops waiting at its bound (`SEARCH_WAIT`) like a search whose index is
  behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("catalog.search")

WAKE = b"wake"
POKE = b"poke"
DONE = b"done"
FAIL = b"fail"


def address(directory: Path) -> bytes:
    """The abstract socket name of a slot's writer: one per directory on this machine."""
    digest = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:32]
    return b"\0catalog-index-" + digest.encode()


def _socket() -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.setblocking(False)
    return sock


class Announcer:
    """The writer's side: takes `wake` and `poke` from readers and tells each of them when a pass
    that started after it asked is done (or that the index is failing)."""

    def __init__(
        self,
        directory: Path,
        wake: Callable[[], None],
        failing: Callable[[], str | None],
        poke: Callable[[], None],
    ) -> None:
        self.directory = directory
        self.wake = wake  # start a pass now: a search waits for it
        self.poke = poke  # start a pass soon: a write committed
        self.failing = failing  # why the index is failing now, None while it is healthy
        self.sock: socket.socket | None = None
        self.asked: dict[bytes, float] = {}  # reader → when it last asked (monotonic)

    @property
    def open(self) -> bool:
        return self.sock is not None

    def listen(self) -> bool:
        """Bind the slot's name; False while another process still holds it (a writer that is
        stopping: try again later)."""
        if self.sock is not None:
            return True
        sock = _socket()
        try:
            sock.bind(address(self.directory))
        except OSError:
            sock.close()
            return False
        self.sock = sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self._readable)
        return True

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None
        self.asked.clear()

    def _readable(self) -> None:
        assert self.sock is not None
        now = time.monotonic()
        reason = self.failing()
        while True:
            try:
                message, reader = self.sock.recvfrom(64)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            if not reader or not message.startswith((WAKE, POKE)):
                continue
            if reason is not None:
                self._send(reader, FAIL + b" " + reason.encode(errors="replace")[:200])
                continue
            self.asked[reader] = now
            if message.startswith(WAKE):
                self.wake()
            else:
                self.poke()

    def done(self, started: float, commit: str, watermark: int = 0) -> None:
        """A pass that began at `started` is committed: every reader that asked learns of it (it
        decides whether the pass is late enough for it); those that asked before it began are
        answered and forgotten, the others wait for the next pass (a wake is pending)."""
        if not self.asked:
            return
        message = b"%s %.9f %s %d" % (DONE, started, commit.encode(), watermark)
        for reader, asked in list(self.asked.items()):
            self._send(reader, message)
            if asked < started:
                del self.asked[reader]

    def failed(self, reason: str) -> None:
        """The pass failed: every reader waiting searches what the index holds."""
        message = FAIL + b" " + reason.encode(errors="replace")[:200]
        for reader in list(self.asked):
            self._send(reader, message)
        self.asked.clear()

    def _send(self, reader: bytes, message: bytes) -> None:
        if self.sock is None:
            return
        try:
            self.sock.sendto(message, reader)
        except OSError:  # the reader is gone, or its queue is full: it stops waiting at its bound
            self.asked.pop(reader, None)


class NoWriter(RuntimeError):
    """No process writes the slot (its writer died or is stopping)."""


class Follower:
    """A reader's side: asks the slot's writer for a pass and waits for it; reloads the index
    (`reload`) when the writer has committed since the last time."""

    def __init__(self, directory: Path, reload: Callable[[], None]) -> None:
        self.writer = address(directory)
        self.reload = reload
        self.sock: socket.socket | None = None
        self.commit: str | None = None  # the writer's commit this process's searcher holds
        self.watermark = 0  # every change-log row up to here is in what this searcher holds
        self.failing: str | None = None  # the writer's last word when it answered `fail`
        # searches waiting: when each asked, the log's head it needs held (if it knows it), its future
        self._waiting: list[tuple[float, int | None, asyncio.Future[bool]]] = []

    def open(self) -> None:
        sock = _socket()
        sock.bind(b"")  # an address of its own, in the abstract namespace (Linux autobind)
        self.sock = sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self._readable)

    def close(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None
        self.give_up(False)

    def give_up(self, fresh: bool) -> None:
        """Answer every search waiting (`fresh`: whether the index now holds their writes)."""
        waiting, self._waiting = self._waiting, []
        for _, _, future in waiting:
            if not future.done():
                future.set_result(fresh)

    def holds(self, head: int) -> bool:
        """Whether this process's searcher already holds every change-log row up to `head`
        (while the writer last answered that it is well)."""
        return self.failing is None and self.commit is not None and self.watermark >= head

    def poke(self) -> None:
        """Ask for a pass soon without waiting for it (a local write committed)."""
        assert self.sock is not None
        with contextlib.suppress(OSError):
            self.sock.sendto(POKE, self.writer)

    async def wait_fresh(self, timeout: float, head: int | None = None) -> bool:  # noqa: ASYNC109
        """True once a pass of the writer that started after this call is committed and this
        process's searcher holds it (or, with `head`, once the searcher holds every change-log
        row up to it: the writer's pass in progress may suffice); False at once when the writer
        is failing. `NoWriter` when nothing writes the slot; TimeoutError after `timeout`."""
        asked = time.monotonic()
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append((asked, head, future))
        try:
            async with asyncio.timeout(timeout):
                while True:
                    try:
                        self._ask()
                        break
                    except BlockingIOError:  # the writer's queue is full: it is busy, ask again
                        await asyncio.sleep(0.001)
                    except OSError as exc:  # nothing bound to the writer's name: no writer lives
                        raise NoWriter(str(exc)) from None
                return await future
        finally:
            self._forget(future)

    def _ask(self) -> None:
        assert self.sock is not None
        self.sock.sendto(WAKE, self.writer)

    def _forget(self, future: asyncio.Future[bool]) -> None:
        self._waiting = [waiting for waiting in self._waiting if waiting[2] is not future]

    def _readable(self) -> None:
        assert self.sock is not None
        while True:
            try:
                message = self.sock.recv(512)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if message.startswith(DONE):
                _, started_text, commit_text, watermark_text = message.decode(errors="replace").split(" ", 3)
                self._done(float(started_text), commit_text, int(watermark_text))
            elif message.startswith(FAIL):
                self.failing = message[len(FAIL) + 1 :].decode(errors="replace") or "failing"
                self.give_up(False)

    def _done(self, started: float, commit: str, watermark: int) -> None:
        self.failing = None
        if commit != self.commit:
            try:
                self.reload()
            except Exception as exc:  # files of a commit being replaced: the next answer reloads
                log.warning("full-text index: reloading what the writer committed failed: %s", exc)
                return
            self.commit = commit
        # the same commit holds more once the writer's watermark passed rows it had no work for
        self.watermark = watermark
        ready: list[tuple[float, int | None, asyncio.Future[bool]]] = []
        still: list[tuple[float, int | None, asyncio.Future[bool]]] = []
        for waiting in self._waiting:
            asked, head, _ = waiting
            held = asked < started or (head is not None and watermark >= head)
            (ready if held else still).append(waiting)
        self._waiting = still
        for _, _, future in ready:
            if not future.done():
                future.set_result(True)
