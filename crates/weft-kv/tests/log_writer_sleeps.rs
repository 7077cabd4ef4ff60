//! How the log writer tells that a write on the worker slept: one `getrusage` a write
//! while the worker stays busy, a fresh count before the write once it rested.

use std::fs;
use weft_kv::log::{encode, header, recover, DirId, LogId, LogWriter, Record};

const ID: LogId = LogId {
    dir: DirId([9; 16]),
    shard: 0,
    shards: 1,
};

fn record(i: usize) -> Record {
    Record::Set {
        key: format!("k{i}").into_bytes(),
        value: format!("value {i}").into_bytes(),
        expire_at_ms: None,
    }
}

fn frame(rec: &Record) -> Vec<u8> {
    let mut buf = Vec::new();
    encode(&rec.as_ref(), &mut buf);
    buf
}

#[test]
fn back_to_back_writes_read_the_worker_switches_once_each() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("shard-000.log");
    fs::write(&log, header::header(&ID)).unwrap();
    let rt = weft_runtime::Runtime::builder().workers(1).build().unwrap();
    let log2 = log.clone();
    let (recs, busy, rested) = rt.block_on(move || {
        let mut w = LogWriter::open(&log2).unwrap();
        let mut recs = Vec::new();
        // Writes without fsync one after the other: the worker never waits for work
        // between them, so each reads its switches once (the first one twice).
        for i in 0..20 {
            let rec = record(i);
            w.write(&frame(&rec), false).unwrap();
            recs.push(rec);
        }
        let busy = w.stats();
        // The worker rests between these (a sleep parks the only green thread): each
        // write reads its count before the write again.
        for i in 20..25 {
            weft_runtime::sleep(std::time::Duration::from_millis(2));
            let rec = record(i);
            w.write(&frame(&rec), false).unwrap();
            recs.push(rec);
        }
        let all = w.stats();
        (recs, busy, all)
    });
    let mut got = Vec::new();
    let r = recover(&log, |rec| got.push(rec)).unwrap();
    assert_eq!(got, recs);
    assert_eq!(r.torn_bytes, 0);
    assert_eq!(busy.direct + busy.deferred, 20, "{busy:?}");
    // A write that slept sends the next second's writes through io_uring, unwatched;
    // on a quiet disk none sleeps and every write is watched.
    let watched = busy.direct;
    assert!(watched >= 1, "{busy:?}");
    assert!(
        busy.sleep_checks <= watched + 1 + busy.slept,
        "more than one getrusage a busy write: {busy:?}"
    );
    let rested_watched = rested.direct - busy.direct;
    assert_eq!(
        rested.sleep_checks - busy.sleep_checks,
        2 * rested_watched,
        "a write after a rest reads the count before and after it: {rested:?}"
    );
}
