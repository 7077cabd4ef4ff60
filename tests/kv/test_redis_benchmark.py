"""redis-benchmark smoke test: `-t set,get` completes against the server under test,
without and with pipelining (-P 16), on the Unix socket and TCP, and prints a
requests-per-second figure for both SET and GET. redis-benchmark first sends
CONFIG GET save / CONFIG GET appendonly and an inline PING, so those must work too.
No figure is compared with anything (no timing assertions): `weft bench kv` does that.
"""

import re
import subprocess

import pytest

from conftest import need_tool

LINE = re.compile(r"^\s*(SET|GET): ([0-9.]+) requests per second")


@pytest.mark.parametrize("pipeline", [1, 16], ids=["P1", "P16"])
@pytest.mark.parametrize("tcp", [False, True], ids=["unix", "tcp"])
def test_benchmark_set_get(kv, r, pipeline, tcp):
    exe = need_tool("redis-benchmark")
    where = ["-h", "127.0.0.1", "-p", str(kv.port)] if tcp else ["-s", kv.sock]
    p = subprocess.run([exe, *where, "-t", "set,get", "-n", "2000", "-c", "20", "-q", "-P", str(pipeline)],
                       capture_output=True, timeout=120)
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 0, f"redis-benchmark failed ({p.returncode}):\n{out}\n{p.stderr.decode()}"
    rps = {}
    for line in re.split(r"[\r\n]", out):
        m = LINE.match(line)
        if m:
            rps[m.group(1)] = float(m.group(2))
    assert set(rps) == {"SET", "GET"}, f"no requests-per-second line for both SET and GET:\n{out}"
    assert all(v > 0 for v in rps.values()), out
    # What the SETs stored: redis-benchmark's fixed key and a 3-byte value (-d 3).
    v = r.get("key:__rand_int__")
    assert v is not None and len(v) == 3, v
