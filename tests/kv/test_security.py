"""Security and limits: owner-only socket and data directory, TCP on loopback only, the
password (NOAUTH before AUTH, WRONGPASS for a wrong one, AUTH and HELLO 3 AUTH work,
redis-py's password= works in RESP2 and RESP3), and bad input closing only the
connection that sent it (a bulk length above the limit is refused with Redis's
words before anything is allocated; malformed multibulk).

Against redis-server the fixture passes the equivalent options (--unixsocketperm 600,
--requirepass, --bind 127.0.0.1) and creates the data directory 0700 itself (Redis
needs it to exist); against weft-kv these are weft-kv's defaults and its own doing.
"""

import os
import socket
import stat

import pytest
import redis


def read_until_closed(s, timeout=60):
    """Everything the peer sends until it closes the connection (fails on time-out)."""
    s.settimeout(timeout)
    out = b""
    while True:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            pytest.fail(f"connection not closed by the server after bad input; it sent {out!r}")
        except ConnectionResetError:
            return out
        if not chunk:
            return out
        out += chunk


def test_socket_and_dir_are_owner_only(kv):
    assert stat.S_IMODE(os.stat(kv.sock).st_mode) == 0o600, oct(os.stat(kv.sock).st_mode)
    assert stat.S_IMODE(os.stat(kv.dir).st_mode) == 0o700, oct(os.stat(kv.dir).st_mode)


def test_tcp_listens_on_loopback_only(kv):
    listening = []
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local, st = fields[1], fields[3]
            addr, port = local.split(":")
            if st == "0A" and int(port, 16) == kv.port:  # 0A: LISTEN
                listening.append(addr)
    assert listening == ["0100007F"], f"port {kv.port} listens on {listening} (want 127.0.0.1 only)"
    with open("/proc/net/tcp6") as f:
        assert not any(int(l.split()[1].split(":")[1], 16) == kv.port and l.split()[3] == "0A"
                       for l in f.readlines()[1:]), "listening on IPv6 too"


@pytest.fixture
def locked(kv_factory):
    s = kv_factory(requirepass="pw", name="auth")
    s.start()
    return s


def test_requirepass(locked):
    c = locked.client(protocol=2, no_retry=True)
    with pytest.raises(redis.AuthenticationError, match="Authentication required"):
        c.get("a")
    with pytest.raises(redis.AuthenticationError, match="invalid username-password pair"):
        c.execute_command("AUTH", "wrong")
    assert c.execute_command("AUTH", "pw") is True
    assert c.set("a", "1") is True
    c.close()

    # The exact error words, as a raw client sees them.
    s = locked.raw()
    s.sendall(b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n")
    assert s.recv(1024).startswith(b"-NOAUTH Authentication required")
    s.sendall(b"*2\r\n$4\r\nAUTH\r\n$5\r\nwrong\r\n")
    assert s.recv(1024).startswith(b"-WRONGPASS invalid username-password pair")
    s.sendall(b"*3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$2\r\npw\r\n")
    assert s.recv(1024) == b"+OK\r\n"
    s.close()

    for protocol in (2, 3):  # redis-py sends AUTH (RESP2) or HELLO 3 AUTH default pw (RESP3)
        for tcp in (False, True):
            c = locked.client(protocol=protocol, tcp=tcp, password="pw")
            assert c.get("a") == b"1"
            c.close()
    with pytest.raises(redis.AuthenticationError):
        locked.client(password="nope", no_retry=True).ping()

    # HELLO 3 AUTH by hand: a map reply (RESP3's %), then the connection is in.
    s = locked.raw()
    s.sendall(b"*5\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$4\r\nnope\r\n")
    assert s.recv(1024).startswith(b"-WRONGPASS invalid username-password pair")
    s.sendall(b"*5\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$2\r\npw\r\n")
    hello = s.recv(4096)
    assert hello.startswith(b"%") and b"proto\r\n:3\r\n" in hello, hello
    s.sendall(b"GET a\r\n")
    assert s.recv(1024) == b"$1\r\n1\r\n"
    s.close()


def test_bulk_length_above_the_limit_closes_only_that_connection(kv, r):
    r.set("survivor", "yes")
    bystander = kv.raw()
    bad = kv.raw()
    bad.sendall(b"*1\r\n$999999999999\r\n")
    out = read_until_closed(bad)
    assert out == b"-ERR Protocol error: invalid bulk length\r\n", out
    bad.close()
    bystander.sendall(b"*2\r\n$3\r\nGET\r\n$8\r\nsurvivor\r\n")
    assert bystander.recv(1024) == b"$3\r\nyes\r\n"
    bystander.close()
    assert r.get("survivor") == b"yes"


@pytest.mark.parametrize("garbage", [b"*x\r\n", b"*1\r\n$x\r\n", b"*1\r\n$-1\r\n", b"*1\r\nGET\r\n",
                                     b"*99999999999\r\n"],
                         ids=["multibulk-count", "bulk-length", "negative-bulk", "no-dollar", "huge-count"])
def test_malformed_input_closes_only_that_connection(kv, r, garbage):
    bystander = kv.raw()
    bad = kv.raw()
    bad.sendall(garbage)
    out = read_until_closed(bad)
    assert out.startswith(b"-ERR Protocol error"), out
    bad.close()
    bystander.sendall(b"PING\r\n")
    assert bystander.recv(1024) == b"+PONG\r\n"
    bystander.close()
    assert r.ping() is True
