"""Limits, each with its clear error: memory, connections, request size, SELECT, and a
data directory already in use.

- `--maxmemory 1mb`: writes that would grow memory beyond it get Redis's
  `OOM command not allowed when used memory > 'maxmemory'.`; reads and DEL still work,
  and after DEL writes work again.
- `--max-clients 5`: the 6th connection is told `ERR max number of clients reached`
  and closed; the 5 others go on, and once one closes a new one is accepted.
- A request announcing 2,000,000 arguments (`*2000000\\r\\n` and nothing after) makes
  the server allocate nothing in proportion: weft-kv refuses it (above its 1,048,576
  limit) with `ERR Protocol error: invalid multibulk length` and closes that connection;
  one announcing 1,000,000 waits for its arguments. VmRSS grows by less than 50 MB, and
  other connections are served meanwhile.
- `SELECT 16` gets `ERR DB index is out of range` (databases 0 to 15, as Redis's
  default), and a database's keys are its own.
- A second `weft kv serve` on a data directory a running server uses fails, naming
  the running server's pid.

The OOM, max-clients and huge-header tests run against redis-server too (its
`--maxclients`); the others are weft-kv's own and are skipped for `KV_TARGET=redis`.
"""

import os
import socket
import subprocess
import time

import pytest
import redis

from kvserver import Server, target

weft_only = pytest.mark.skipif(target() != "weft", reason="weft-kv's own behaviour")

OOM = "OOM command not allowed when used memory > 'maxmemory'."


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def raw_command(sock, *args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    sock.sendall(out)
    # One simple reply, error or bulk string (all these tests need).
    data = sock.recv(65536)
    while data and not data.endswith(b"\r\n") or (data.startswith(b"$") and not data.startswith(b"$-1")
                                                    and len(data) < data.index(b"\r\n") + 2 + int(data[1:data.index(b"\r\n")]) + 2):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_maxmemory_oom_then_del_frees(kv_factory):
    # redis-server uses about 1 MB before any key: it gets a little more room.
    s = kv_factory(maxmemory="1mb" if target() == "weft" else "4mb", fsync="everysec", name="oom").start()
    c = s.client(no_retry=True)
    value = b"m" * 10_000
    written = []
    err = None
    for i in range(1000):  # 10 MB: far beyond 1 MB
        try:
            assert c.set(f"big:{i}", value) is True
            written.append(f"big:{i}")
        except redis.ResponseError as e:
            err = e
            break
    assert err is not None, "10 MB of SETs all accepted under --maxmemory 1mb"
    assert isinstance(err, redis.exceptions.OutOfMemoryError), repr(err)
    assert len(written) >= 1
    if target() == "weft":
        assert 10 <= len(written) < 200, len(written)
    # The exact reply on the wire. (redis-server is over its limit now and refuses
    # every write that may grow memory; weft-kv refuses a write that would take it past
    # the limit, as this one of the refused one's size would.)
    with s.raw() as sk:
        assert raw_command(sk, "SET", "more", "x" * 10_000) == b"-" + OOM.encode() + b"\r\n"
        # A command that does not grow memory is not refused.
        assert raw_command(sk, "GET", written[0]) == b"$10000\r\n" + value + b"\r\n"
    assert c.get(written[-1]) == value
    assert c.exists(*written) == len(written)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        c.append(written[0], value)
    assert c.delete(*written) == len(written)
    assert c.set("again", "yes") is True
    assert c.get("again") == b"yes"
    assert c.set("big:0", value) is True


def ping_or_error(sk):
    try:
        return raw_command(sk, "PING")
    except OSError as e:  # refused (a closed one not yet counted as closed): EPIPE
        return repr(e)


def test_max_clients(kv_factory):
    s = kv_factory(weft_args=["--max-clients", "5"], redis_args=["--maxclients", "5"], name="maxcl").start()
    # Five connections are served, once the readiness probe's connections are counted
    # as closed (however long a busy machine takes; the ceiling only stops a hang).
    deadline = time.monotonic() + 60
    while True:
        conns, r = [], b"+PONG\r\n"
        while len(conns) < 5 and r == b"+PONG\r\n":
            conns.append(s.raw())
            r = ping_or_error(conns[-1])
        if r == b"+PONG\r\n":
            break
        for sk in conns:
            sk.close()
        assert time.monotonic() < deadline, f"5 connections not served within 60 s: {r!r}"
        time.sleep(0.05)
    sixth = s.raw()
    data = b""
    try:
        # The server answers on accept, before any request (sending one first could
        # meet EPIPE once it has closed).
        while not data.endswith(b"\r\n"):
            chunk = sixth.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    assert data == b"-ERR max number of clients reached\r\n", data
    sixth.settimeout(60)  # a ceiling: the close comes when the server gets to it
    try:
        assert sixth.recv(4096) == b""  # and closed
    except ConnectionResetError:
        pass
    sixth.close()
    for sk in conns:
        assert raw_command(sk, "PING") == b"+PONG\r\n"
    conns.pop().close()
    deadline = time.monotonic() + 60
    while True:
        sk = s.raw()
        r = ping_or_error(sk)
        if r == b"+PONG\r\n":
            conns.append(sk)
            break
        sk.close()
        assert time.monotonic() < deadline, f"no connection accepted after one closed: {r!r}"
        time.sleep(0.05)
    for sk in conns:
        sk.close()


def wait_read_by_server(pid, port, client_ports):
    """Waits until the server (`pid`, listening on `port`) has read everything sent on the
    TCP connections from `client_ports`: their server ends' receive queues in
    /proc/PID/net/tcp are empty (or gone: closed). The ceiling only stops a hang."""
    deadline = time.monotonic() + 60
    while True:
        queued = []
        with open(f"/proc/{pid}/net/tcp") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local, remote, queues = fields[1], fields[2], fields[4]
                if (int(local.split(":")[1], 16) == port and int(remote.split(":")[1], 16) in client_ports
                        and int(queues.split(":")[1], 16) != 0):
                    queued.append(line.strip())
        if not queued:
            return
        assert time.monotonic() < deadline, "the server did not read within 60 s:\n" + "\n".join(queued)
        time.sleep(0.01)


def test_huge_multibulk_header_allocates_nothing(kv_factory):
    """`*2000000` is above weft-kv's argument limit (1,048,576, `Limits::max_args`): it
    is refused with a protocol error and that connection closed (redis-server, whose
    limit is higher, waits for the arguments). `*1000000` is under it: the server waits
    for the arguments, reserving room for a few only. Neither grows VmRSS by 50 MB."""
    s = kv_factory(name="hugeargs").start()
    pid = s.proc.pid
    c = s.client()
    c.set("k", "v")
    before = rss_kb(pid)
    huge, big = [], []
    for _ in range(4):
        for count, group in ((2_000_000, huge), (1_000_000, big)):
            # On TCP, so that the kernel tells when the server has read what was sent.
            sk = socket.create_connection(("127.0.0.1", s.port), timeout=60)
            # The header, then the start of the first argument, and nothing more.
            sk.sendall(b"*%d\r\n$5\r\nhel" % count)
            group.append(sk)
    wait_read_by_server(pid, s.port, [sk.getsockname()[1] for sk in huge + big])
    assert c.get("k") == b"v"  # another connection is served meanwhile
    after = rss_kb(pid)
    assert after - before < 50 * 1024, f"VmRSS grew from {before} kB to {after} kB"
    if s.kind == "weft":
        for sk in huge:
            data = b""
            while True:
                try:
                    chunk = sk.recv(4096)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                data += chunk
            assert data == b"-ERR Protocol error: invalid multibulk length\r\n", data
    for sk in big:  # still waiting for the arguments: no reply, not closed
        # The server has read the header (above): a reply to it would be on its way.
        sk.settimeout(0.2)
        with pytest.raises(TimeoutError):
            sk.recv(4096)
    for sk in huge + big:
        sk.close()
    assert c.ping()


@weft_only
def test_select_past_the_last_db_is_refused(kv_factory):
    s = kv_factory(name="select").start()
    with s.raw() as sk:
        assert raw_command(sk, "SELECT", "0") == b"+OK\r\n"
        assert raw_command(sk, "SET", "k", "zero") == b"+OK\r\n"
        assert raw_command(sk, "SELECT", "15") == b"+OK\r\n"
        assert raw_command(sk, "GET", "k") == b"$-1\r\n"
        assert raw_command(sk, "SELECT", "16") == b"-ERR DB index is out of range\r\n"
        assert raw_command(sk, "SELECT", "x") == b"-ERR value is not an integer or out of range\r\n"
        assert raw_command(sk, "PING") == b"+PONG\r\n"


@weft_only
def test_data_dir_in_use_names_the_pid(kv_factory):
    s = kv_factory(name="inuse").start()
    s.client().set("k", "v")
    other = Server(name="inuse2")
    try:
        argv = [os.environ["WEFT_BIN"], "kv", "serve", "--dir", s.dir, "--socket", other.sock,
                "--port", str(other.port)]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    finally:
        other.cleanup()
    assert p.returncode != 0, p.stderr
    assert f"pid {s.proc.pid}" in p.stderr, p.stderr
    assert s.dir in p.stderr and "in use" in p.stderr, p.stderr
    assert not os.path.exists(other.sock)
    # The running server is unharmed.
    assert s.client().get("k") == b"v"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", other.port), timeout=1).close()
