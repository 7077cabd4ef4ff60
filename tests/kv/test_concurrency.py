"""Concurrency: 10 client processes x 20 connections (200 connections open at once)
write and read the same and different keys; the final state is checked exactly.

Every INCR on the 4 shared counters returns a distinct value, and the replies for
each counter are exactly 1..N (no increment lost or doubled: INCR is atomic); each
connection reads its own writes; afterwards every own key holds its last round, each
counter holds its total, `common` (written by all) holds some connection's last
write, and DBSIZE counts exactly these keys. See concurrency_worker.py.
"""

import json
import os
import subprocess
import sys

PROCS, CONNS, ROUNDS = 10, 20, 40
WORKER = os.path.join(os.path.dirname(__file__), "concurrency_worker.py")


def test_200_connections_same_and_different_keys(kv_factory):
    s = kv_factory(fsync="always", name="conc")
    s.start()
    workers = [subprocess.Popen([sys.executable, WORKER, s.sock, str(p), str(CONNS), str(ROUNDS)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for p in range(PROCS)]
    try:
        for w in workers:
            line = w.stdout.readline()
            assert line == "ready\n", f"worker not ready: {line!r} {w.stderr.read() if w.poll() is not None else ''}"
        # All 200 connections are open now (each answered a PING).
        info = s.client().info("clients")
        if "connected_clients" in info:
            assert info["connected_clients"] >= PROCS * CONNS + 1, info
        for w in workers:
            w.stdin.write("go\n")
            w.stdin.flush()
        results = []
        for w in workers:
            out, err = w.communicate(timeout=150)
            assert w.returncode == 0, f"worker failed ({w.returncode}):\n{err}"
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
    errors = [e for r in results for e in r["errors"]]
    assert not errors, "\n".join(errors[:20])

    c = s.client()
    total = 0
    for j in range(4):
        k = f"shared:{j}"
        replies = sorted(v for r in results for v in r["incrs"][k])
        assert replies == list(range(1, len(replies) + 1)), f"{k}: INCR replies are not exactly 1..{len(replies)}"
        assert c.get(k) == str(len(replies)).encode()
        total += len(replies)
    assert total == PROCS * CONNS * ROUNDS
    own = [f"own:{p}:{t}" for p in range(PROCS) for t in range(CONNS)]
    assert c.mget(own) == [str(ROUNDS - 1).encode()] * len(own)
    common = c.get("common").decode()
    assert common.endswith(f":{ROUNDS - 1}"), f"common holds {common!r}, not a connection's last write"
    assert c.dbsize() == 4 + len(own) + 1
    c.close()
