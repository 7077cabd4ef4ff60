"""Start and stop the server under test: weft-kv or a real redis-server.

Every test of this suite talks to a `Server`, never to a fixed program: `KV_TARGET`
chooses which one (`weft`: `$WEFT_BIN kv serve ...`; `redis`: Debian's
/usr/bin/redis-server with the equivalent options), so the same test proves weft-kv
and, run against redis-server, proves that the test itself asserts what Redis does.

A server gets a fresh short directory under /tmp (a Unix socket path must stay under
108 bytes, which pytest's tmp_path may not), a free TCP port on 127.0.0.1, and is
ready when a PING over the Unix socket gets +PONG (or -NOAUTH when it has a
password; not -LOADING) and the TCP port accepts. Its log (weft-kv's stderr, redis-server's logfile)
is kept beside it and printed when it fails to start.

Where weft-kv and redis-server need different options for the same behaviour, the
difference is here and commented; the tests do not branch on the target except where
a comment says weft-kv deliberately differs from Redis.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

REDIS_SERVER = os.environ.get("REDIS_SERVER", shutil.which("redis-server") or "/usr/bin/redis-server")


def target() -> str:
    """The server under test: `KV_TARGET` (weft or redis); default weft when WEFT_BIN is
    set, redis otherwise."""
    t = os.environ.get("KV_TARGET") or ("weft" if os.environ.get("WEFT_BIN") else "redis")
    if t not in ("weft", "redis"):
        raise ValueError(f"KV_TARGET={t!r}: use weft or redis")
    return t


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerError(Exception):
    pass


class Server:
    """One server process on its own directory, socket and port.

    `start()` may be called again after `stop()` or `kill9()`: it restarts on the same
    data directory, socket and port (what the crash test needs).
    """

    def __init__(self, kind=None, *, fsync="always", requirepass=None, maxmemory=None, name="kv",
                 weft_args=(), redis_args=()):
        """`weft_args` / `redis_args`: extra options for weft-kv / redis-server (only
        the ones for the server that runs are used)."""
        self.kind = kind or target()
        self.extra = list(weft_args) if self.kind == "weft" else list(redis_args)
        self.fsync = fsync
        self.requirepass = requirepass
        self.maxmemory = maxmemory
        self.base = tempfile.mkdtemp(prefix=f"{name}-{self.kind}-", dir="/tmp")
        # weft-kv creates its data directory itself (0700): give it one that does not
        # exist yet, so the permission test sees weft-kv's doing. redis-server needs an
        # existing directory: the fixture creates it 0700 (Redis does not chmod it).
        self.dir = os.path.join(self.base, "data")
        self.sock = os.path.join(self.base, "kv.sock")
        self.port = free_port()
        self.logpath = os.path.join(self.base, "server.log")
        self.proc = None
        self.starts = 0

    # ---- the command line ----------------------------------------------------------

    def argv(self):
        if self.kind == "weft":
            weft = os.environ.get("WEFT_BIN")
            if not weft:
                raise ServerError("KV_TARGET=weft needs WEFT_BIN=path of the weft binary (cargo build -p weft-cli)")
            a = [weft, "kv", "serve", "--dir", self.dir, "--socket", self.sock,
                 "--port", str(self.port), "--fsync", self.fsync]
            if self.requirepass is not None:
                a += ["--requirepass", self.requirepass]
            if self.maxmemory is not None:
                a += ["--maxmemory", str(self.maxmemory)]
            # KV_WORKERS sets the worker count of every server a test does not set
            # itself (a test's own --workers wins: weft-kv takes the option once).
            if os.environ.get("KV_WORKERS") and "--workers" not in self.extra:
                a += ["--workers", os.environ["KV_WORKERS"]]
            return a + self.extra
        os.makedirs(self.dir, mode=0o700, exist_ok=True)
        a = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
             "--unixsocket", self.sock, "--unixsocketperm", "600",
             "--dir", self.dir, "--logfile", self.logpath, "--daemonize", "no",
             # weft-kv's durability is an append-only log: Redis's equivalent is the
             # AOF with the same fsync policy, and no RDB snapshots.
             "--appendonly", "yes", "--appendfsync", self.fsync, "--save", "",
             "--protected-mode", "no"]
        if self.requirepass is not None:
            a += ["--requirepass", self.requirepass]
        if self.maxmemory is not None:
            a += ["--maxmemory", str(self.maxmemory)]
        return a + self.extra

    # ---- life ------------------------------------------------------------------------

    def start(self, timeout=60.0):
        assert self.proc is None or self.proc.poll() is not None, "server already running"
        self.starts += 1
        log = open(self.logpath, "ab")
        log.write(f"---- start {self.starts}: {' '.join(self.argv())}\n".encode())
        log.flush()
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerError(f"{self.kind} exited with status {self.proc.returncode} while starting\n{self.log_tail()}")
            try:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.settimeout(2)
                    s.connect(self.sock)
                    s.sendall(b"*1\r\n$4\r\nPING\r\n")
                    r = s.recv(64)
                # +PONG, or -NOAUTH with a password; not -LOADING (Redis reading its AOF).
                if r.startswith(b"+") or r.startswith(b"-NOAUTH"):
                    with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                        pass
                    return self
                last = f"PING answered {r!r}"
            except OSError as e:
                last = repr(e)
            time.sleep(0.02)
        self.kill9()
        raise ServerError(f"{self.kind} not ready after {timeout}s ({last})\n{self.log_tail()}")

    def kill9(self):
        """SIGKILL: the crash. Waits until the process is gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout=60.0):
        """SIGTERM (a clean end for both servers); returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
                raise ServerError(f"{self.kind} did not end within {timeout}s of SIGTERM\n{self.log_tail()}")
        return self.proc.returncode

    def cleanup(self):
        try:
            self.stop()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def log_tail(self, n=40):
        try:
            with open(self.logpath, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
            return "---- server log (last lines) ----\n" + "\n".join(lines[-n:])
        except OSError:
            return "(no server log)"

    # ---- clients ---------------------------------------------------------------------

    def client(self, protocol=3, tcp=False, no_retry=False, **kw) -> redis.Redis:
        """A redis-py client on the Unix socket (or TCP), RESP3 unless told otherwise."""
        kw.setdefault("socket_timeout", 60)
        if no_retry:
            kw["retry"] = Retry(NoBackoff(), 0)
        if tcp:
            return redis.Redis(host="127.0.0.1", port=self.port, protocol=protocol, **kw)
        return redis.Redis(unix_socket_path=self.sock, protocol=protocol, **kw)

    def raw(self, timeout=60.0) -> socket.socket:
        """A plain socket on the Unix socket, for inline commands and bad input."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(self.sock)
        return s
