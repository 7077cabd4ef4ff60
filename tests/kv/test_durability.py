"""Durability at the server level: a full disk, compaction, and recovery of damaged logs.

All of it is weft-kv's own machinery (its log files, `weft kv check`, its log lines),
so these tests run against weft-kv only and are skipped for `KV_TARGET=redis`.

- **ENOSPC** (root only: it mounts a 2 MiB tmpfs as the data directory): with
  `--fsync always`, a filler file leaves little space; writes go on until one gets
  `MISCONF` naming the cause; while full, reads answer the value or `MISCONF` (reads
  of keys untouched by the failed writes just work: a read waits only for the records
  of what it read) and bigger writes are refused with `MISCONF`; once the filler is deleted, writes succeed again without a restart; after
  SHUTDOWN and a restart every write that got OK is there, and each write that got
  MISCONF (whose outcome the design leaves unknown) is absent or holds its value.
- **Compaction**: BGREWRITEAOF while 4 clients write; the log shrinks (many
  overwrites), then after kill -9 and a restart every key holds its writer's last
  acknowledged value and a shared INCR counter the number of acknowledged INCRs.
  Automatic compaction after `CONFIG SET auto-aof-rewrite-min-size 100000` and
  `auto-aof-rewrite-percentage 100`. A leftover `shard-000.log.rewrite` is removed at
  start, data intact.
- **Recovery**: garbage appended to a log, or its last record cut short, is a torn
  tail: the server starts, says "torn tail" and how many bytes, and keeps every record
  before it. A byte flipped in the middle stops start-up with a message naming the
  file, the offset and `weft kv check --repair`; `weft kv check` exits 1 naming them;
  `weft kv check --repair` keeps a backup and exits 0; the server then starts with
  exactly the records before the damaged one.

Recovery tests use `--workers 1` (one shard, so records sit in the log in the order
they were written and the damaged record's position tells which keys precede it).
"""

import glob
import os
import re
import subprocess
import threading
import time

import pytest
import redis

from kvserver import target

pytestmark = pytest.mark.skipif(target() != "weft", reason="weft-kv's log files and `weft kv check`: weft-kv only")


def info(c, section="persistence"):
    return c.info(section)


def shutdown(s, c):
    try:
        c.shutdown()
    except redis.ConnectionError:
        pass
    assert s.proc.wait(20) == 0, s.log_tail()


def weft(*args, timeout=60):
    return subprocess.run([os.environ["WEFT_BIN"], *args], capture_output=True, text=True, timeout=timeout)


# ---- ENOSPC ---------------------------------------------------------------------------


@pytest.fixture
def tmpfs_server(kv_factory):
    """A weft-kv server (`--fsync always`) whose data directory is a fresh 2 MiB tmpfs."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    s = kv_factory(fsync="always", name="enospc")
    os.makedirs(s.dir, mode=0o700)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", s.dir],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield s.start()
    finally:
        s.kill9()
        subprocess.run(["umount", s.dir], check=False)


def fill_until_misconf(s, c, acked, misconf):
    """Writes 20 small keys, fills the file system but ~48 KiB with a filler file, then
    writes 4 KB values until one is refused; returns (filler path, the error)."""
    for i in range(20):
        assert c.set(f"pre:{i}", f"v{i}") is True
        acked[f"pre:{i}"] = f"v{i}".encode()
    st = os.statvfs(s.dir)
    filler = os.path.join(s.dir, "filler")
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - 48 * 1024))
    value = b"x" * 4000
    for i in range(200):
        k = f"fill:{i}"
        try:
            assert c.set(k, value) is True
            acked[k] = value
        except redis.ResponseError as e:
            misconf[k] = value
            return filler, str(e)
    raise AssertionError("200 writes of 4 KB on a full 2 MiB tmpfs all got OK")


def test_enospc_refuses_writes_then_resumes(tmpfs_server):
    s = tmpfs_server
    c = s.client(no_retry=True)
    acked, misconf = {}, {}
    filler, first_error = fill_until_misconf(s, c, acked, misconf)
    assert first_error.startswith("MISCONF Errors writing to the append only file"), first_error
    assert "No space left on device" in first_error and "shard-" in first_error, first_error
    # While full, a read answers the acknowledged value or MISCONF, never anything else
    # (weft-kv answers MISCONF to a read on a shard holding unwritten records: see
    # test_enospc_reads_of_untouched_keys_still_work).
    for k in ("pre:0", "pre:1", "pre:2", "pre:19"):
        try:
            assert c.get(k) == acked[k]
        except redis.ResponseError as e:
            assert str(e).startswith("MISCONF "), str(e)
    # Writes that need space are refused with MISCONF while full.
    big = b"y" * 16000
    for i in range(10):
        k = f"full:{i}"
        with pytest.raises(redis.ResponseError) as ei:
            c.set(k, big)
        misconf[k] = big
        assert str(ei.value).startswith("MISCONF "), str(ei.value)
    assert info(c)["aof_last_write_status"] == "err"
    # Space returns: writes succeed again, without a restart.
    os.unlink(filler)
    deadline = time.monotonic() + 60
    while True:
        try:
            assert c.set("after", "space") is True
            acked["after"] = b"space"
            break
        except redis.ResponseError as e:
            assert str(e).startswith("MISCONF "), str(e)
            if time.monotonic() > deadline:
                raise AssertionError(f"writes still refused 60 s after the space returned: {e}\n{s.log_tail()}")
            time.sleep(0.05)
    for i in range(50):
        assert c.set(f"post:{i}", f"p{i}") is True
        acked[f"post:{i}"] = f"p{i}".encode()
    keys = list(acked)
    assert c.mget(keys) == [acked[k] for k in keys]
    assert info(c)["aof_last_write_status"] == "ok"
    shutdown(s, c)
    chk = weft("kv", "check", "--dir", s.dir)
    assert chk.returncode == 0, chk.stdout + chk.stderr
    s.start()
    c = s.client(no_retry=True)
    for k, v in zip(keys, c.mget(keys)):
        assert v == acked[k], f"{k}: acknowledged {acked[k][:20]!r}, after restart {v and v[:20]!r}"
    for k, want in misconf.items():
        v = c.get(k)
        assert v is None or v == want, f"{k} (answered MISCONF) holds {v[:20]!r}"
    assert c.set("last", "1") is True
    assert s.stop() == 0


def test_enospc_reads_of_untouched_keys_still_work(tmpfs_server):
    s = tmpfs_server
    c = s.client(no_retry=True)
    acked, misconf = {}, {}
    fill_until_misconf(s, c, acked, misconf)
    # pre:* were written and acknowledged before the disk filled: reading them shows
    # nothing a crash could take back.
    keys = [f"pre:{i}" for i in range(20)]
    assert [c.get(k) for k in keys] == [acked[k] for k in keys]


# ---- compaction ---------------------------------------------------------------------


class Writer(threading.Thread):
    """Overwrites its own keys `c{i}:{k}` with increasing values and INCRs a shared
    counter; records the last acknowledged value of each key and the INCRs acked."""

    def __init__(self, server, i, keys=50):
        super().__init__(daemon=True)
        self.server, self.i, self.keys = server, i, keys
        self.last = {}
        self.incrs = 0
        self.stop = threading.Event()
        self.error = None

    def run(self):
        try:
            c = self.server.client(no_retry=True)
            n = 0
            while not self.stop.is_set():
                k = f"c{self.i}:{n % self.keys}"
                assert c.set(k, n) is True
                self.last[k] = str(n).encode()
                c.incr("shared")
                self.incrs += 1
                n += 1
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.error = repr(e)


def wait_writers(writers, incrs, timeout=120):
    """Waits until every writer has acknowledged at least `incrs(w)` INCRs."""
    deadline = time.monotonic() + timeout
    while any(w.incrs < incrs(w) for w in writers):
        for w in writers:
            assert w.error is None, w.error
        assert time.monotonic() < deadline, f"writers stalled: {[w.incrs for w in writers]}"
        time.sleep(0.01)


def wait_rewrite_done(c, base_before, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = info(c)
        if p["aof_rewrite_in_progress"] == 0 and p["aof_base_size"] != base_before:
            return p
        time.sleep(0.02)
    raise AssertionError(f"compaction did not finish within {timeout}s: {info(c)}")


def test_bgrewriteaof_under_writers_then_kill9(kv_factory):
    s = kv_factory(fsync="always", name="compact").start()
    c = s.client(no_retry=True)
    # Many overwrites of a few keys: the log is mostly dead records.
    with c.pipeline(transaction=False) as p:
        for n in range(20000):
            p.set(f"c{n % 4}:{n % 50}", "old" * 10)
        assert all(x is True for x in p.execute())
    before = info(c)
    writers = [Writer(s, i) for i in range(4)]
    for w in writers:
        w.start()
    # Every writer writes before, during and after the compaction: wait for each one's
    # progress (however slow a busy machine makes it), not for a time.
    wait_writers(writers, lambda w: 50)
    assert c.bgrewriteaof()
    after = wait_rewrite_done(c, before["aof_base_size"], timeout=120)
    at_compaction = {w: w.incrs for w in writers}
    wait_writers(writers, lambda w: at_compaction[w] + 50)
    for w in writers:
        w.stop.set()
    for w in writers:
        w.join(60)
        assert w.error is None, w.error
    # The compacted base holds the live keys only: far below the log it replaced, however
    # much the writers appended while the compaction ran.
    assert after["aof_base_size"] < before["aof_current_size"] / 2, (before, after)
    s.kill9()
    s.start()
    c = s.client(no_retry=True)
    want = {}
    for w in writers:
        want.update(w.last)
    keys = sorted(want)
    got = dict(zip(keys, c.mget(keys)))
    bad = {k: (want[k], got[k]) for k in keys if got[k] != want[k]}
    assert not bad, f"{len(bad)} keys differ from their last acknowledged value, e.g. {list(bad.items())[:5]}"
    assert c.get("shared") == str(sum(w.incrs for w in writers)).encode()
    assert c.dbsize() == 4 * 50 + 1


def test_automatic_compaction(kv_factory):
    s = kv_factory(fsync="everysec", name="autocomp").start()
    c = s.client(no_retry=True)
    assert c.config_set("auto-aof-rewrite-min-size", 100000)
    assert c.config_set("auto-aof-rewrite-percentage", 100)
    base0 = info(c)["aof_base_size"]
    value = "v" * 100
    last = {}
    compacted = None
    n = 0
    for batch in range(400):
        with c.pipeline(transaction=False) as p:
            for _ in range(200):
                k = f"auto:{n % 20}"
                last[k] = f"{n}:{value}".encode()
                p.set(k, last[k])
                n += 1
            p.execute()
        pi = info(c)
        if pi["aof_base_size"] != base0 and pi["aof_rewrite_in_progress"] == 0:
            compacted = pi
            break
    assert compacted is not None, f"no automatic compaction after {n} overwrites: {info(c)}"
    # 20 live keys of ~110 bytes: the compacted log is far below the threshold.
    assert compacted["aof_base_size"] < 100000, compacted
    s.stop()
    s.start()
    c = s.client(no_retry=True)
    keys = sorted(last)
    assert c.mget(keys) == [last[k] for k in keys]
    assert c.dbsize() == 20


def test_leftover_rewrite_file_removed_at_start(kv_factory):
    s = kv_factory(fsync="always", name="leftover").start()
    c = s.client(no_retry=True)  # redis-py retries after SHUTDOWN closes, for seconds
    c.mset({f"l{i}": i for i in range(100)})
    shutdown(s, c)
    leftover = os.path.join(s.dir, "shard-000.log.rewrite")
    with open(leftover, "wb") as f:
        f.write(b"half a compaction" * 100)
    s.start()
    assert not os.path.exists(leftover), f"{leftover} still there after start\n{s.log_tail()}"
    assert f"removed {leftover}, left by a compaction that did not finish" in open(s.logpath).read(), s.log_tail()
    c = s.client()
    assert c.mget([f"l{i}" for i in range(100)]) == [str(i).encode() for i in range(100)]
    assert c.dbsize() == 100


# ---- recovery -------------------------------------------------------------------------


N_REC = 400


def one_shard_with_records(kv_factory, name):
    """A stopped one-shard server whose log holds N_REC equal-size SET records
    `r0000`..`r0399`; returns (server, log path, header length, record size)."""
    s = kv_factory(fsync="always", name=name, weft_args=["--workers", "1"]).start()
    s.stop()
    logs = glob.glob(os.path.join(s.dir, "shard-*.log"))
    assert [os.path.basename(p) for p in logs] == ["shard-000.log"], logs
    log = logs[0]
    empty = os.path.getsize(log)
    s.start()
    c = s.client()
    for i in range(N_REC):
        assert c.set(f"r{i:04}", f"value-{i:04}") is True
    s.stop()
    size = os.path.getsize(log)
    assert (size - empty) % N_REC == 0, (size, empty)
    return s, log, empty, (size - empty) // N_REC


def expect_prefix(s, m):
    """The server holds exactly records 0..m-1."""
    c = s.client()
    keys = [f"r{i:04}" for i in range(N_REC)]
    got = c.mget(keys)
    want = [f"value-{i:04}".encode() if i < m else None for i in range(N_REC)]
    assert got == want, f"expected the first {m} records, got {sum(v is not None for v in got)}"
    assert c.dbsize() == m


def test_garbage_after_the_last_record_is_a_torn_tail(kv_factory):
    s, log, _, _ = one_shard_with_records(kv_factory, "garbage")
    size = os.path.getsize(log)
    with open(log, "ab") as f:
        f.write(bytes(range(7, 44)))  # 37 bytes that are no frame
    s.start()
    text = open(s.logpath, errors="replace").read()
    m = re.search(r"shard-000\.log: cut a torn tail of (\d+) bytes at offset (\d+)", text)
    assert m and "torn tail" in text, s.log_tail()
    assert (int(m.group(1)), int(m.group(2))) == (37, size)
    assert os.path.getsize(log) == size
    expect_prefix(s, N_REC)


def test_last_record_cut_short_is_a_torn_tail(kv_factory):
    s, log, _, rec = one_shard_with_records(kv_factory, "cut")
    size = os.path.getsize(log)
    os.truncate(log, size - 3)
    s.start()
    text = open(s.logpath, errors="replace").read()
    assert f"cut a torn tail of {rec - 3} bytes at offset {size - rec}" in text, s.log_tail()
    expect_prefix(s, N_REC - 1)
    # The log goes on after the cut.
    c = s.client()
    assert c.set("r0399", "value-0399") is True
    s.stop()
    s.start()
    expect_prefix(s, N_REC)


def test_flipped_byte_in_the_middle_stops_start_until_repaired(kv_factory):
    s, log, empty, rec = one_shard_with_records(kv_factory, "flip")
    size = os.path.getsize(log)
    flip = empty + 150 * rec + rec // 2  # inside record 150's payload
    with open(log, "r+b") as f:
        f.seek(flip)
        b = f.read(1)
        f.seek(flip)
        f.write(bytes([b[0] ^ 0x20]))
    bad_at = empty + 150 * rec

    # The server refuses to start, naming the file, the offset and the repair command.
    p = subprocess.run(s.argv(), capture_output=True, text=True, timeout=60)
    assert p.returncode != 0, p.stderr
    assert log in p.stderr and f"offset {bad_at}" in p.stderr, p.stderr
    assert "weft kv check --repair" in p.stderr, p.stderr
    assert os.path.getsize(log) == size, "a failed start changed the log"

    chk = weft("kv", "check", "--dir", s.dir)
    assert chk.returncode == 1, chk.stdout + chk.stderr
    assert "shard-000.log" in chk.stdout and str(bad_at) in chk.stdout, chk.stdout

    rep = weft("kv", "check", "--repair", "--dir", s.dir)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    backups = glob.glob(log + ".corrupt-*")
    assert len(backups) == 1, os.listdir(s.dir)
    with open(backups[0], "rb") as f:
        assert len(f.read()) == size  # the whole damaged log, kept
    assert os.path.getsize(log) == bad_at

    chk = weft("kv", "check", "--dir", s.dir)
    assert chk.returncode == 0, chk.stdout + chk.stderr

    s.start()
    expect_prefix(s, 150)


# ---- start-up time with many keys (only when KV_STARTUP_KEYS is set) ---------------------


@pytest.mark.skipif(not os.environ.get("KV_STARTUP_KEYS"),
                    reason="start-up time with many keys: set KV_STARTUP_KEYS=N (see startup_10m.py)")
def test_startup_with_many_keys():
    import startup_10m

    n = int(os.environ["KV_STARTUP_KEYS"])
    res = startup_10m.run(n)
    assert res["recovered_keys"] == n
