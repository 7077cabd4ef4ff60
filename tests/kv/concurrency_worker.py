"""One client process of the concurrency test (test_concurrency.py runs 10 of them).

    python3 concurrency_worker.py SOCKET PROC CONNS ROUNDS

Opens CONNS connections (one thread each), PINGs on each, prints `ready` and waits
for a line on its standard input, so that all processes' connections are open at once
before any writes. Then each thread t, for r in 0..ROUNDS-1: INCR shared:{(PROC+t+r)%4}
(recording the value INCR returned), SET own:{PROC}:{t} r and GET it back (a
connection reads its own write), reads another process's key (absent or a round
number), and SET common {PROC}:{t}:{r}. Prints one JSON line: the INCR replies per
counter and the errors seen (none expected).
"""

import json
import sys
import threading

import redis


def main():
    sock, proc, conns, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    clients = []
    for _ in range(conns):
        c = redis.Redis(unix_socket_path=sock, protocol=3, socket_timeout=60, single_connection_client=True)
        c.ping()
        clients.append(c)
    print("ready", flush=True)
    sys.stdin.readline()
    incrs = {f"shared:{j}": [] for j in range(4)}
    errors = []
    lock = threading.Lock()

    def run(t, c):
        mine = {f"shared:{j}": [] for j in range(4)}
        try:
            for r in range(rounds):
                k = f"shared:{(proc + t + r) % 4}"
                mine[k].append(c.incr(k))
                own = f"own:{proc}:{t}"
                if c.set(own, r) is not True:
                    raise AssertionError(f"SET {own} did not answer OK")
                got = c.get(own)
                if got != str(r).encode():
                    raise AssertionError(f"GET {own} after SET {r} gave {got!r}")
                other = c.get(f"own:{(proc + 1) % 10}:{t}")
                if other is not None and not (other.isdigit() and int(other) < rounds):
                    raise AssertionError(f"another process's key holds {other!r}")
                c.set("common", f"{proc}:{t}:{r}")
        except Exception as e:  # reported, and the test fails on it
            with lock:
                errors.append(f"proc {proc} conn {t}: {e!r}")
        with lock:
            for k, v in mine.items():
                incrs[k] += v

    threads = [threading.Thread(target=run, args=(t, c)) for t, c in enumerate(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    print(json.dumps({"incrs": incrs, "errors": errors}), flush=True)


if __name__ == "__main__":
    main()
