#!/usr/bin/env python3
"""Start-up time of weft-kv with many keys (10 million by default): issue 7's figure.

Fills a fresh server with N keys (`key:%010d` -> `val:%010d`, 14-byte keys and values)
through pipelined MSET batches of raw RESP on the Unix socket (a reader thread counts
the +OK replies while the main thread sends), checks DBSIZE, stops it with SHUTDOWN,
then restarts it on the same directory and measures:
- the wall time from exec to ready (the Unix socket answers PING, the TCP port accepts;
  what a client waits for), polled every 20 ms;
- the server's own figure, its line `recovered N keys from S shards in DIR in X ms`;
- the log files' total size, and the server's VmRSS after the fill and after restart.
Then it checks DBSIZE and a sample of keys, and prints everything (and returns it as
a dict to the pytest test in test_durability.py, run only when `KV_STARTUP_KEYS` is
set).

Run: WEFT_BIN=target/release/weft python3 tests/kv/startup_10m.py [--keys N]
(`--fsync` sets the policy of the fill, default `no`: the figure is about reading the
logs back, not writing them.) Needs about 2 GB of memory at 10 million keys.
"""

import argparse
import glob
import os
import random
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kvserver import Server  # noqa: E402

BATCH = 1000  # keys per MSET


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def mset_batch(lo, hi):
    parts = [b"*%d\r\n$4\r\nMSET\r\n" % (1 + 2 * (hi - lo))]
    for i in range(lo, hi):
        parts.append(b"$14\r\nkey:%010d\r\n$14\r\nval:%010d\r\n" % (i, i))
    return b"".join(parts)


def fill(server, n):
    """N keys through pipelined MSETs; raises if any reply is not +OK."""
    batches = (n + BATCH - 1) // BATCH
    sock = server.raw(timeout=600)
    got = {"ok": 0, "err": None}

    def reader():
        # Every reply is "+OK\r\n" (5 bytes): the count is the bytes received / 5.
        total = 0
        while got["ok"] < batches:
            chunk = sock.recv(1 << 16)
            if not chunk:
                got["err"] = "connection closed during the fill"
                return
            if b"-" in chunk:
                got["err"] = chunk[chunk.index(b"-"):][:200].decode(errors="replace")
                return
            total += len(chunk)
            got["ok"] = total // 5

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    sent = 0
    for b in range(batches):
        lo = b * BATCH
        sock.sendall(mset_batch(lo, min(n, lo + BATCH)))
        sent += 1
        # Keep at most 64 batches in flight.
        while sent - got["ok"] > 64 and got["err"] is None:
            time.sleep(0.001)
        if got["err"]:
            break
    t.join(600)
    sock.close()
    if got["err"] or got["ok"] != batches:
        raise RuntimeError(f"fill failed after {got['ok']} of {batches} batches: {got['err']}")


def log_bytes(server):
    return sum(os.path.getsize(p) for p in glob.glob(os.path.join(server.dir, "shard-*.log")))


def run(n, fsync="no", keep=False, out=print):
    s = Server(fsync=fsync, name="startup")
    res = {"keys": n}
    try:
        s.start()
        t0 = time.monotonic()
        fill(s, n)
        res["fill_s"] = time.monotonic() - t0
        c = s.client(socket_timeout=600)
        assert c.dbsize() == n, f"DBSIZE {c.dbsize()} after filling {n} keys"
        res["rss_filled_mb"] = rss_mb(s.proc.pid)
        res["used_memory_mb"] = c.info("memory")["used_memory"] / 2**20
        try:
            c.shutdown()
        except Exception:  # noqa: BLE001 - the connection closes as it exits
            pass
        assert s.proc.wait(600) == 0, s.log_tail()
        res["log_mb"] = log_bytes(s) / 2**20
        res["shards"] = len(glob.glob(os.path.join(s.dir, "shard-*.log")))
        logsize = os.path.getsize(s.logpath)

        t0 = time.monotonic()
        s.start(timeout=900)
        res["ready_s"] = time.monotonic() - t0
        res["rss_restarted_mb"] = rss_mb(s.proc.pid)
        with open(s.logpath, errors="replace") as f:
            f.seek(logsize)
            text = f.read()
        m = re.search(r"recovered (\d+) keys from (\d+) shards in \S+ in ([\d.]+) ms", text)
        assert m, f"no 'recovered ... keys' line:\n{text}"
        assert "weft-kv: ready" in text, text
        res["recovered_keys"] = int(m.group(1))
        res["recover_ms"] = float(m.group(3))
        assert res["recovered_keys"] == n, res
        c = s.client(socket_timeout=600)
        assert c.dbsize() == n
        rng = random.Random(7)
        sample = [rng.randrange(n) for _ in range(1000)] + [0, n - 1]
        got = c.mget([f"key:{i:010d}" for i in sample])
        assert got == [f"val:{i:010d}".encode() for i in sample], "sampled keys differ after restart"
        s.stop()
    finally:
        if keep:
            s.stop()
            out(f"kept {s.base}")
        else:
            s.cleanup()
    out(f"weft-kv start-up with {n:,} keys ({res['shards']} shards, fill fsync {fsync}):")
    out(f"  fill: {res['fill_s']:.1f} s ({n / res['fill_s']:,.0f} keys/s through pipelined MSET)")
    out(f"  logs: {res['log_mb']:.1f} MiB;  used_memory {res['used_memory_mb']:.0f} MiB;  "
        f"VmRSS filled {res['rss_filled_mb']:.0f} MiB, after restart {res['rss_restarted_mb']:.0f} MiB")
    out(f"  restart: recovered {res['recovered_keys']:,} keys in {res['recover_ms'] / 1000:.2f} s "
        f"(server's figure); exec to ready {res['ready_s']:.2f} s (client's view)")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=int(os.environ.get("KV_STARTUP_KEYS", 10_000_000)))
    ap.add_argument("--fsync", default="no", choices=["always", "everysec", "no"])
    ap.add_argument("--keep", action="store_true", help="keep the data directory")
    a = ap.parse_args()
    if not os.environ.get("WEFT_BIN"):
        sys.exit("set WEFT_BIN to the weft binary (cargo build --release -p weft-cli)")
    os.environ.setdefault("KV_TARGET", "weft")
    run(a.keys, a.fsync, a.keep)


if __name__ == "__main__":
    main()
