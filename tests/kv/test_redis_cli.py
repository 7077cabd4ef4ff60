"""redis-cli and raw inline commands against the server under test.

redis-cli is run as a user runs it: one-shot commands (`redis-cli -s SOCK SET a 1`),
their output compared with what redis-cli prints for Redis (it prints raw values when
its output is not a terminal; `--no-raw` prints the reply types, `(integer) 2`,
`"1"`, `(nil)`, so a wrong RESP type shows up in the text), commands piped through
its standard input, and an interactive session on a pseudo-terminal (redis-cli then
asks the server `COMMAND DOCS` for its hints). Inline commands (`PING\\r\\n`) go over
a plain socket, as telnet or redis-benchmark's first PING send them.
"""

import os
import pty
import select
import subprocess
import time

import pytest

from conftest import need_tool


def cli(kv, *args, stdin=None, tcp=False, extra=()):
    exe = need_tool("redis-cli")
    where = ["-h", "127.0.0.1", "-p", str(kv.port)] if tcp else ["-s", kv.sock]
    p = subprocess.run([exe, *where, *extra, *args], input=stdin, capture_output=True, timeout=30)
    assert p.returncode == 0, f"redis-cli {args} failed: {p.stderr.decode()}"
    return p.stdout.decode()


@pytest.mark.parametrize("tcp", [False, True], ids=["unix", "tcp"])
def test_one_shot_commands(kv, r, tcp):
    cases = [
        (["SET", "a", "1"], "OK\n"),
        (["GET", "a"], "1\n"),
        (["GET", "nope"], "\n"),
        (["INCR", "a"], "2\n"),
        (["APPEND", "s", "hello world"], "11\n"),
        (["GET", "s"], "hello world\n"),
        (["MSET", "x", "1", "y", "2"], "OK\n"),
        (["MGET", "a", "nope", "x"], "2\n\nx\n".replace("x\n", "1\n")),
        (["EXISTS", "a", "x", "nope"], "2\n"),
        (["TTL", "a"], "-1\n"),
        (["TTL", "nope"], "-2\n"),
        (["TYPE", "a"], "string\n"),
        (["DBSIZE"], "4\n"),
        (["DEL", "a", "x", "nope"], "2\n"),
        (["PING"], "PONG\n"),
        (["ECHO", "two words"], "two words\n"),
        (["GET"], "ERR wrong number of arguments for 'get' command\n\n"),
        (["INCR", "s"], "ERR value is not an integer or out of range\n\n"),
    ]
    for args, want in cases:
        assert cli(kv, *args, tcp=tcp) == want, f"redis-cli {' '.join(args)}"
    out = cli(kv, "NOSUCHCMD", "x", tcp=tcp)
    assert out.startswith("ERR unknown command 'NOSUCHCMD'"), out
    assert sorted(cli(kv, "KEYS", "*", tcp=tcp).split()) == ["s", "y"]


def test_typed_output(kv, r):
    """--no-raw: redis-cli prints each reply's RESP type."""
    r.set("a", "1")
    assert cli(kv, "GET", "a", extra=["--no-raw"]) == '"1"\n'
    assert cli(kv, "INCR", "a", extra=["--no-raw"]) == "(integer) 2\n"
    assert cli(kv, "GET", "nope", extra=["--no-raw"]) == "(nil)\n"
    assert cli(kv, "SET", "b", "x", extra=["--no-raw"]) == "OK\n"
    assert cli(kv, "MGET", "a", "nope", extra=["--no-raw"]) == '1) "2"\n2) (nil)\n'
    assert cli(kv, "GET", extra=["--no-raw"]) == "(error) ERR wrong number of arguments for 'get' command\n"
    # RESP3 (redis-cli -3 sends HELLO 3 first): a double and a null.
    assert cli(kv, "INCRBYFLOAT", "f", "1.5", extra=["-3", "--no-raw"]) == '"1.5"\n'
    assert cli(kv, "GET", "nope", extra=["-3", "--no-raw"]) == "(nil)\n"


def test_commands_through_stdin(kv, r):
    out = cli(kv, stdin=b"SET a 1\nGET a\nINCR a\nSET b \"two words\"\nGET b\nGET nope\nNOSUCH\nPING\n")
    lines = out.split("\n")
    assert lines[:6] == ["OK", "1", "2", "OK", "two words", ""], out
    assert lines[6].startswith("ERR unknown command 'NOSUCH'"), out
    assert "PONG" in lines[7:], out


def test_interactive_session_on_a_terminal(kv, r):
    """redis-cli on a pseudo-terminal: the prompt, typed commands and typed replies."""
    exe = need_tool("redis-cli")
    master, slave = pty.openpty()
    p = subprocess.Popen([exe, "-s", kv.sock], stdin=slave, stdout=slave, stderr=slave,
                         start_new_session=True, env={**os.environ, "TERM": "dumb", "HOME": kv.base})
    os.close(slave)
    buf = b""

    def expect(what, timeout=60):
        nonlocal buf
        deadline = time.monotonic() + timeout
        while what not in buf:
            left = deadline - time.monotonic()
            assert left > 0, f"redis-cli never printed {what!r}; the terminal shows:\n{buf.decode(errors='replace')}"
            if select.select([master], [], [], left)[0]:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    chunk = b""
                assert chunk, f"redis-cli ended before printing {what!r}:\n{buf.decode(errors='replace')}"
                buf += chunk
        i = buf.index(what) + len(what)
        buf = buf[i:]

    try:
        expect(b"> ")
        os.write(master, b"SET greeting hello\r")
        expect(b"OK")
        os.write(master, b"GET greeting\r")
        expect(b'"hello"')
        os.write(master, b"INCR counter\r")
        expect(b"(integer) 1")
        os.write(master, b"GET nope\r")
        expect(b"(nil)")
        os.write(master, b"quit\r")
        assert p.wait(60) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
    assert r.get("greeting") == b"hello"


def reply(s, data, want):
    """Send `data`, read until as many bytes as `want` came (or the peer stopped)."""
    s.sendall(data)
    out = b""
    while len(out) < len(want):
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    return out


def test_inline_commands(kv, r):
    s = kv.raw()

    def assert_reply(s, data, want):
        got = reply(s, data, want)
        assert got == want, f"sent {data!r}: want {want!r}, got {got!r}"

    try:
        assert_reply(s, b"PING\r\n", b"+PONG\r\n")
        assert_reply(s, b'SET k "a b"\r\n', b"+OK\r\n")
        assert_reply(s, b"GET k\r\n", b"$3\r\na b\r\n")
        assert_reply(s, b"SET q 'x y z'\r\n", b"+OK\r\n")
        assert_reply(s, b"STRLEN q\r\n", b":5\r\n")
        assert_reply(s, b"INCR n\n", b":1\r\n")  # a bare \n ends a line too
        # Pipelined inline commands in one write.
        assert_reply(s, b"INCR n\r\nINCR n\r\nGET n\r\n", b":2\r\n:3\r\n$1\r\n3\r\n")
        # Inline and multibulk mix on one connection.
        assert_reply(s, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nECHO hi\r\n", b"$3\r\na b\r\n$2\r\nhi\r\n")
    finally:
        s.close()
