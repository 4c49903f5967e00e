"""A server for benchmarks: `catalog serve` on a fresh data dir with the embedded PostgreSQL, or
an already running one (--url with --token)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


# a span an OTLP export held: (trace id, name, start ns, end ns, parent span id)
Span = tuple[str, str, int, int, str]


@contextmanager
def span_receiver(spans: list[Span] | None = None) -> Iterator[str]:
    """An OTLP/HTTP trace endpoint that reads every export and answers 200 with an empty body (an
    empty ExportTraceServiceResponse), appending each span to `spans` when given (else the spans
    are discarded); yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a collector would

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if spans is not None:
                spans.extend(_spans_of(body))
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _spans_of(body: bytes) -> list[Span]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    return [
        (
            span.trace_id.hex(),
            span.name,
            span.start_time_unix_nano,
            span.end_time_unix_nano,
            span.parent_span_id.hex(),
        )
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class BenchServer:
    def __init__(
        self,
        data_dir: Path | None = None,
        env: dict[str, str] | None = None,
        argv: list[str] | None = None,
        repo: Path | None = None,
    ) -> None:
        """`argv`: what to run instead of `-m catalog serve` (it is given `--port`); `repo`: the
        checkout whose `catalog` package to run (this one by default: another checkout's, to
        compare two versions)."""
        self.repo = repo or REPO
        self.temporary = data_dir is None  # a data dir of its own, removed by stop()
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="catbench"))
        self.data_dir.mkdir(parents=True, exist_ok=True)  # a --data-dir named for a first run
        self.port = free_port()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
        # one process unless the benchmark asks for workers (CATALOG_WORKERS)
        self.env.update({"CATALOG_DATA_DIR": str(self.data_dir), "CATALOG_WORKERS": "1", **(env or {})})
        self.log = (self.data_dir / "server.log").open("a")
        self.process = subprocess.Popen(
            [sys.executable, *(argv or ["-m", "catalog", "serve"]), "--port", str(self.port)],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            cwd=self.repo,
        )
        assert self.process.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if line.startswith("listening on"):
                break
            if self.process.poll() is not None:
                raise RuntimeError((self.data_dir / "server.log").read_text()[-2000:])
        self.url = f"http://127.0.0.1:{self.port}"

    def token(self, sub: str = "admin") -> str:
        out = subprocess.run(
            [sys.executable, "-m", "catalog", "token", "--sub", sub, "--ttl", "86400"],
            env=self.env,
            capture_output=True,
            text=True,
            cwd=self.repo,
            check=True,
        )
        return out.stdout.strip()

    def db_url(self) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "catalog", "db-url"],
            env=self.env,
            capture_output=True,
            text=True,
            cwd=self.repo,
            check=True,
        )
        return out.stdout.strip()

    def stop(self, keep: bool = False) -> None:
        """Stop the server; the data dir it made for itself (no `data_dir` given) goes too, unless
        `keep` (the caller removes it: `remove()`)."""
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()
        if not keep:
            self.remove()

    def remove(self) -> None:
        """Remove the data dir, if the server made it (a benchmark's given one stays)."""
        if self.temporary:
            shutil.rmtree(self.data_dir, ignore_errors=True)
