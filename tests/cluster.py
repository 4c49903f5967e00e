"""A cluster of real processes for the tests: N `catalog serve` nodes behind HAProxy, on a
PostgreSQL primary and its synchronous standby that Patroni manages, verifying the tokens of an
external issuer. Nothing is mocked: each piece is the program an operator runs.

    with Cluster(nodes=3) as cluster:
        token = cluster.issuer.token("admin")
        httpx.get(cluster.url + "/healthz")  # through HAProxy
        httpx.get(cluster.nodes[0].url + "/healthz")  # one node, directly
        cluster.nodes[1].kill()  # kill -9
        cluster.leader().kill()  # PostgreSQL crashes: Patroni fails over by itself
        cluster.wait_synchronous()  # the pair whole again: the old primary is the new standby

The pieces:
- `Etcd`: Debian's `etcd-server`, one member, where Patroni keeps the leader key;
- `Member` (`pg1`, `pg2`): Patroni (a dev dependency) running PostgreSQL from the binaries the
  embedded server ships (catalog.db.embedded.bin_dir: PostgreSQL 18 with pgvector), on a TCP port
  of 127.0.0.1 and no Unix socket, with its REST API on another port. The first to start takes
  the leader key and runs `initdb`; the other is made by `pg_basebackup` and streams from it.
  Patroni's synchronous mode names the standby in `synchronous_standby_names` (with
  `synchronous_commit = on`): a commit is acknowledged once the standby has flushed it, so a write
  a node acknowledged survives the primary's loss, and only that standby may be promoted. A
  primary whose PostgreSQL crashes gives the leader key up at once (`primary_start_timeout: 0`);
  one whose Patroni dies too keeps it until its TTL (`PATRONI_TTL`) runs out. `Cluster(strict=
  True)` keeps the primary waiting for a standby even when none streams. When the tests run as
  root, Patroni and PostgreSQL (which refuses root) run as the embedded server's system user;
- `HAProxy`: Debian's `haproxy` in the foreground, with two parts. For the nodes: round robin
  with an HTTP health check on `/healthz` (`HAPROXY_CHECK`), a fresh server connection per request
  (`option http-server-close`) and redispatch of a request whose connection failed. For
  PostgreSQL (TCP): the member whose Patroni answers 200 to `OPTIONS /primary`, the leader alone,
  with the connections to a member marked down cut at once. An admin socket gives the servers'
  states;
- `Node`: `catalog serve` in a subprocess, with a data dir of its own (its search index) and the
  database reached through HAProxy's PostgreSQL port: after a failover it connects to the new
  primary without a restart;
- `Issuer`: an Ed25519 key pair; the nodes get the public key (`CATALOG_JWT_PUBLIC_KEY`), the
  tests sign tokens with the private key.

Every process is started on a port found free and stopped (or killed) at the end, whatever
happened; `Cluster.close()` then checks that each node exited 0 on SIGTERM and that no port is
still bound, and removes the temporary directory (in the background; kept when CATALOG_TEST_KEEP
is set, for reading the logs). `add_node()` and `remove_node()` scale the running cluster out and
in, through HAProxy's runtime API.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any, Self

import httpx
import jwt
import psutil
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from catalog.db.embedded import bin_dir, system_user

REPO = Path(__file__).resolve().parents[1]
DATABASE = "catalog"
ISSUER = "https://issuer.cluster.test"
AUDIENCE = "memory-catalog-cluster"
STANDBY_NAME = "standby"  # the standby's application_name, which the primary waits for
DRAIN_SECONDS = 5.0  # the nodes' CATALOG_DRAIN_SECONDS (the default): longer than HAProxy needs to see a 503
# Patroni: the leader key lives PATRONI_TTL seconds (20 is Patroni's least) unless renewed; each
# member looks at the cluster every PATRONI_LOOP_WAIT seconds
PATRONI_TTL = 20
PATRONI_LOOP_WAIT = 1
PATRONI_RETRY_TIMEOUT = 5
# HAProxy checks every 500 ms; 2 failures take a server out, 2 successes bring it back
HAPROXY_CHECK = "inter 500ms fastinter 250ms downinter 500ms fall 2 rise 2"


def haproxy_binary() -> str | None:
    return shutil.which("haproxy") or next(
        (p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy") if os.access(p, os.X_OK)), None
    )


def etcd_binary() -> str | None:
    return shutil.which("etcd") or next(
        (p for p in ("/usr/bin/etcd", "/usr/local/bin/etcd") if os.access(p, os.X_OK)), None
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def wait_until(condition: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll `condition()` until it returns something true; its value, or AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def _kill_tree(pid: int) -> None:
    """SIGKILL a process and every descendant of it, at once (a host that dies)."""
    try:
        parent = psutil.Process(pid)
        victims = [parent, *parent.children(recursive=True)]
    except psutil.Error:
        return
    for victim in victims:
        with contextlib.suppress(psutil.Error):
            victim.kill()
    psutil.wait_procs(victims, timeout=10)


class _LogPump:
    """Copies a child's output (a pipe) into its log file, line by line, from a thread: the child
    never writes a file itself (a test may limit the size of the files it writes), and a test can
    wait for a line."""

    def __init__(self, stream: IO[str], path: Path) -> None:
        self.path = path
        self._stream = stream
        self._out = path.open("a")
        self._lines: list[str] = []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"log-{path.name}")
        self._thread.start()

    def _run(self) -> None:
        for line in self._stream:
            self._out.write(line)
            self._out.flush()
            with self._cond:
                self._lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._lines.append("")  # end of output
            self._cond.notify_all()

    def wait_for(self, prefix: str, timeout: float) -> str | None:
        """The first line starting with `prefix`, or None at the end of output or the deadline."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self._lines[seen:]:
                    if line == "":
                        return None
                    if line.startswith(prefix):
                        return line.strip()
                seen = len(self._lines)
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)

    def close(self) -> None:
        self._thread.join(10)
        self._out.close()


class Issuer:
    """An external token issuer: its public key is all the nodes know of it."""

    def __init__(self) -> None:
        self._key = Ed25519PrivateKey.generate()
        self.public_pem = (
            self._key.public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )

    def token(self, sub: str, *, ttl: int = 3600, **claims: Any) -> str:
        now = int(time.time())
        body = {"sub": sub, "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + ttl, **claims}
        return jwt.encode(body, self._key, algorithm="EdDSA", headers={"kid": "cluster-test"})

    def headers(self, sub: str = "admin", **claims: Any) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(sub, **claims)}"}


class Etcd:
    """A one-member etcd (Debian's `etcd-server`): the store Patroni keeps the leader key in. It
    runs beside the database servers, so losing either of them leaves it up."""

    def __init__(self, root: Path) -> None:
        binary = etcd_binary()
        assert binary is not None, "etcd is not installed"
        self.port, peer = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "etcd.log"
        self._log = self.log_path.open("a")
        self.process = subprocess.Popen(
            [
                binary, "--name", "etcd0", "--data-dir", str(root / "etcd"),
                "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"etcd0=http://127.0.0.1:{peer}", "--initial-cluster-state", "new",
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.ports = [self.port, peer]

        def healthy() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(f"{self.url}/health", timeout=2).json().get("health") == "true"
            return False

        wait_until(healthy, 60, "etcd to answer", 0.2)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()


def _patroni_command() -> tuple[list[str], dict[str, str]]:
    """How to run Patroni (a dev dependency) as PostgreSQL's user: this interpreter, or, where that
    user cannot run it (a virtual environment over an interpreter in root's home), the system's
    Python of the same version with this environment's packages, and only those, on its path."""
    user = system_user()
    if user is None:
        return [sys.executable, "-m", "patroni"], {}
    try:
        runs = subprocess.run([sys.executable, "-c", "pass"], user=user, capture_output=True).returncode == 0
    except PermissionError:
        runs = False
    if runs:
        return [sys.executable, "-m", "patroni"], {}
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = shutil.which(version, path="/usr/bin:/usr/local/bin")
    assert system is not None, (
        f"PostgreSQL's user {user} cannot run {sys.executable}, and there is no {version}"
    )
    site = next(p for p in sys.path if p.endswith("site-packages"))
    # -S: none of the system's own packages (Debian's dist-packages), only this environment's
    return [system, "-S", "-m", "patroni"], {"PYTHONPATH": site}


class Member:
    """One PostgreSQL server of the pair, run by its own Patroni (`pg1`, `pg2`), which makes it
    (`initdb` for the first to take the leader key, `pg_basebackup` from the leader for the other),
    starts it, keeps it the leader or a replica of the leader, and answers its role on a REST port
    (`/primary` is 200 on the leader only). `kill()` kills PostgreSQL (and its Patroni with
    `host=True`: the whole machine lost); `start()` starts Patroni again."""

    def __init__(self, root: Path, name: str, etcd: Etcd, scope: str, *, strict: bool = False) -> None:
        self.name = name
        self.dir = root / name
        self.dir.mkdir(mode=0o700)
        self.pgdata = self.dir / "data"
        self.port = free_port()
        self.api_port = free_port()
        self.api = f"http://127.0.0.1:{self.api_port}"
        self.log_path = root / f"{name}.log"
        self.user = system_user()
        if self.user is not None:
            shutil.chown(self.dir, self.user, self.user)
        self.config_path = self.dir / "patroni.yml"
        # YAML is a superset of JSON: the configuration is written as JSON
        self.config_path.write_text(json.dumps(self.config(etcd, scope, strict), indent=2))
        if self.user is not None:
            shutil.chown(self.config_path, self.user, self.user)
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[str] | None = None

    def config(self, etcd: Etcd, scope: str, strict: bool) -> dict[str, Any]:
        local = f"127.0.0.1:{self.port}"
        return {
            "scope": scope,
            "name": self.name,
            "log": {"level": "INFO"},
            "restapi": {
                "listen": f"127.0.0.1:{self.api_port}",
                "connect_address": f"127.0.0.1:{self.api_port}",
            },
            "etcd3": {"hosts": [f"127.0.0.1:{etcd.port}"]},
            "bootstrap": {
                "dcs": {
                    "ttl": PATRONI_TTL,
                    "loop_wait": PATRONI_LOOP_WAIT,
                    "retry_timeout": PATRONI_RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 1048576,
                    "primary_start_timeout": 0,  # a crashed primary fails over at once
                    "synchronous_mode": True,
                    "synchronous_mode_strict": strict,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "wal_level": "replica",
                            "hot_standby": "on",
                            "max_wal_senders": 4,
                            "max_replication_slots": 4,
                            "wal_keep_size": "128MB",
                            "max_connections": 150,
                            "synchronous_commit": "on",
                            "fsync": "on",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}],
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 trust",
                    "host replication all 127.0.0.1/32 trust",
                ],
            },
            "postgresql": {
                "listen": local,
                "connect_address": local,
                "data_dir": str(self.pgdata),
                "bin_dir": str(bin_dir()),
                "pgpass": str(self.dir / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres"},
                    "replication": {"username": "postgres"},
                    "rewind": {"username": "postgres"},
                },
                "parameters": {"unix_socket_directories": "", "shared_buffers": "32MB"},
            },
        }

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None, f"{self.name}'s Patroni runs"
        command, extra = _patroni_command()
        self._log = self.log_path.open("a")
        self.process = subprocess.Popen(
            [*command, str(self.config_path)],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            user=self.user,
            cwd=self.dir,
            env={**os.environ, **extra},
        )

    def status(self) -> dict[str, Any]:
        """Patroni's view of this member (`role`: primary or replica, `state`: running, ...), or {}
        when its REST API does not answer."""
        with contextlib.suppress(httpx.HTTPError, ValueError):
            return dict(httpx.get(f"{self.api}/patroni", timeout=2).json())
        return {}

    def is_leader(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.api}/primary", timeout=2).status_code == 200
        return False

    def is_sync_standby(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"{self.api}/sync", timeout=2).status_code == 200
        return False

    def postmaster_pid(self) -> int | None:
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None
        return pid if psutil.pid_exists(pid) else None

    def kill(self, *, host: bool = False) -> None:
        """kill -9 of the postmaster and every backend at once (PostgreSQL crashed); with `host`,
        of its Patroni first (the machine lost)."""
        if host and self.process is not None:
            _kill_tree(self.process.pid)
            self.process.wait(10)
        pid = self.postmaster_pid()
        if pid is not None:
            _kill_tree(pid)

    def stop(self) -> None:
        """Patroni stops PostgreSQL (fast) on SIGTERM, then exits."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                _kill_tree(self.process.pid)
        pid = self.postmaster_pid()
        if pid is not None:  # (its Patroni was killed before)
            _kill_tree(pid)
        if self._log is not None:
            self._log.close()
            self._log = None

    def sql(self, query: str, database: str = "postgres") -> str:
        result = subprocess.run(
            [str(bin_dir() / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
             "-d", database, "-AtX", "-v", "ON_ERROR_STOP=1", "-c", query],
            capture_output=True,
            text=True,
            timeout=30,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"{self.name}: {query}: {result.stderr}")
        return result.stdout.strip()


class Node:
    """`catalog serve` on a port of its own; `start()` again after `stop()` or `kill()` keeps the
    port, the data dir (its index) and the settings."""

    def __init__(self, root: Path, name: str, env: dict[str, str]) -> None:
        self.name = name
        self.data_dir = root / name
        self.data_dir.mkdir()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / f"{name}.log"
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
        # one process a node (its workers are tests/test_workers.py's)
        self.env = {**inherited, "CATALOG_DATA_DIR": str(self.data_dir), "CATALOG_WORKERS": "1", **env}
        self.process: subprocess.Popen[str] | None = None
        self.signalled = False  # sent SIGTERM: it is stopping
        self._pump: _LogPump | None = None

    def spawn(self) -> None:
        """Start the process; `wait_started()` waits for it to listen."""
        assert self.process is None, f"{self.name} runs already"
        wait_until(lambda: port_free(self.port), 30, f"port {self.port} of {self.name} to be free")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "catalog", "serve", "--port", str(self.port)],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
        )
        assert self.process.stdout is not None
        self._pump = _LogPump(self.process.stdout, self.log_path)

    def wait_started(self, timeout: float = 120) -> None:
        assert self._pump is not None
        if self._pump.wait_for("listening on", timeout) is None:
            self.kill()
            raise RuntimeError(f"{self.name} did not start:\n{self.problems()}")

    def start(self) -> None:
        self.spawn()
        self.wait_started()

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def terminate(self) -> None:
        """SIGTERM; `wait()` for the exit."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        self.signalled = True

    def wait(self, timeout: float = 60) -> int:
        assert self.process is not None
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            # what it was doing is in the end of its log (killed below; the log is removed after)
            tail = self.log_path.read_text().splitlines()[-40:] if self.log_path.exists() else []
            raise AssertionError(
                f"{self.name} did not exit within {timeout:g} s; the end of its log:\n" + "\n".join(tail)
            ) from None
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait(10)
            self._reap()
        return code

    def stop(self, timeout: float = 60) -> int | None:
        """SIGTERM and wait for the exit (killed after `timeout`); its exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.terminate()
        return self.wait(timeout)

    def kill(self) -> None:
        """kill -9."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)
        self._reap()

    def _reap(self) -> None:
        if self._pump is not None:
            self._pump.close()
            self._pump = None
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None
        self.signalled = False

    def limit_file_size(self, limit: int | None) -> None:
        """RLIMIT_FSIZE of the running process: files it writes cannot grow past `limit` bytes (a
        write past it fails with EFBIG, as on a full disk; Python ignores SIGXFSZ); None lifts it."""
        _, hard = resource.prlimit(self.pid, resource.RLIMIT_FSIZE)
        soft = hard if limit is None else limit  # the soft limit only: lifting it needs no privilege
        resource.prlimit(self.pid, resource.RLIMIT_FSIZE, (soft, hard))

    def health(self) -> httpx.Response:
        return httpx.get(f"{self.url}/healthz", timeout=10)

    def health_or_none(self) -> httpx.Response | None:
        """`/healthz`, or None when the node does not answer (not listening)."""
        try:
            return self.health()
        except httpx.TransportError:
            return None

    def problems(self) -> str:
        """The warnings and errors the node logged (JSON lines), each with the end of its trace."""
        lines = []
        if not self.log_path.exists():
            return ""
        for line in self.log_path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                lines.append(line[:500])
                continue
            if record.get("level") in ("warning", "error", "critical"):
                lines.append(f"{record.get('logger')}: {record.get('message')} {record.get('reason', '')}")
                if record.get("exception"):
                    lines.append(record["exception"][-2500:])
        return "\n".join(lines)[-8000:]

    def log_records(self) -> list[dict[str, Any]]:
        records = []
        for line in self.log_path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                records.append(json.loads(line))
        return records


class HAProxy:
    """HAProxy in the foreground in front of the nodes; `states()` reads the servers' states from
    its admin socket."""

    def __init__(self, root: Path, nodes: list[Node], members: list[Member], pg_port: int) -> None:
        binary = haproxy_binary()
        assert binary is not None, "haproxy is not installed"
        self.port = free_port()
        self.pg_port = pg_port
        self.url = f"http://127.0.0.1:{self.port}"
        self.socket_path = root / "haproxy.sock"
        self.config_path = root / "haproxy.cfg"
        self.log_path = root / "haproxy.log"
        self.config_path.write_text(self.config(nodes, members))
        check = subprocess.run([binary, "-c", "-f", str(self.config_path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        self._log = self.log_path.open("a")
        self.process = subprocess.Popen(
            [binary, "-db", "-f", str(self.config_path)],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self.socket_path.exists, 30, "HAProxy's admin socket")

    def config(self, nodes: list[Node], members: list[Member]) -> str:
        servers = "\n".join(f"    server {n.name} 127.0.0.1:{n.port} check" for n in nodes)
        databases = "\n".join(
            f"    server {m.name} 127.0.0.1:{m.port} check port {m.api_port}" for m in members
        )
        return f"""\
global
    maxconn 1000
    stats socket {self.socket_path} mode 600 level admin
    log stdout format raw local0 info

defaults
    mode http
    log global
    option httplog
    option http-server-close    # a new connection to a node per request: none is reused as it stops
    option redispatch 1         # a request whose connection failed is retried on another node
    retries 3
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout check 2s

frontend catalog
    bind 127.0.0.1:{self.port}
    default_backend nodes

backend nodes
    balance roundrobin
    option httpchk GET /healthz
    http-check expect status 200
    default-server {HAPROXY_CHECK}
{servers}

# PostgreSQL: the leader only, as Patroni's REST API tells (`/primary` is 200 on the leader alone);
# a server marked down has its connections cut, so that no node keeps writing to a demoted server
listen postgres
    mode tcp
    bind 127.0.0.1:{self.pg_port}
    option tcplog
    timeout client 30m
    timeout server 30m
    option httpchk OPTIONS /primary
    http-check expect status 200
    default-server {HAPROXY_CHECK} on-marked-down shutdown-sessions
{databases}
"""

    def command(self, line: str) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(5)
            sock.connect(str(self.socket_path))
            sock.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def states(self, proxy: str = "nodes") -> dict[str, str]:
        """Each server's state as HAProxy sees it: `UP`, `DOWN`, `UP 1/2`, `DOWN 1/2`, `MAINT`, ...
        (of the nodes, or of the database servers with `proxy="postgres"`)."""
        lines = self.command("show stat").splitlines()
        header = lines[0].lstrip("# ").split(",")
        states = {}
        for line in lines[1:]:
            row = dict(zip(header, line.split(","), strict=False))
            if row.get("pxname") == proxy and row.get("svname") not in ("FRONTEND", "BACKEND"):
                states[row["svname"]] = row["status"]
        return states

    def add_server(self, node: Node) -> None:
        """Add a node to the running HAProxy (the runtime API; `default-server` does not apply to
        a server added so, hence the check settings in full), with its health check, in service."""
        for line in (
            f"add server nodes/{node.name} 127.0.0.1:{node.port} check {HAPROXY_CHECK}",
            f"enable health nodes/{node.name}",
            f"enable server nodes/{node.name}",
        ):
            answer = self.command(line).strip()
            assert answer in ("", "New server registered."), f"{line}: {answer}"

    def remove_server(self, name: str, timeout: float = 30) -> None:
        """Take a server out (maintenance), then delete it once it holds no connection."""
        self.command(f"disable server nodes/{name}")

        def deleted() -> bool:
            return self.command(f"del server nodes/{name}").strip() == "Server deleted."

        wait_until(deleted, timeout, f"HAProxy to delete {name}", 0.1)

    def wait_state(self, name: str, state: str, timeout: float = 30) -> None:
        wait_until(lambda: self.states().get(name) == state, timeout, f"HAProxy to see {name} {state}", 0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGUSR1)  # soft stop: finish what is in flight
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        self._log.close()


class Cluster:
    """The whole topology (see the module's docstring); a context manager that tears down
    everything it started, also when starting fails half way."""

    def __init__(self, nodes: int = 3, *, env: dict[str, str] | None = None, strict: bool = False) -> None:
        missing = [
            name for name, found in (("haproxy", haproxy_binary()), ("etcd", etcd_binary())) if not found
        ]
        if missing:
            raise RuntimeError(
                f"not installed: {', '.join(missing)} (Debian: apt-get install haproxy etcd-server)"
            )
        self.node_count = nodes
        self.extra_env = env or {}
        self.strict = strict
        self.root = Path(tempfile.mkdtemp(prefix="catcluster-"))
        self.root.chmod(0o755)  # PostgreSQL's user (when running as root) must reach its data dir
        self.issuer = Issuer()
        self.etcd: Etcd | None = None
        self.members: list[Member] = []
        self.nodes: list[Node] = []
        self.haproxy: HAProxy | None = None
        self.pg_port = free_port()  # HAProxy's PostgreSQL port: the leader's
        self.ports: list[int] = [self.pg_port]
        self.added = 0  # nodes added after the start

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def database_url(self) -> str:
        """The URL the nodes use: HAProxy's PostgreSQL port, which leads to the leader."""
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}/{DATABASE}"

    @property
    def url(self) -> str:
        assert self.haproxy is not None
        return self.haproxy.url

    def leader(self) -> Member:
        """The member that holds the leader key and runs the primary (waits for one)."""
        return wait_until(lambda: next((m for m in self.members if m.is_leader()), None), 60, "a leader", 0.1)

    def replica(self) -> Member:
        return next(m for m in self.members if m is not self.leader())

    def wait_synchronous(self, timeout: float = 60) -> Member:
        """Until one member leads and the other streams from it as its synchronous standby (Patroni
        names it in `synchronous_standby_names`); the standby."""

        def pair() -> Member | None:
            leader = next((m for m in self.members if m.is_leader()), None)
            standby = next((m for m in self.members if m is not leader and m.is_sync_standby()), None)
            if leader is None or standby is None:
                return None
            query = "SELECT sync_state FROM pg_stat_replication WHERE sync_state = 'sync'"
            with contextlib.suppress(RuntimeError):
                return standby if leader.sql(query) == "sync" else None
            return None

        return wait_until(pair, timeout, "a leader with a synchronous standby", 0.2)

    def node_env(self) -> dict[str, str]:
        return {
            "CATALOG_DATABASE_URL": self.database_url,
            "CATALOG_JWT_PUBLIC_KEY": self.issuer.public_pem,
            "CATALOG_JWT_ISSUER": ISSUER,
            "CATALOG_JWT_AUDIENCE": AUDIENCE,
            "CATALOG_LOG_FORMAT": "json",
            # every connection comes from HAProxy's address
            "CATALOG_MAX_CONNECTIONS_PER_CLIENT": "0",
            "CATALOG_DRAIN_SECONDS": f"{DRAIN_SECONDS:g}",
            **self.extra_env,
        }

    def start(self) -> None:
        self.etcd = Etcd(self.root)
        self.ports.extend(self.etcd.ports)
        scope = f"catalog-{os.urandom(3).hex()}"
        self.members = [
            Member(self.root, f"pg{i + 1}", self.etcd, scope, strict=self.strict) for i in range(2)
        ]
        self.ports.extend(p for m in self.members for p in (m.port, m.api_port))
        self.members[0].start()  # the first takes the leader key and makes the database cluster
        wait_until(self.members[0].is_leader, 120, f"{self.members[0].name} to lead", 0.2)
        self.members[1].start()  # the second is made from it by pg_basebackup
        self.wait_synchronous(120)
        self.leader().sql(f"CREATE DATABASE {DATABASE}")
        env = self.node_env()
        self.nodes = [Node(self.root, f"node{i + 1}", env) for i in range(self.node_count)]
        self.ports.extend(n.port for n in self.nodes)
        self.haproxy = HAProxy(self.root, self.nodes, self.members, self.pg_port)
        self.ports.append(self.haproxy.port)
        self.wait_database()
        # all at once: one migrates and bootstraps the database, the others wait for it
        for node in self.nodes:
            node.spawn()
        for node in self.nodes:
            node.wait_started()
        self.wait_all_up()

    def wait_database(self, timeout: float = 60) -> str:
        """Until HAProxy sends PostgreSQL connections to exactly one member, the leader; its name."""
        assert self.haproxy is not None
        haproxy = self.haproxy

        def routed() -> str | None:
            up = [name for name, state in haproxy.states("postgres").items() if state == "UP"]
            leader = next((m.name for m in self.members if m.is_leader()), None)
            return up[0] if up == [leader] else None

        return str(wait_until(routed, timeout, "HAProxy to route PostgreSQL to the leader alone", 0.1))

    def wait_all_up(self, timeout: float = 60) -> None:
        """Every node runs and HAProxy sends it requests."""
        assert self.haproxy is not None
        haproxy = self.haproxy
        wait_until(
            lambda: all(v == "UP" for v in haproxy.states().values()),
            timeout,
            "HAProxy to see every node UP",
            0.1,
        )

    def add_node(self) -> Node:
        """One more node, started with the same settings and put in HAProxy's rotation."""
        assert self.haproxy is not None
        self.added += 1
        node = Node(self.root, f"node{self.node_count + self.added}", self.node_env())
        self.nodes.append(node)
        self.ports.append(node.port)
        node.start()
        self.haproxy.add_server(node)
        self.haproxy.wait_state(node.name, "UP")
        return node

    def remove_node(self, node: Node) -> int | None:
        """SIGTERM (the node drains: HAProxy takes it out), wait for its exit, then delete it from
        HAProxy; its exit code."""
        assert self.haproxy is not None
        code = node.stop()
        self.haproxy.remove_server(node.name)
        self.nodes.remove(node)
        return code

    def close(self) -> None:
        errors: list[str] = []
        running = [node for node in self.nodes if node.running()]
        # SIGTERM to all at once, and a second one that ends the drain's wait (nothing is in
        # flight at the end), then wait for each
        for second in (False, True):
            if second:
                time.sleep(0.3)
            for node in running:
                with contextlib.suppress(Exception):
                    node.terminate()
        for node in running:
            try:
                code = node.wait()
            except Exception as exc:
                errors.append(f"{node.name}: {type(exc).__name__}: {exc}")
            else:
                if code != 0:
                    errors.append(f"{node.name} exited {code} on SIGTERM")
        steps = [node.kill for node in self.nodes]  # reaps the ones killed or stopped before
        if self.haproxy is not None:
            steps.append(self.haproxy.stop)
        steps.extend(member.stop for member in self.members)
        if self.etcd is not None:
            steps.append(self.etcd.stop)
        for step in steps:
            try:
                step()
            except Exception as exc:  # tear everything down regardless, then report
                errors.append(f"{step}: {type(exc).__name__}: {exc}")
        for node in self.nodes:  # a node that would not stop
            if node.process is not None:
                node.kill()
        busy = []
        for port in self.ports:
            with contextlib.suppress(AssertionError):
                wait_until(lambda p=port: port_free(p), 10, f"port {port}")  # type: ignore[misc]
            if not port_free(port):
                busy.append(port)
        if busy:
            errors.append(f"ports still bound after the cluster stopped: {busy}")
        if os.environ.get("CATALOG_TEST_KEEP"):
            print(f"cluster kept in {self.root}", file=sys.stderr)
        else:  # thousands of files (PostgreSQL's data dirs): removed in the background
            subprocess.Popen(["rm", "-rf", str(self.root)], start_new_session=True)
        if errors:
            raise RuntimeError("; ".join(errors))
