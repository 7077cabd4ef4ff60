//! Crash atomicity of transactions over several shards: writers run MSETs and EXECs
//! that set groups of keys spread over both workers' shards to one value, `kill -9`
//! comes at a random moment under `--fsync always`, the server restarts on the same
//! directory, and every group must hold one transaction's value whole: that of its
//! last acknowledged transaction or of a later one that was in flight, never a mix of
//! two, never part of one, never less than what was acknowledged.
//!
//! Each round, four writers own three groups of eight keys each, and in turn (one
//! transaction in flight per writer at a time) send MSET over a group, an EXEC of eight
//! SETs, or an EXEC of DEL then MSET, with a fresh value each time; half the rounds
//! compact the logs (BGREWRITEAOF) before the kill. The default run is a few rounds
//! (seconds); `WEFT_KV_CRASH_ITERS=N` runs N rounds.

mod common;
#[path = "common/kv.rs"]
mod kv;

use kv::{KvServer, Rng, CEILING};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use weft_kv::client::Client;
use weft_kv::resp::Reply;

const WRITERS: usize = 4;
const GROUPS: u64 = 3;
const KEYS: usize = 8;

/// One transaction sent: its group, its value's number, whether its reply came.
#[derive(Clone, Debug)]
struct Tx {
    group: u64,
    seq: u64,
    acked: bool,
}

fn keys(round: u64, w: usize, group: u64) -> Vec<String> {
    (0..KEYS)
        .map(|i| format!("tx:{round}:{w}:{group}:{i}"))
        .collect()
}

/// Sends transaction `seq` on `group` in one of three forms: its replies' count.
fn send(c: &mut Client, keys: &[String], value: &str, form: u64) -> usize {
    let mut mset: Vec<&[u8]> = vec![b"MSET"];
    for k in keys {
        mset.extend([k.as_bytes(), value.as_bytes()]);
    }
    match form {
        0 => {
            c.send(&mset);
            1
        }
        1 => {
            c.send(&[b"MULTI"]);
            for k in keys {
                c.send(&[b"SET", k.as_bytes(), value.as_bytes()]);
            }
            c.send(&[b"EXEC"]);
            keys.len() + 2
        }
        _ => {
            c.send(&[b"MULTI"]);
            let mut del: Vec<&[u8]> = vec![b"DEL"];
            del.extend(keys.iter().map(|k| k.as_bytes()));
            c.send(&del);
            c.send(&mset);
            c.send(&[b"EXEC"]);
            4
        }
    }
}

fn writer(
    mut c: Client,
    w: usize,
    round: u64,
    mut rng: Rng,
    sent: Arc<Mutex<Vec<Tx>>>,
    acked: Arc<AtomicUsize>,
) {
    for seq in 1.. {
        let group = rng.below(GROUPS);
        let value = format!("{w}:{seq}");
        let n = send(&mut c, &keys(round, w, group), &value, rng.below(3));
        sent.lock().unwrap().push(Tx {
            group,
            seq,
            acked: false,
        });
        if c.flush().is_err() {
            return;
        }
        let mut last = None;
        for _ in 0..n {
            match c.read_reply() {
                Ok(r) => last = Some(r),
                Err(_) => return,
            }
        }
        match last {
            Some(Reply::Array(_)) => {}
            Some(r) if r == Reply::OK => {}
            r => panic!("writer {w}: transaction {seq} answered {r:?}"),
        }
        sent.lock().unwrap().last_mut().unwrap().acked = true;
        acked.fetch_add(1, SeqCst);
    }
}

/// What a group must hold after the crash, from its transactions in order: `None`
/// if all is well, else what is wrong.
fn check(group: &str, txs: &[&Tx], got: &[Reply], w: usize) -> Option<String> {
    let first = &got[0];
    if got.iter().any(|r| r != first) {
        return Some(format!("{group}: part of a transaction, or two: {got:?}"));
    }
    let last_acked = txs.iter().rposition(|t| t.acked);
    let seq = match first {
        Reply::Nil => None,
        Reply::Bulk(b) => {
            let text = String::from_utf8_lossy(b).into_owned();
            let (who, n) = text.split_once(':').expect("writer:seq");
            assert_eq!(who, w.to_string(), "{group}: another writer's value");
            Some(n.parse::<u64>().unwrap())
        }
        r => return Some(format!("{group}: {r:?}")),
    };
    let Some(seq) = seq else {
        return last_acked
            .map(|i| format!("{group}: lost: transaction {} was acknowledged", txs[i].seq));
    };
    let Some(at) = txs.iter().position(|t| t.seq == seq) else {
        return Some(format!("{group}: holds {seq}, never sent to it"));
    };
    match last_acked {
        Some(i) if at < i => Some(format!(
            "{group}: holds {seq}, but {} was acknowledged after it",
            txs[i].seq
        )),
        _ => None,
    }
}

/// One round: writers, a kill, a restart, the check. The server after it, what the
/// check found, whether the restart cut a transaction's last part (its log line), and
/// whether a compaction was published before the kill.
fn round(
    mut server: KvServer,
    dir: &Path,
    round: u64,
    rng: &mut Rng,
) -> (KvServer, Vec<String>, bool, bool) {
    let acked = Arc::new(AtomicUsize::new(0));
    let sent: Vec<Arc<Mutex<Vec<Tx>>>> = (0..WRITERS).map(|_| Arc::default()).collect();
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            let c = server.client().unwrap();
            let (sent, acked) = (sent[w].clone(), acked.clone());
            let r = Rng(rng.next() | 1);
            std::thread::spawn(move || writer(c, w, round, r, sent, acked))
        })
        .collect();
    let kill_after = 20 + rng.below(200) as usize;
    // Half the rounds compact the logs meanwhile: a compaction's tail keeps each part
    // (and the shard's highest id), and the kill may come before, during or after it.
    let mut compact_at = (rng.below(2) == 0).then(|| rng.below(kill_after as u64) as usize);
    let mut admin = server.client().unwrap();
    let deadline = Instant::now() + CEILING;
    while acked.load(SeqCst) < kill_after {
        assert!(Instant::now() < deadline, "the writers made no progress");
        if compact_at.is_some_and(|n| acked.load(SeqCst) >= n) {
            compact_at.take();
            assert!(!admin.command(&[b"BGREWRITEAOF"]).unwrap().is_error());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    std::thread::sleep(Duration::from_micros(rng.below(2000)));
    server.kill9();
    let compacted = server.stderr().contains("log compacted");
    for t in threads {
        t.join().expect("a writer panicked");
    }
    let socket = server.socket.clone();
    drop(server);
    let server = KvServer::weft(dir, &socket, &["--workers", "2", "--fsync", "always"]).unwrap();
    let mut c = server.client().unwrap();
    let mut wrong = Vec::new();
    for (w, list) in sent.iter().enumerate() {
        let list = list.lock().unwrap();
        for g in 0..GROUPS {
            let ks = keys(round, w, g);
            let mut mget: Vec<&[u8]> = vec![b"MGET"];
            mget.extend(ks.iter().map(|k| k.as_bytes()));
            let Reply::Array(got) = c.command(&mget).unwrap() else {
                panic!("MGET answered something else than an array")
            };
            let txs: Vec<&Tx> = list.iter().filter(|t| t.group == g).collect();
            if let Some(e) = check(
                &format!("round {round}, writer {w}, group {g}"),
                &txs,
                &got,
                w,
            ) {
                wrong.push(e);
            }
        }
    }
    let cut = server.stderr().contains("part of transaction");
    (server, wrong, cut, compacted)
}

/// Transactions over both shards survive `kill -9` under `--fsync always` whole or not
/// at all, and every acknowledged one whole.
#[test]
fn transactions_are_whole_after_a_crash() {
    let seed = match std::env::var("WEFT_KV_CRASH_SEED") {
        Ok(s) => s.parse().expect("WEFT_KV_CRASH_SEED is a number"),
        Err(_) => Rng::from_time(),
    };
    let iters: u64 = std::env::var("WEFT_KV_CRASH_ITERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    let mut rng = Rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    let (dir, socket) = (tmp.path().join("data"), tmp.path().join("s"));
    std::fs::create_dir(&dir).unwrap();
    let mut server =
        KvServer::weft(&dir, &socket, &["--workers", "2", "--fsync", "always"]).unwrap();
    let mut wrong = Vec::new();
    let (mut cuts, mut compactions) = (0, 0);
    for r in 0..iters {
        let (next, found, cut, compacted) = round(server, &dir, r, &mut rng);
        server = next;
        wrong.extend(found);
        cuts += cut as usize;
        compactions += compacted as usize;
    }
    common::note(&format!(
        "{iters} rounds; {cuts} restarts cut the last part of a transaction a shard lacked; \
         {compactions} rounds compacted before the kill"
    ));
    assert!(
        wrong.is_empty(),
        "(WEFT_KV_CRASH_SEED={seed}) {} groups wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
