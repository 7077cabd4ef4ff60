"""redis-py 8 against the server under test: the main commands with their replies and
types, over the Unix socket and TCP, in RESP3 (redis-py sends HELLO 3 on connect) and
RESP2; pipelines; binary-safe and big values; expiry; errors in Redis's words; SCAN
over 10,000 keys; INFO and CONFIG GET.

Replies are read with `decode_responses=False`, so each value is compared as the
bytes the server sent, and the Python type redis-py built from the reply (int, bytes,
None, list, float, bool) is asserted too: a RESP type mistake shows up as a type
mismatch here.
"""

import os
import time

import pytest
import redis

TRANSPORTS = [
    pytest.param((3, False), id="resp3-unix"),
    pytest.param((2, False), id="resp2-unix"),
    pytest.param((3, True), id="resp3-tcp"),
    pytest.param((2, True), id="resp2-tcp"),
]


@pytest.fixture(params=TRANSPORTS)
def c(kv, request):
    protocol, tcp = request.param
    cl = kv.client(protocol=protocol, tcp=tcp)
    cl.flushall()
    yield cl
    cl.close()


def test_ping_echo_hello(c):
    assert c.ping() is True
    assert c.echo(b"hi there") == b"hi there"
    proto = c.connection_pool.connection_kwargs.get("protocol")
    h = c.execute_command("HELLO", proto)
    h = h if isinstance(h, dict) else dict(zip(h[::2], h[1::2]))
    assert h[b"proto"] == proto
    assert b"server" in h and b"version" in h


def test_strings_replies_and_types(c):
    assert c.set("a", "1") is True
    assert c.get("a") == b"1"
    assert c.get("missing") is None
    assert c.set("a", "2", nx=True) is None
    assert c.set("b", "x", xx=True) is None
    assert c.set("a", "3", xx=True) is True
    assert c.set("a", "4", get=True) == b"3"
    assert c.setnx("a", "5") is False
    assert c.setnx("n", "5") is True
    assert c.getset("n", "6") == b"5"
    assert c.getdel("n") == b"6"
    assert c.getdel("n") is None
    assert c.incr("i") == 1
    assert c.incrby("i", 41) == 42
    assert c.decr("i") == 41
    assert c.decrby("i", 40) == 1
    v = c.incrbyfloat("f", 1.5)
    assert isinstance(v, float) and v == 1.5
    assert c.append("s", "ab") == 2
    assert c.append("s", "cd") == 4
    assert c.strlen("s") == 4
    assert c.strlen("missing") == 0
    assert c.getrange("s", 1, -1) == b"bcd"
    assert c.getrange("s", -2, -1) == b"cd"
    assert c.setrange("s", 6, "z") == 7
    assert c.get("s") == b"abcd\x00\x00z"
    assert c.mset({"m1": "x", "m2": "y"}) is True
    assert c.mget("m1", "nope", "m2") == [b"x", None, b"y"]
    assert c.exists("m1", "m2", "nope", "m1") == 3
    assert c.touch("m1", "nope") == 1
    assert c.type("m1") == b"string"
    assert c.type("nope") == b"none"
    assert c.delete("m1", "m2", "nope") == 2
    assert c.unlink("s") == 1
    assert sorted(c.keys("*")) == [b"a", b"f", b"i"]
    assert sorted(c.keys("?")) == [b"a", b"f", b"i"]
    assert c.keys("zz*") == []
    assert c.dbsize() == 3
    assert c.getex("a") == b"4"
    assert c.getex("a", ex=100) == b"4"
    assert 0 < c.ttl("a") <= 100
    assert c.getex("a", persist=True) == b"4"
    assert c.ttl("a") == -1
    assert c.execute_command("SETEX", "e", 100, "v") is True
    assert c.psetex("pe", 100000, "v") is True
    assert 0 < c.pttl("pe") <= 100000
    assert c.persist("pe") is True
    assert c.persist("pe") is False
    assert c.flushdb() is True
    assert c.dbsize() == 0


def test_key_expiry_commands(c):
    c.set("k", "v")
    assert c.ttl("k") == -1
    assert c.ttl("missing") == -2
    assert c.pttl("missing") == -2
    assert c.expire("k", 100) is True
    assert c.expire("missing", 100) is False
    assert 0 < c.ttl("k") <= 100
    assert 0 < c.pttl("k") <= 100000
    at = int(time.time()) + 1000
    assert c.expireat("k", at) is True
    assert c.expiretime("k") == at
    assert c.pexpireat("k", at * 1000 + 5) is True
    assert c.pexpiretime("k") == at * 1000 + 5
    assert c.expiretime("missing") == -2
    c.set("p", "v")
    assert c.expiretime("p") == -1
    # An expiry in the past deletes the key at once.
    assert c.expire("p", -1) is True
    assert c.exists("p") == 0
    assert c.pexpire("k", 100000) is True
    assert c.set("k", "w", keepttl=True) is True
    assert c.ttl("k") > 0
    assert c.set("k", "w") is True
    assert c.ttl("k") == -1


def test_expiry_really_expires(c):
    t0 = time.monotonic()
    assert c.set("gone", "soon", ex=1) is True
    assert c.set("gone-px", "soon", px=800) is True
    ttl = c.ttl("gone")
    # 1 or 0 seconds left; or already gone, when a busy machine took a second to ask.
    assert ttl in (0, 1) or (ttl == -2 and time.monotonic() - t0 >= 0.9), ttl
    time.sleep(1.1)
    assert c.get("gone") is None
    assert c.get("gone-px") is None
    assert c.exists("gone", "gone-px") == 0
    assert c.ttl("gone") == -2


def test_pipeline(c):
    p = c.pipeline(transaction=False)
    for i in range(1000):
        p.set(f"p{i}", i)
    for i in range(1000):
        p.get(f"p{i}")
    p.incr("p0")
    p.execute_command("NOSUCHCMD")
    p.get("p1")
    res = p.execute(raise_on_error=False)
    assert res[:1000] == [True] * 1000
    assert res[1000:2000] == [str(i).encode() for i in range(1000)]
    assert res[2000] == 1
    assert isinstance(res[2001], redis.ResponseError) and "unknown command" in str(res[2001])
    assert res[2002] == b"1"
    assert c.dbsize() == 1000


def test_binary_safe_values(c):
    blob = bytes(range(256)) * 4 + b"\r\n$-1\r\n*3\r\n\x00"
    key = b"k\x00\r\n\xff"
    assert c.set(key, blob) is True
    assert c.get(key) == blob
    assert c.strlen(key) == len(blob)
    assert c.keys(b"k*") == [key]
    assert c.append(key, b"\x00\r\n") == len(blob) + 3
    assert c.get(key) == blob + b"\x00\r\n"
    assert c.set(b"", b"") is True  # the empty key and the empty value
    assert c.get(b"") == b""
    assert c.exists(b"") == 1


def test_big_values(c):
    big = os.urandom(8 << 20)
    assert c.set("big", big) is True
    assert c.strlen("big") == len(big)
    assert c.get("big") == big
    assert c.getrange("big", (8 << 20) - 10, -1) == big[-10:]
    p = c.pipeline(transaction=False)
    p.set("big2", big)
    p.get("big2")
    p.get("big")
    assert p.execute() == [True, big, big]


def test_errors_in_redis_words(c):
    with pytest.raises(redis.ResponseError, match=r"^unknown command 'NOSUCHCMD'"):
        c.execute_command("NOSUCHCMD", "a")
    with pytest.raises(redis.ResponseError, match=r"^wrong number of arguments for 'get' command$"):
        c.execute_command("GET")
    with pytest.raises(redis.ResponseError, match=r"^wrong number of arguments for 'set' command$"):
        c.execute_command("SET", "k")
    c.set("s", "abc")
    with pytest.raises(redis.ResponseError, match=r"^value is not an integer or out of range$"):
        c.incr("s")
    c.set("max", str(2**63 - 1))
    with pytest.raises(redis.ResponseError, match=r"^increment or decrement would overflow$"):
        c.incr("max")
    with pytest.raises(redis.ResponseError, match=r"^syntax error$"):
        c.execute_command("SET", "k", "v", "NX", "XX")
    with pytest.raises(redis.ResponseError, match=r"^invalid expire time in 'set' command$"):
        c.execute_command("SET", "k", "v", "EX", "0")
    with pytest.raises(redis.ResponseError, match=r"^value is not a valid float$"):
        c.incrbyfloat("s", 1)
    # The connection still works after errors.
    assert c.get("s") == b"abc"


def test_scan_iter_10000_keys(c):
    want = {f"scan:{i}".encode() for i in range(10000)}
    p = c.pipeline(transaction=False)
    for k in want:
        p.set(k, "1")
    p.execute()
    c.set("other", "1")
    seen = []
    for k in c.scan_iter(match="scan:*", count=500):
        seen.append(k)
    # SCAN's guarantee: every key present for the whole scan is returned at least
    # once (a key may come twice); so the set is exact.
    assert set(seen) == want
    assert len(seen) >= len(want)
    everything = set(c.scan_iter(count=1000))
    assert everything == want | {b"other"}


def test_info_and_config(c):
    c.set("a", "1")
    c.set("b", "2", ex=1000)
    info = c.info()
    assert "redis_version" in info
    assert info["arch_bits"] == 64
    assert info["db0"]["keys"] == 2
    assert info["db0"]["expires"] == 1
    ks = c.info("keyspace")
    assert ks["db0"]["keys"] == 2
    # redis-py decodes CONFIG GET's names and values to str.
    assert c.config_get("appendonly") == {"appendonly": "yes"}
    assert c.config_get("appendfsync") == {"appendfsync": "always"}
    assert c.config_get("save") == {"save": ""}


def test_time_select_client(c):
    t = c.time()
    assert isinstance(t[0], int) and abs(t[0] - time.time()) < 60
    assert c.execute_command("SELECT", 0) in (True, b"OK")
    assert isinstance(c.client_id(), int)
    assert c.client_setname("tester") is True
    assert c.client_getname() in ("tester", b"tester")  # redis-py decodes it in RESP2 only
    assert c.lastsave() is not None
    assert c.command_count() > 40  # the whole command table, not a stub


def test_shutdown_keeps_data(kv_factory):
    """SHUTDOWN ends the server cleanly; a restart on the same directory has the data."""
    s = kv_factory(fsync="everysec")
    s.start()
    cl = s.client()
    cl.set("kept", "yes")
    cl.incrby("n", 7)
    try:
        cl.shutdown()
    except redis.ConnectionError:
        pass
    assert s.proc.wait(20) == 0
    s.start()
    cl = s.client()
    assert cl.get("kept") == b"yes"
    assert cl.get("n") == b"7"
    assert s.stop() == 0  # SIGTERM: a clean exit too
