"""Differential test: the same random command sequence against a redis-server and the
server under test gives the same replies.

The sequence (seeded: `KV_DIFF_SEED`, default 7; `KV_DIFF_COMMANDS`, default 2000)
works on a small key space (k0..k15 holding integers or short strings, f0..f3 only
touched by INCRBYFLOAT and the key commands) and mixes the string and key commands
with their options, wrong arities, arguments of the wrong type, INCR/INCRBY overflow,
expiries in the past (the key goes at once), GETRANGE with negative indexes,
SETRANGE, APPEND, the multi-key commands (MGET, MSET, DEL, UNLINK, EXISTS, TOUCH)
over several keys, DBSIZE, KEYS with patterns (compared sorted), an occasional
FLUSHDB, and unknown commands.

Each command goes to the reference first, then to the target, and the two replies
are compared at once; the first difference fails the test, printing the command, both
replies and the commands before it. Replies are compared four ways: parsed by redis-py
(RESP2, and RESP3 after HELLO 3) with its per-command callbacks removed, so the
parser's own values and Python types are compared (`True` is not `1`); and read off
the wire by a small reader here that keeps each reply's RESP type byte (a simple
string `+OK` is not a bulk string `$2 OK`, a RESP3 double `,1.5` is not a bulk).
Errors compare by their full text.

Nothing time-dependent is compared: expiries are far in the future (100 s and more)
or in the past (except for SET, see set_opts), TTL/PTTL/EXPIRETIME/PEXPIRETIME of a key with an expiry compare as
the class ">=0" (their exact value differs by the milliseconds between the two
servers), and EXPIRE's GT/LT are only used with absolute times.

When KV_TARGET=redis both sides are redis-servers: that checks that the sequence
itself is deterministic.
"""

import os
import random
import time

import pytest
import redis

from kvserver import Server, target

INT_VALUES = ["0", "1", "-1", "7", "42", "100", "-100", "12345", str(2**63 - 1), str(-(2**63)),
              str(2**63 - 2), "9223372036854775808", "007", "-0", "+5", " 1", "1 "]
STR_VALUES = ["", "a", "abc", "hello world", "12abc", "1.5", "x" * 20, "\x00\xff", "k1", "\r\n"]
INCRS = ["1", "-1", "5", "100", str(2**62), str(-(2**62)), str(2**63 - 1), str(-(2**63)), "0"]
BAD_INTS = ["abc", "1.5", "", "9223372036854775808", "1e3", " 3"]
# INCRBYFLOAT increments whose sums stay exact in binary: Redis formats the result of
# a long double with %.17Lg, so only exactly representable values print the same in
# every correct implementation (0.1 + 0.2 would not).
FLOAT_INCRS = ["0.5", "-1.25", "2.75", "3", "-0.5", "10"]
PATTERNS = ["*", "k1*", "k?", "k[0-4]", "k[^0-4]", "*1*", "f?", "nomatch*", "k1?", "?0", "[fk]1"]


class Gen:
    def __init__(self, seed, now):
        self.rng = random.Random(seed)
        self.now = now  # seconds: absolute expiry times are computed from it once

    def key(self):
        rng = self.rng
        return f"k{rng.randrange(16)}" if rng.random() < 0.85 else f"f{rng.randrange(4)}"

    def kkey(self):
        return f"k{self.rng.randrange(16)}"

    def value(self):
        rng = self.rng
        return rng.choice(INT_VALUES) if rng.random() < 0.6 else rng.choice(STR_VALUES)

    def keys(self, lo=1, hi=4):
        return [self.key() for _ in range(self.rng.randint(lo, hi))]

    def secs(self):
        return self.rng.choice(["100", "1000", "10000", "100", "1000", "0", "-5", "abc"])

    def future_at(self):
        return str(self.now + self.rng.choice([5000, 50000]))

    def set_opts(self):
        rng = self.rng
        o = []
        r = rng.random()
        if r < 0.15:
            o += ["EX", self.secs()]
        elif r < 0.25:
            o += ["PX", rng.choice(["100000", "1000000", "0", "-1"])]
        # No EXAT/PXAT in the past here: Redis 7.0 stores such a key and leaves it to
        # its expiry cycle (GETEX and EXPIRE delete at once), so DBSIZE would count it
        # or not depending on time.
        elif r < 0.32:
            o += ["EXAT", self.future_at()]
        elif r < 0.37:
            o += ["PXAT", self.future_at() + "123"]
        elif r < 0.45:
            o += ["KEEPTTL"]
        r = rng.random()
        if r < 0.15:
            o += ["NX"]
        elif r < 0.3:
            o += ["XX"]
        if rng.random() < 0.2:
            o += ["GET"]
        if rng.random() < 0.04:  # a conflicting pair: syntax error
            o += rng.choice([["NX", "XX"], ["EX", "10", "PX", "100"], ["KEEPTTL", "EX", "10"], ["BOGUS"]])
        return o

    def command(self):
        rng = self.rng
        c = rng.choices(COMMANDS, weights=[w for _, w in COMMANDS])[0][0]
        return c(self, rng)


def _expire_opts(g, rng, absolute):
    if rng.random() < 0.7:
        return []
    if absolute:
        return [rng.choice(["NX", "XX", "GT", "LT"])]
    return [rng.choice(["NX", "XX"])]


COMMANDS = [
    (lambda g, r: ["GET", g.key()], 12),
    (lambda g, r: ["SET", g.kkey(), g.value(), *g.set_opts()], 14),
    (lambda g, r: ["SETNX", g.kkey(), g.value()], 2),
    (lambda g, r: ["SETEX", g.kkey(), g.secs(), g.value()], 2),
    (lambda g, r: ["PSETEX", g.kkey(), r.choice(["100000", "0", "-1", "x"]), g.value()], 1),
    (lambda g, r: ["GETSET", g.kkey(), g.value()], 2),
    (lambda g, r: ["GETDEL", g.key()], 2),
    (lambda g, r: ["GETEX", g.key(), *r.choice([[], [], ["PERSIST"], ["EX", g.secs()], ["PX", "200000"],
                                                  ["EXAT", g.future_at()], ["PXAT", "5"], ["EX", "10", "PERSIST"], ["BOGUS"]])], 3),
    (lambda g, r: ["MGET", *g.keys(1, 5)], 4),
    (lambda g, r: ["MSET", *[x for _ in range(r.randint(1, 3)) for x in (g.kkey(), g.value())]]
     + ([g.kkey()] if r.random() < 0.08 else []), 4),
    (lambda g, r: ["DEL", *g.keys(1, 3)], 4),
    (lambda g, r: ["UNLINK", *g.keys(1, 3)], 1),
    (lambda g, r: ["EXISTS", *g.keys(1, 5)], 3),
    (lambda g, r: ["TOUCH", *g.keys(1, 3)], 1),
    (lambda g, r: ["INCR", g.kkey()], 6),
    (lambda g, r: ["DECR", g.kkey()], 3),
    (lambda g, r: ["INCRBY", g.kkey(), r.choice(INCRS + BAD_INTS[:2])], 4),
    (lambda g, r: ["DECRBY", g.kkey(), r.choice(INCRS + BAD_INTS[:2])], 3),
    (lambda g, r: ["INCRBYFLOAT", f"f{r.randrange(4)}", r.choice(FLOAT_INCRS)], 4),
    (lambda g, r: ["INCRBYFLOAT", g.kkey(), r.choice(["abc", "", "1.2.3"])], 1),
    (lambda g, r: ["APPEND", g.kkey(), r.choice(STR_VALUES + ["1", "23"])], 4),
    (lambda g, r: ["STRLEN", g.key()], 3),
    (lambda g, r: ["GETRANGE", g.key(), str(r.randint(-25, 25)), str(r.randint(-25, 25))], 4),
    (lambda g, r: ["GETRANGE", g.key(), r.choice(["0", "a"]), r.choice(["-1", "x", "9223372036854775807"])], 1),
    (lambda g, r: ["SETRANGE", g.kkey(), str(r.choice([0, 1, 3, 7, 20, 40, -1])), r.choice(STR_VALUES)], 4),
    (lambda g, r: ["EXPIRE", g.key(), g.secs(), *_expire_opts(g, r, False)], 4),
    (lambda g, r: ["PEXPIRE", g.key(), r.choice(["100000", "1000000", "0", "-1", "x"]), *_expire_opts(g, r, False)], 2),
    (lambda g, r: ["EXPIREAT", g.key(), r.choice([g.future_at(), "1", "0"]), *_expire_opts(g, r, True)], 3),
    (lambda g, r: ["PEXPIREAT", g.key(), r.choice([g.future_at() + "000", "1"]), *_expire_opts(g, r, True)], 2),
    (lambda g, r: ["TTL", g.key()], 4),
    (lambda g, r: ["PTTL", g.key()], 2),
    (lambda g, r: ["EXPIRETIME", g.key()], 1),
    (lambda g, r: ["PEXPIRETIME", g.key()], 1),
    (lambda g, r: ["PERSIST", g.key()], 2),
    (lambda g, r: ["TYPE", g.key()], 2),
    (lambda g, r: ["KEYS", r.choice(PATTERNS)], 3),
    (lambda g, r: ["DBSIZE"], 2),
    (lambda g, r: ["FLUSHDB"] if r.random() < 0.05 else ["DBSIZE"], 1),
    (lambda g, r: r.choice([["PING"], ["PING", "hi"], ["ECHO", g.value()]]), 1),
    # Wrong arity and unknown commands.
    (lambda g, r: r.choice([["GET"], ["GET", "k1", "k2"], ["SET", "k1"], ["INCR"], ["INCRBY", "k1"],
                            ["GETRANGE", "k1", "0"], ["EXPIRE", "k1"], ["TTL"], ["MGET"], ["STRLEN", "a", "b"],
                            ["APPEND", "k1"], ["SETNX", "k1"], ["DEL"], ["EXISTS"], ["MSET"], ["SETEX", "k1", "10"],
                            ["KEYS"], ["DBSIZE", "x"], ["PERSIST"], ["TYPE"], ["SETRANGE", "k1", "0"], ["ECHO"],
                            ["NOSUCHCMD"], ["NOSUCHCMD", "a", "b"], ["get"], ["SeT", "k1"]]), 3),
    # Arguments of the wrong type.
    (lambda g, r: r.choice([["INCRBY", g.kkey(), r.choice(BAD_INTS)], ["EXPIRE", g.key(), r.choice(BAD_INTS)],
                            ["SETRANGE", g.kkey(), "x", "v"], ["SETEX", g.kkey(), "abc", "v"],
                            ["SET", g.kkey(), "v", "EX", r.choice(BAD_INTS)], ["GETRANGE", g.key(), "a", "1"],
                            ["DECRBY", g.kkey(), str(-(2**63))], ["PEXPIREAT", g.key(), "1.5"],
                            ["EXPIRE", g.key(), "100", "BOGUS"], ["EXPIRE", g.key(), "100", "NX", "XX"]]), 3),
]

TIME_CLASS = {"TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"}


# ---- reading replies ------------------------------------------------------------------

def tag(x):
    """A parsed reply with the Python type of every value (so True != 1)."""
    if isinstance(x, redis.ResponseError):
        return ("error", type(x).__name__, str(x))
    if isinstance(x, list):
        return ("list", [tag(v) for v in x])
    if isinstance(x, dict):
        return ("dict", sorted((repr(tag(k)), tag(v)) for k, v in x.items()))
    if isinstance(x, (set, frozenset)):
        return ("set", sorted(repr(tag(v)) for v in x))
    return (type(x).__name__, x)


class Wire:
    """A plain socket speaking RESP, whose replies keep their type byte."""

    def __init__(self, server, protocol):
        self.s = server.raw(timeout=30)
        self.buf = b""
        if protocol == 3:
            r = self.call(["HELLO", "3"])
            assert r[0] == b"%", f"HELLO 3 did not answer a map: {r!r}"

    def line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        ln, self.buf = self.buf.split(b"\r\n", 1)
        return ln

    def exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.s.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def read(self):
        ln = self.line()
        t, rest = ln[:1], ln[1:]
        if t in (b"+", b"-", b":", b",", b"#", b"_", b"("):
            return (t, rest)
        if t in (b"$", b"=", b"!"):
            n = int(rest)
            return (t, None) if n < 0 else (t, self.exact(n))
        if t in (b"*", b"~", b">"):
            n = int(rest)
            return (t, None) if n < 0 else (t, [self.read() for _ in range(n)])
        if t == b"%":
            return (t, [(self.read(), self.read()) for _ in range(int(rest))])
        raise AssertionError(f"not a RESP reply: {ln!r}")

    def call(self, args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a.encode("latin-1") if isinstance(a, str) else a
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.s.sendall(b"".join(out))
        return self.read()

    def close(self):
        self.s.close()


def normalize(cmd, reply):
    """Class time-dependent values, sort KEYS."""
    name = cmd[0].upper()
    if name in TIME_CLASS:
        if isinstance(reply, tuple) and reply[0] == b":" and int(reply[1]) >= 0:
            return (b":", ">=0")
        if isinstance(reply, tuple) and reply[0] == "int" and reply[1] >= 0:
            return ("int", ">=0")
    if name == "KEYS" and isinstance(reply, tuple):
        if reply[0] == "list":
            return ("list", sorted(reply[1]))
        if reply[0] in (b"*", b"~") and reply[1] is not None:
            return (reply[0], sorted(reply[1]))
    return reply


class PyClient:
    def __init__(self, server, protocol):
        self.c = server.client(protocol=protocol, decode_responses=False)
        # No per-command callbacks: compare what the parser made of the reply.
        self.c.response_callbacks.clear()

    def call(self, args):
        try:
            return tag(self.c.execute_command(*args))
        except redis.ResponseError as e:
            return tag(e)

    def close(self):
        self.c.close()


@pytest.fixture(scope="module")
def pair():
    ref = Server("redis", fsync="everysec", name="ref")
    tgt = Server(target(), fsync="everysec", name="tgt")
    try:
        ref.start()
        tgt.start()
        yield ref, tgt
    finally:
        ref.cleanup()
        tgt.cleanup()


@pytest.mark.parametrize("protocol", [2, 3], ids=["resp2", "resp3"])
@pytest.mark.parametrize("reader", ["redis-py", "wire"])
def test_same_replies_as_redis(pair, reader, protocol):
    ref, tgt = pair
    seed = int(os.environ.get("KV_DIFF_SEED", "7")) + protocol + (10 if reader == "wire" else 0)
    count = int(os.environ.get("KV_DIFF_COMMANDS", "2000"))
    make = PyClient if reader == "redis-py" else Wire
    clients = [make(ref, protocol), make(tgt, protocol)]
    try:
        for cl in clients:
            cl.call(["FLUSHALL"])
        g = Gen(seed, int(time.time()))
        history = []
        for i in range(count):
            cmd = g.command()
            a = normalize(cmd, clients[0].call(cmd))
            b = normalize(cmd, clients[1].call(cmd))
            history.append(cmd)
            if a != b:
                before = "\n".join(f"  {j}: {' '.join(map(repr, h))}" for j, h in
                                   enumerate(history[-15:-1], start=len(history) - 15))
                pytest.fail(f"command {i} (seed {seed}, {reader}, RESP{protocol}) differs:\n"
                            f"  {' '.join(map(repr, cmd))}\n"
                            f"  redis-server: {a!r}\n  {tgt.kind:12}: {b!r}\n"
                            f"the commands before it:\n{before}")
        # The final states agree too.
        final = [["DBSIZE"], ["KEYS", "*"]] + [["GET", f"k{j}"] for j in range(16)] + [["GET", f"f{j}"] for j in range(4)]
        for cmd in final:
            a = normalize(cmd, clients[0].call(cmd))
            b = normalize(cmd, clients[1].call(cmd))
            assert a == b, f"final state differs at {cmd}: redis-server {a!r}, {tgt.kind} {b!r}"
    finally:
        for cl in clients:
            cl.close()
