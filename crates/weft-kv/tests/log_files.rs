//! The shard log's files: recovery (torn tails at every byte offset, corruption in the
//! middle, a damaged last record), `check --repair`, the data directory's lock and
//! manifest, a directory that must prove it is whole (a log missing, emptied, from
//! another directory or shard, one too many, no manifest, an edited shard count), the
//! upgrade of format 1 directories, a check that changes nothing, compaction's publish
//! and abort, write errors (ENOSPC on a tiny tmpfs, when root), and the writer on a
//! green thread and on a plain thread.

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use weft_kv::log::{
    check, encode, recover, DataDir, DirId, LogId, LogWriter, Record, RecoverError, Rewriter,
    ShardState, HEADER_LEN,
};

fn set(key: &str, value: &[u8]) -> Record {
    Record::Set {
        key: key.as_bytes().to_vec(),
        value: value.to_vec(),
        expire_at_ms: None,
    }
}

/// A few records of various kinds and sizes.
fn sample() -> Vec<Record> {
    vec![
        set("a", b"1"),
        set("bb", &[7u8; 40]),
        Record::Expire {
            key: b"a".to_vec(),
            at_ms: Some(1_700_000_000_000),
        },
        Record::Del {
            key: b"bb".to_vec(),
        },
        Record::Flush,
        set("last", b"the end"),
    ]
}

/// The identity the standalone logs of these tests carry (recovery reads any; the
/// data directory checks it).
const ID: LogId = LogId {
    dir: DirId([5; 16]),
    shard: 0,
    shards: 1,
};

/// A whole log's bytes for `recs`, and each frame's end offset.
fn log_bytes(recs: &[Record]) -> (Vec<u8>, Vec<usize>) {
    log_bytes_of(&ID, recs)
}

/// [`log_bytes`] with `id`'s header.
fn log_bytes_of(id: &LogId, recs: &[Record]) -> (Vec<u8>, Vec<usize>) {
    let mut out = weft_kv::log::header::header(id).to_vec();
    let mut ends = Vec::new();
    for r in recs {
        encode(&r.as_ref(), &mut out);
        ends.push(out.len());
    }
    (out, ends)
}

fn recover_all(path: &Path) -> Result<(Vec<Record>, weft_kv::log::Recovered), RecoverError> {
    let mut got = Vec::new();
    let r = recover(path, |rec| got.push(rec))?;
    Ok((got, r))
}

/// Writes `recs` as a log cut at every byte offset past its header; for each cut,
/// checks that recovery gives back exactly the records whole before it, replays them
/// into a fresh keyspace and hands `check` the cut, how many records were whole, and
/// that keyspace.
fn for_each_torn_replay(
    recs: &[Record],
    mut check: impl FnMut(usize, usize, &weft_kv::keyspace::Keyspace),
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shard-000.log");
    let (bytes, ends) = log_bytes(recs);
    for cut in HEADER_LEN..=bytes.len() {
        fs::write(&path, &bytes[..cut]).unwrap();
        let (got, _) = recover_all(&path).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let whole = ends.iter().filter(|&&e| e <= cut).count();
        assert_eq!(got, &recs[..whole], "cut at {cut}");
        let mut ks = weft_kv::keyspace::Keyspace::new();
        for r in &got {
            ks.apply(r.as_ref(), 0);
        }
        check(cut, whole, &ks);
    }
}

#[test]
fn torn_at_every_byte_offset() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shard-000.log");
    let recs = sample();
    let (bytes, ends) = log_bytes(&recs);
    for cut in 0..=bytes.len() {
        fs::write(&path, &bytes[..cut]).unwrap();
        if cut < HEADER_LEN {
            // A header cut short: no log to read (the data directory refuses such a
            // file before recovery; see `an_emptied_log_stops_the_start`).
            match recover_all(&path) {
                Err(RecoverError::Header { reason, .. }) => {
                    assert!(
                        reason.contains("part of a header"),
                        "cut at {cut}: {reason}"
                    )
                }
                other => panic!("cut at {cut}: {other:?}"),
            }
            assert_eq!(fs::read(&path).unwrap(), &bytes[..cut], "unchanged");
            continue;
        }
        let (got, r) = recover_all(&path).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let whole = ends.iter().filter(|&&e| e <= cut).count();
        let good_end = if whole == 0 {
            HEADER_LEN
        } else {
            ends[whole - 1]
        };
        assert_eq!(got, &recs[..whole], "cut at {cut}");
        assert_eq!(r.records, whole as u64);
        assert_eq!(r.bytes, good_end as u64, "cut at {cut}");
        assert_eq!(r.torn_bytes, (cut - good_end) as u64, "cut at {cut}");
        assert_eq!(
            fs::read(&path).unwrap(),
            &bytes[..good_end],
            "cut at {cut}: file after"
        );
        // A second recovery is clean.
        let (again, r2) = recover_all(&path).unwrap();
        assert_eq!(again, &recs[..whole]);
        assert_eq!(r2.torn_bytes, 0);
        assert_eq!(r2.bytes, good_end as u64);
    }
}

#[test]
fn a_new_directory_has_every_log_with_its_header() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let d = DataDir::open(&dir, 3).unwrap();
    for shard in 0..3 {
        let want = LogId {
            dir: d.id(),
            shard: shard as u32,
            shards: 3,
        };
        assert_eq!(d.log_id(shard), want);
        let path = d.log_path(shard);
        assert_eq!(
            fs::read(&path).unwrap(),
            weft_kv::log::header::header(&want)
        );
        let (got, r) = recover_all(&path).unwrap();
        assert!(got.is_empty() && r.bytes == HEADER_LEN as u64 && r.torn_bytes == 0);
    }
    let meta = fs::read_to_string(dir.join("weft-kv.meta")).unwrap();
    assert_eq!(
        meta,
        format!(
            "weft-kv data directory\nformat 3\nid {}\nshards 3\nlog shard-000.log\n\
             log shard-001.log\nlog shard-002.log\n",
            d.id()
        )
    );
    // Recovery does not make up a log that is not there.
    let e = recover_all(&tmp.path().join("nothing.log")).unwrap_err();
    assert!(matches!(e, RecoverError::Io { .. }), "{e}");
}

#[test]
fn flipped_bit_in_a_middle_frame_is_corruption_and_the_file_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shard-000.log");
    let recs = sample();
    let (bytes, ends) = log_bytes(&recs);
    // Every byte of the second frame, length and checksum fields included.
    let (start, end) = (ends[0], ends[1]);
    for i in start..end {
        for bit in [0x01u8, 0x10, 0x80] {
            let mut bad = bytes.clone();
            bad[i] ^= bit;
            fs::write(&path, &bad).unwrap();
            match recover_all(&path) {
                Err(RecoverError::Corrupt {
                    offset,
                    next_valid,
                    path: p,
                    ..
                }) => {
                    assert_eq!(offset, start as u64, "flip {bit:#x} at {i}");
                    assert!(next_valid > offset);
                    assert_eq!(p, path);
                }
                Err(e) => panic!("flip {bit:#x} at {i}: {e}"),
                Ok((_, r)) => panic!("flip {bit:#x} at {i}: recovered {r:?}"),
            }
            assert_eq!(
                fs::read(&path).unwrap(),
                bad,
                "flip at {i}: the file was changed"
            );
        }
    }
    // The message names file and offset and says what to do.
    let mut bad = bytes.clone();
    bad[start + 10] ^= 0x04;
    fs::write(&path, &bad).unwrap();
    let msg = recover_all(&path).unwrap_err().to_string();
    assert!(msg.contains("shard-000.log"), "{msg}");
    assert!(msg.contains(&format!("offset {start}")), "{msg}");
    assert!(
        msg.contains(&format!(
            "weft kv check --repair --dir {}",
            dir.path().display()
        )),
        "{msg}"
    );
}

/// A flipped bit anywhere in the last frame (its length, its checksum, its payload)
/// leaves a whole frame that is damaged: no crash writes that, and the record may have
/// been acknowledged (under `fsync always` it was), so recovery refuses with the file,
/// the offset and the repair command, and changes nothing. (It used to cut it as a torn
/// tail, "never acknowledged".)
#[test]
fn flipped_bit_in_the_last_frame_is_damage_not_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shard-000.log");
    let recs = sample();
    let (bytes, ends) = log_bytes(&recs);
    let start = ends[ends.len() - 2];
    for i in start..bytes.len() {
        for bit in [0x01u8, 0x20, 0x80] {
            let mut bad = bytes.clone();
            bad[i] ^= bit;
            fs::write(&path, &bad).unwrap();
            match recover_all(&path) {
                Err(RecoverError::DamagedTail {
                    offset, file_len, ..
                }) => {
                    assert_eq!(offset, start as u64, "flip {bit:#x} at {i}");
                    assert_eq!(file_len, bytes.len() as u64);
                }
                other => panic!("flip {bit:#x} at {i}: {other:?}"),
            }
            assert_eq!(fs::read(&path).unwrap(), bad, "flip at {i}: unchanged");
        }
    }
    let mut bad = bytes.clone();
    bad[bytes.len() - 3] ^= 0x04;
    fs::write(&path, &bad).unwrap();
    let msg = recover_all(&path).unwrap_err().to_string();
    for want in [
        path.display().to_string(),
        format!("the last record, at offset {start}, is damaged"),
        "may have been acknowledged".into(),
        format!("weft kv check --repair --dir {}", dir.path().display()),
    ] {
        assert!(msg.contains(&want), "{want:?} not in: {msg}");
    }
    assert!(!msg.contains("never acknowledged"), "{msg}");
    // check reports it as such, and --repair cuts it (with a backup).
    let tmp = tempfile::tempdir().unwrap();
    let d = DataDir::open(tmp.path(), 1).unwrap();
    let (bytes, ends) = log_bytes_of(&d.log_id(0), &recs);
    let start = ends[ends.len() - 2];
    let mut bad = bytes.clone();
    bad[bytes.len() - 3] ^= 0x04;
    fs::write(d.log_path(0), &bad).unwrap();
    drop(d);
    let report = check(tmp.path(), false).unwrap();
    assert!(
        matches!(
            &report.shards[0].state,
            ShardState::DamagedTail { offset, lost_bytes, .. }
                if *offset == start as u64 && *lost_bytes == (bytes.len() - start) as u64
        ),
        "{report:?}"
    );
    assert!(!report.usable());
    let text = report.to_string();
    assert!(text.contains("may have been acknowledged"), "{text}");
    assert!(text.contains("--repair"), "{text}");
    let report = check(tmp.path(), true).unwrap();
    assert!(report.usable(), "{report}");
    let d = DataDir::open(tmp.path(), 1).unwrap();
    let (got, r) = recover_all(&d.log_path(0)).unwrap();
    assert_eq!(got, &recs[..recs.len() - 1]);
    assert_eq!(r.torn_bytes, 0);
}

#[test]
fn a_length_past_the_end_is_torn_only_when_nothing_valid_follows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shard-000.log");
    let recs = sample();
    let (bytes, ends) = log_bytes(&recs);
    // In the middle: the length now points far past the end of the file.
    let mut bad = bytes.clone();
    bad[ends[1] + 2] ^= 0x01; // +65536
    fs::write(&path, &bad).unwrap();
    match recover_all(&path) {
        Err(RecoverError::Corrupt { offset, .. }) => assert_eq!(offset, ends[1] as u64),
        other => panic!("{other:?}"),
    }
    assert_eq!(fs::read(&path).unwrap(), bad);
    // In the last frame, whole (its checksum matches what is there): damage.
    let last = ends[ends.len() - 2];
    let mut bad = bytes.clone();
    bad[last + 2] ^= 0x01;
    fs::write(&path, &bad).unwrap();
    assert!(matches!(
        recover_all(&path),
        Err(RecoverError::DamagedTail { .. })
    ));
    // In the last frame, cut short by the end of the file: torn.
    let cut = &bytes[..bytes.len() - 2];
    fs::write(&path, cut).unwrap();
    let (got, r) = recover_all(&path).unwrap();
    assert_eq!(got.len(), recs.len() - 1);
    assert_eq!(r.torn_bytes, (cut.len() - last) as u64);
}

#[test]
fn zeros_after_the_last_frame_are_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shard-000.log");
    let (mut bytes, ends) = log_bytes(&sample());
    bytes.extend_from_slice(&[0u8; 4096]);
    fs::write(&path, &bytes).unwrap();
    let (got, r) = recover_all(&path).unwrap();
    assert_eq!(got, sample());
    assert_eq!(
        (r.bytes, r.torn_bytes),
        (*ends.last().unwrap() as u64, 4096)
    );
}

#[test]
fn bad_header_is_an_error_and_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shard-000.log");
    let (mut bytes, _) = log_bytes(&sample());
    bytes[2] = b'X';
    fs::write(&path, &bytes).unwrap();
    let e = recover_all(&path).unwrap_err();
    assert!(matches!(e, RecoverError::Header { .. }), "{e}");
    assert!(e.to_string().contains("not a weft-kv log"), "{e}");
    assert_eq!(fs::read(&path).unwrap(), bytes);
    fs::write(&path, b"some text file that is not a log at all").unwrap();
    assert!(matches!(
        recover_all(&path),
        Err(RecoverError::Header { .. })
    ));
}

#[test]
fn big_log_streams_through_the_window() {
    // Records larger than the reader's chunk, and many small ones across chunk edges.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shard-000.log");
    let mut recs = Vec::new();
    for i in 0..3000 {
        recs.push(set(&format!("k{i}"), &vec![(i % 256) as u8; i % 300]));
    }
    recs.push(set("huge", &vec![9u8; 700 * 1024]));
    recs.push(set("after", b"x"));
    let (bytes, _) = log_bytes(&recs);
    fs::write(&path, &bytes).unwrap();
    let (got, r) = recover_all(&path).unwrap();
    assert_eq!(got, recs);
    assert_eq!(r.bytes, bytes.len() as u64);
}

/// The identity of shard `shard` of the data directory `dir` (opened and closed).
fn id_of(dir: &Path, shard: usize) -> LogId {
    DataDir::open(dir, 1).unwrap().log_id(shard)
}

fn write_shard(dir: &Path, shard: usize, bytes: &[u8]) -> PathBuf {
    let p = dir.join(format!("shard-{shard:03}.log"));
    fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn check_reports_and_repair_cuts_keeping_a_backup() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    drop(DataDir::open(&dir, 3).unwrap());
    let recs = sample();
    let (bytes, ends) = log_bytes_of(&id_of(&dir, 0), &recs);
    write_shard(&dir, 0, &bytes);
    let (bytes, _) = log_bytes_of(&id_of(&dir, 1), &recs);
    let mut corrupt = bytes.clone();
    corrupt[ends[1] + 9] ^= 0x02;
    let p1 = write_shard(&dir, 1, &corrupt);
    let (mut torn, _) = log_bytes_of(&id_of(&dir, 2), &recs);
    torn.truncate(bytes.len() - 3);
    write_shard(&dir, 2, &torn);

    let report = check(&dir, false).unwrap();
    assert_eq!(report.shards[0].state, ShardState::Ok);
    assert_eq!(report.shards[0].records, recs.len() as u64);
    match &report.shards[1].state {
        ShardState::Corrupt {
            offset, lost_bytes, ..
        } => {
            assert_eq!(*offset, ends[1] as u64);
            assert_eq!(*lost_bytes, (bytes.len() - ends[1]) as u64);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(report.shards[1].records, 2);
    let last = ends[ends.len() - 2] as u64;
    assert_eq!(
        report.shards[2].state,
        ShardState::TornTail {
            offset: last,
            bytes: bytes.len() as u64 - 3 - last
        }
    );
    assert!(!report.usable() && !report.clean());
    let text = report.to_string();
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(text.contains("shard-000.log: ok, 6 records"), "{text}");
    assert!(
        text.contains(&format!("shard-001.log: corrupt at offset {}", ends[1])),
        "{text}"
    );
    assert!(text.contains("--repair"), "{text}");
    // Nothing changed without --repair.
    assert_eq!(fs::read(&p1).unwrap(), corrupt);

    let report = check(&dir, true).unwrap();
    assert!(report.usable());
    let rep = report.shards[1].repair.as_ref().expect("shard 1 repaired");
    assert_eq!(rep.cut_at, ends[1] as u64);
    assert_eq!(rep.bytes_cut, (bytes.len() - ends[1]) as u64);
    let backup = rep.backup.as_ref().expect("a backup");
    assert_eq!(
        fs::read(backup).unwrap(),
        corrupt,
        "the backup is the damaged file"
    );
    assert!(backup
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("shard-001.log.corrupt-"));
    assert_eq!(fs::read(&p1).unwrap(), &bytes[..ends[1]]);
    assert!(report.shards[0].repair.is_none());
    assert!(report.to_string().contains("backup in"), "{report}");
    let (got, r) = recover_all(&p1).unwrap();
    assert_eq!(got, &recs[..2]);
    assert_eq!(r.torn_bytes, 0);
    assert!(check(&dir, false).unwrap().clean());
}

#[test]
fn check_refuses_while_the_directory_is_in_use_and_without_a_manifest() {
    let tmp = tempfile::tempdir().unwrap();
    let held = DataDir::open(tmp.path(), 1).unwrap();
    let e = check(tmp.path(), true).unwrap_err().to_string();
    assert!(e.contains("in use by another weft-kv process"), "{e}");
    drop(held);
    assert!(check(tmp.path(), false).is_ok());
    let empty = tempfile::tempdir().unwrap();
    let e = check(empty.path(), false).unwrap_err().to_string();
    assert!(e.contains("not a weft-kv data directory"), "{e}");
    assert!(!empty.path().join("weft-kv.meta").exists());
}

#[test]
fn lock_excludes_a_second_open_in_this_process() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let a = DataDir::open(&dir, 2).unwrap();
    let e = DataDir::open(&dir, 2).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(&format!(
            "data directory {} is in use by another weft-kv process",
            dir.display()
        )),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("pid {}", std::process::id())),
        "{msg}"
    );
    assert!(msg.contains("choose another --dir"), "{msg}");
    drop(a);
    DataDir::open(&dir, 2).expect("free again after drop");
}

const CHILD_ENV: &str = "WEFT_KV_LOG_TEST_LOCK_CHILD";

/// Helper for `lock_excludes_another_process`: does nothing unless that test starts
/// this binary as its child with the directory in the environment.
#[test]
fn lock_child_helper() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let _d = DataDir::open(Path::new(&dir), 2).unwrap();
    // Straight to the descriptor: the test harness may capture `println!`.
    let mut out = std::io::stdout();
    writeln!(out, "locked {}", std::process::id()).unwrap();
    out.flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap(); // hold until the parent says so
}

#[test]
fn lock_excludes_another_process() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    /// Kills the child if the test fails before letting it go (else it waits forever).
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            if let Ok(None) = self.0.try_wait() {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
    }
    let mut child = Reap(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "lock_child_helper",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let child = &mut child.0;
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let pid = loop {
        let mut line = String::new();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "the child ended without locking"
        );
        // The harness may have written "test lock_child_helper ... " before it.
        if let Some((_, p)) = line.trim().split_once("locked ") {
            break p.to_string();
        }
    };
    assert_eq!(pid, child.id().to_string());
    let msg = DataDir::open(&dir, 2).unwrap_err().to_string();
    assert!(
        msg.contains("is in use by another weft-kv process"),
        "{msg}"
    );
    assert!(msg.contains(&format!("(pid {pid})")), "{msg}");
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(child.wait().unwrap().success());
    DataDir::open(&dir, 2).expect("free once the child exited");
}

#[test]
fn manifest_fixes_the_shard_count_and_bad_ones_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a/b");
    let d = DataDir::open(&dir, 3).unwrap();
    assert_eq!(d.shards(), 3);
    assert_eq!(d.log_path(2), dir.join("shard-002.log"));
    assert_eq!(d.path(), dir);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    drop(d);
    assert_eq!(
        DataDir::open(&dir, 8).unwrap().shards(),
        3,
        "the manifest's count wins"
    );

    let meta = dir.join("weft-kv.meta");
    fs::write(&meta, "format 7\nshards 3\n").unwrap();
    let e = DataDir::open(&dir, 3).unwrap_err().to_string();
    assert!(e.contains("format 7 is not known"), "{e}");
    fs::write(&meta, b"\x00\x01garbage").unwrap();
    let e = DataDir::open(&dir, 3).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("weft-kv.meta"), "{e}");
    fs::write(&meta, "format 1\n").unwrap();
    assert!(DataDir::open(&dir, 3)
        .unwrap_err()
        .to_string()
        .contains("no `shards` line"));
    let fresh = tmp.path().join("zero");
    assert!(DataDir::open(&fresh, 0).is_err());
}

fn frames(recs: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in recs {
        encode(&r.as_ref(), &mut out);
    }
    out
}

#[test]
fn rewrite_publishes_and_aborts() {
    let tmp = tempfile::tempdir().unwrap();
    let d = DataDir::open(tmp.path(), 2).unwrap();
    let log = d.log_path(1);
    let mut w = LogWriter::open(&log).unwrap();
    w.write(
        &frames(&[set("a", b"1"), set("a", b"2"), set("b", b"3")]),
        true,
    )
    .unwrap();
    let old = fs::read(&log).unwrap();

    // Abort: the temporary file goes, the log stays.
    let mut rw = Rewriter::create(&d, 1).unwrap();
    rw.append(&frames(&[set("zzz", b"never")])).unwrap();
    assert!(d.rewrite_path(1).exists());
    rw.abort();
    assert!(!d.rewrite_path(1).exists());
    assert_eq!(fs::read(&log).unwrap(), old);

    // Publish: the compacted records, then what the new writer appends.
    let mut rw = Rewriter::create(&d, 1).unwrap();
    rw.append(&frames(&[set("a", b"2")])).unwrap();
    rw.append(&frames(&[set("b", b"3")])).unwrap();
    let mut w2 = rw.finish().unwrap();
    assert!(!d.rewrite_path(1).exists());
    w2.write(&frames(&[Record::Del { key: b"a".to_vec() }]), true)
        .unwrap();
    assert_eq!(w2.len(), fs::metadata(&log).unwrap().len());
    let mut got = Vec::new();
    let r = recover(&log, |rec| got.push(rec)).unwrap();
    assert_eq!(
        got,
        vec![
            set("a", b"2"),
            set("b", b"3"),
            Record::Del { key: b"a".to_vec() }
        ]
    );
    assert_eq!(r.torn_bytes, 0);

    // A big rewrite (past the 1 MiB buffer).
    let many: Vec<Record> = (0..5000)
        .map(|i| set(&format!("key{i}"), &[b'v'; 300]))
        .collect();
    let mut rw = Rewriter::create(&d, 0).unwrap();
    for r in &many {
        rw.append(&frames(std::slice::from_ref(r))).unwrap();
    }
    rw.finish().unwrap();
    let mut got = Vec::new();
    recover(&d.log_path(0), |rec| got.push(rec)).unwrap();
    assert_eq!(got, many);
    assert!(
        Rewriter::create(&d, 2).is_err(),
        "shard 2 of 2 does not exist"
    );
}

#[test]
fn leftover_rewrite_is_removed_on_open() {
    let tmp = tempfile::tempdir().unwrap();
    drop(DataDir::open(tmp.path(), 2).unwrap());
    let left = tmp.path().join("shard-001.log.rewrite");
    fs::write(&left, b"half a compaction").unwrap();
    let d = DataDir::open(tmp.path(), 2).unwrap();
    assert!(!left.exists());
    assert_eq!(d.leftovers_removed(), &[left]);
}

fn write_records(w: &mut LogWriter, from: usize, n: usize, sync: bool) -> Vec<Record> {
    let mut recs = Vec::new();
    for i in from..from + n {
        let rec = set(&format!("k{i}"), format!("value {i}").as_bytes());
        let mut buf = Vec::new();
        encode(&rec.as_ref(), &mut buf);
        let before = w.len();
        w.write(&buf, sync).unwrap();
        assert_eq!(w.len(), before + buf.len() as u64);
        recs.push(rec);
    }
    recs
}

#[test]
fn writer_on_a_plain_thread() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("shard-000.log");
    fs::write(&log, weft_kv::log::header::header(&ID)).unwrap();
    let mut w = LogWriter::open(&log).unwrap();
    assert!(w.is_empty());
    let mut recs = write_records(&mut w, 0, 20, true);
    recs.extend(write_records(&mut w, 20, 20, false));
    w.sync().unwrap();
    w.write(b"", true).unwrap();
    drop(w);
    let mut got = Vec::new();
    let r = recover(&log, |rec| got.push(rec)).unwrap();
    assert_eq!(got, recs);
    assert_eq!(r.torn_bytes, 0);
    // Reopened, it appends after what is there.
    let mut w = LogWriter::open(&log).unwrap();
    assert_eq!(w.len(), r.bytes);
    recs.extend(write_records(&mut w, 40, 1, true));
    let mut got = Vec::new();
    recover(&log, |rec| got.push(rec)).unwrap();
    assert_eq!(got, recs);
}

#[test]
fn writer_on_a_green_thread_uses_the_linked_syslet() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("shard-000.log");
    fs::write(&log, weft_kv::log::header::header(&ID)).unwrap();
    let rt = weft_runtime::Runtime::new().unwrap();
    let log2 = log.clone();
    let (recs, engine, before, after) = rt.block_on(move || {
        let engine =
            weft_runtime::syslet::engine_available() && weft_runtime::io_backend() == "io_uring";
        let before = weft_runtime::syslet::engine_stats();
        let mut w = LogWriter::open(&log2).unwrap();
        w.set_syslet(true);
        let mut recs = write_records(&mut w, 0, 30, true);
        recs.extend(write_records(&mut w, 30, 10, false));
        w.sync().unwrap();
        // A buffer of many records: one group commit.
        let group: Vec<Record> = (40..140).map(|i| set(&format!("g{i}"), b"x")).collect();
        w.write(&frames(&group), true).unwrap();
        recs.extend(group);
        (recs, engine, before, weft_runtime::syslet::engine_stats())
    });
    let mut got = Vec::new();
    let r = recover(&log, |rec| got.push(rec)).unwrap();
    assert_eq!(got, recs);
    assert_eq!(r.torn_bytes, 0);
    if engine {
        // 31 syncing writes, each a chain of two linked requests (at least).
        assert!(
            after.chains >= before.chains + 31,
            "{before:?} -> {after:?}"
        );
        assert!(after.sqes >= before.sqes + 62, "{before:?} -> {after:?}");
    } else {
        common::note("no io_uring chain engine here: the syslet ran on cachemiss threads");
    }
}

#[test]
fn writer_on_a_green_thread_writes_on_the_worker_while_an_fsync_runs_beside() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("shard-000.log");
    fs::write(&log, weft_kv::log::header::header(&ID)).unwrap();
    let rt = weft_runtime::Runtime::builder().workers(1).build().unwrap();
    let log2 = log.clone();
    let (recs, stats) = rt.block_on(move || {
        let mut w = LogWriter::open(&log2).unwrap();
        let mut recs = write_records(&mut w, 0, 20, false);
        // An fsync on another green thread of the same worker while writes go on; it
        // keeps the file open after the writer is gone.
        let handle = w.sync_handle();
        let syncer = weft_runtime::spawn(move || handle.sync());
        recs.extend(write_records(&mut w, 20, 20, false));
        let stats = w.stats();
        drop(w);
        syncer.join().unwrap().unwrap();
        (recs, stats)
    });
    let mut got = Vec::new();
    let r = recover(&log, |rec| got.push(rec)).unwrap();
    assert_eq!(got, recs);
    assert_eq!(r.torn_bytes, 0);
    // Every write went with pwrite on the worker, or (after one that slept: a busy
    // disk) through io_uring.
    assert_eq!(stats.direct + stats.deferred, 40, "{stats:?}");
    assert!(stats.direct >= 1, "{stats:?}");
    assert!(stats.slept <= stats.direct, "{stats:?}");
}

/// A write with fsync on a green thread (`--fsync always`) by default: the write with
/// `pwrite` on the worker (counted as such: a syslet's write is not), the fdatasync
/// through the runtime's ring; every record recovered.
#[test]
fn writer_syncing_on_a_green_thread_writes_on_the_worker_without_the_syslet() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("shard-000.log");
    fs::write(&log, weft_kv::log::header::header(&ID)).unwrap();
    let rt = weft_runtime::Runtime::builder().workers(1).build().unwrap();
    let log2 = log.clone();
    let (recs, stats) = rt.block_on(move || {
        let mut w = LogWriter::open(&log2).unwrap();
        let recs = write_records(&mut w, 0, 20, true);
        (recs, w.stats())
    });
    let mut got = Vec::new();
    let r = recover(&log, |rec| got.push(rec)).unwrap();
    assert_eq!(got, recs);
    assert_eq!(r.torn_bytes, 0);
    assert_eq!(stats.direct, 20, "{stats:?}");
    assert_eq!((stats.synced_ring, stats.synced_here), (20, 0), "{stats:?}");
}

/// With `set_sync_on_worker` (what the server's flusher sets when its worker owns one
/// shard), a write with fsync on a green thread runs its fdatasync on the worker: every
/// such write counted there, none through the ring; writes without fsync and a group
/// of many records as usual; every record recovered, in order; switched off again, the
/// ring's fsync is back.
#[test]
fn writer_syncing_on_the_worker_fdatasyncs_there() {
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("shard-000.log");
    fs::write(&log, weft_kv::log::header::header(&ID)).unwrap();
    let rt = weft_runtime::Runtime::builder().workers(1).build().unwrap();
    let log2 = log.clone();
    let (recs, on, off) = rt.block_on(move || {
        let mut w = LogWriter::open(&log2).unwrap();
        w.set_sync_on_worker(true);
        let mut recs = write_records(&mut w, 0, 20, true);
        recs.extend(write_records(&mut w, 20, 5, false));
        let group: Vec<Record> = (25..125).map(|i| set(&format!("g{i}"), b"x")).collect();
        w.write(&frames(&group), true).unwrap();
        recs.extend(group);
        let on = w.stats();
        w.set_sync_on_worker(false);
        recs.extend(write_records(&mut w, 125, 3, true));
        (recs, on, w.stats())
    });
    let mut got = Vec::new();
    let r = recover(&log, |rec| got.push(rec)).unwrap();
    assert_eq!(got, recs);
    assert_eq!(r.torn_bytes, 0);
    assert_eq!((on.synced_here, on.synced_ring), (21, 0), "{on:?}");
    assert_eq!(on.direct + on.deferred, 26, "{on:?}");
    // Only the writes without fsync are watched for a sleep (the module doc).
    assert!(on.slept <= 5, "{on:?}");
    assert_eq!((off.synced_here, off.synced_ring), (21, 3), "{off:?}");
}

/// A tmpfs mounted for one test, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            common::skip("not root (mounting a tmpfs to fill needs it)");
            return None;
        }
        fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            common::skip(&format!("mounting a tmpfs on {} failed", dir.display()));
            return None;
        }
        Some(Tmpfs(dir.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Fills the file system with the writer until ENOSPC, checks the log holds only whole
/// buffers, frees space, and checks writing resumes.
fn enospc_round(mnt: &Path, sync: bool, sync_on_worker: bool) {
    let filler = mnt.join("filler");
    fs::write(&filler, vec![1u8; 24 * 1024]).unwrap();
    let log = mnt.join("shard-000.log");
    fs::write(&log, weft_kv::log::header::header(&ID)).unwrap();
    let mut w = LogWriter::open(&log).unwrap();
    w.set_sync_on_worker(sync_on_worker);
    let mut written = Vec::new();
    let mut i = 0;
    let err = loop {
        // Buffers of 3 records, ~1.6 KiB: not a divisor of a page, so the last write
        // ends partway.
        let group: Vec<Record> = (0..3)
            .map(|j| set(&format!("k{i}.{j}"), &vec![b'a' + (i % 26) as u8; 520]))
            .collect();
        let before = w.len();
        match w.write(&frames(&group), sync) {
            Ok(()) => written.extend(group),
            Err(e) => {
                assert_eq!(
                    w.len(),
                    before,
                    "a failed write leaves the length as it was"
                );
                break e;
            }
        }
        i += 1;
        assert!(i < 1000, "the 64 KiB tmpfs never filled");
    };
    assert!(err.kind() == std::io::ErrorKind::StorageFull, "{err}");
    assert!(err.to_string().contains("shard-000.log"), "{err}");
    assert_eq!(
        fs::metadata(&log).unwrap().len(),
        w.len(),
        "nothing of the failed buffer stays"
    );
    assert!(!written.is_empty());
    drop(w);
    let mut got = Vec::new();
    let r = recover(&log, |rec| got.push(rec)).unwrap();
    assert_eq!(r.torn_bytes, 0);
    assert_eq!(got, written);

    // Space returns: the next write goes through.
    fs::remove_file(&filler).unwrap();
    let mut w = LogWriter::open(&log).unwrap();
    w.set_sync_on_worker(sync_on_worker);
    let more = vec![set("after", b"space returned")];
    w.write(&frames(&more), sync).unwrap();
    written.extend(more);
    let mut got = Vec::new();
    recover(&log, |rec| got.push(rec)).unwrap();
    assert_eq!(got, written);
    fs::remove_file(&log).unwrap();
}

#[test]
fn enospc_leaves_only_whole_frames_and_writing_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(m) = Tmpfs::mount(&tmp.path().join("mnt"), "64k") else {
        return;
    };
    enospc_round(&m.0, false, false);
    enospc_round(&m.0, true, false);
    // And on a green thread (pwrite on the worker; the fdatasync through the ring, or
    // on the worker itself).
    let rt = weft_runtime::Runtime::new().unwrap();
    let dir = m.0.clone();
    rt.block_on(move || enospc_round(&dir, true, false));
    let dir = m.0.clone();
    rt.block_on(move || enospc_round(&dir, true, true));
    let dir = m.0.clone();
    rt.block_on(move || enospc_round(&dir, false, false));
    drop(rt);
}

// ---- the directory proves it is whole ---------------------------------------------

/// A data directory of `shards` shards with records in every log; returns each log's
/// records.
fn dir_with_data(dir: &Path, shards: usize) -> Vec<Vec<Record>> {
    let d = DataDir::open(dir, shards).unwrap();
    (0..shards)
        .map(|s| {
            let recs = vec![set(&format!("k{s}"), b"v"), set(&format!("j{s}"), b"w")];
            let mut w = LogWriter::open(&d.log_path(s)).unwrap();
            w.write(&frames(&recs), true).unwrap();
            recs
        })
        .collect()
}

/// Every file of `dir` (not LOCK's pid) with its bytes and mode: what a look that
/// changes nothing must leave as it was.
fn snapshot(dir: &Path) -> std::collections::BTreeMap<String, (Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt;
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let mode = e.metadata().unwrap().permissions().mode();
            let name = e.file_name().to_string_lossy().into_owned();
            (name, (fs::read(e.path()).unwrap(), mode))
        })
        .collect()
}

fn open_err(dir: &Path) -> String {
    DataDir::open(dir, 1).unwrap_err().to_string()
}

fn assert_has(msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "{p:?} not in: {msg}");
    }
}

/// With 2 shards, a deleted `shard-001.log` stopped nothing: the store started with
/// half the keys. Now the start is refused with the file and what to do, changing
/// nothing; `check` says the same; `check --repair` starts the shard empty.
#[test]
fn a_deleted_log_stops_the_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    dir_with_data(&dir, 2);
    let p1 = dir.join("shard-001.log");
    fs::remove_file(&p1).unwrap();
    let before = snapshot(&dir);
    let e = open_err(&dir);
    let repair = format!("weft kv check --repair --dir {}", dir.display());
    assert_has(
        &e,
        &[
            &p1.display().to_string(),
            "is missing",
            "shard 1 of 2",
            &repair,
        ],
    );
    assert_eq!(
        snapshot(&dir).keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    let report = check(&dir, false).unwrap();
    assert_eq!(report.shards[1].state, ShardState::Missing);
    assert!(!report.usable() && !report.clean());
    assert!(
        report.to_string().contains("shard-001.log: missing"),
        "{report}"
    );
    let report = check(&dir, true).unwrap();
    assert!(report.usable(), "{report}");
    assert!(report.to_string().contains("created empty"), "{report}");
    let d = DataDir::open(&dir, 1).unwrap();
    let (got, _) = recover_all(&d.log_path(1)).unwrap();
    assert!(got.is_empty());
    assert_eq!(recover_all(&d.log_path(0)).unwrap().0.len(), 2);
}

/// An emptied log (0 bytes, or part of a header) is refused the same way; the repair
/// keeps a copy of a file that held anything.
#[test]
fn an_emptied_log_stops_the_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    dir_with_data(&dir, 2);
    let p1 = dir.join("shard-001.log");
    let full = weft_kv::log::header::header(&id_of(&dir, 1));
    for len in [0u64, 7, HEADER_LEN as u64 - 1] {
        fs::write(&p1, &full[..len as usize]).unwrap();
        let e = open_err(&dir);
        assert_has(
            &e,
            &[
                &p1.display().to_string(),
                &format!("holds {len} bytes, less than a log header"),
                "--repair",
            ],
        );
        assert_eq!(fs::metadata(&p1).unwrap().len(), len, "unchanged");
        let report = check(&dir, false).unwrap();
        assert_eq!(report.shards[1].state, ShardState::Emptied { len });
        assert!(!report.usable());
    }
    let report = check(&dir, true).unwrap();
    let rep = report.shards[1].repair.as_ref().expect("repaired");
    let backup = rep.backup.as_ref().expect("a copy of a non-empty file");
    assert_eq!(fs::metadata(backup).unwrap().len(), HEADER_LEN as u64 - 1);
    DataDir::open(&dir, 1).expect("starts once repaired");
}

/// A deleted manifest made the next start a new 1-shard directory that ignored
/// shard-001.log from then on. Now: refused, nothing written; `check --repair`
/// rebuilds the manifest from the logs' headers, and every key is back.
#[test]
fn a_deleted_manifest_stops_the_start_and_check_rebuilds_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    let recs = dir_with_data(&dir, 2);
    let id = DataDir::open(&dir, 1).unwrap().id();
    let meta = dir.join("weft-kv.meta");
    let text = fs::read_to_string(&meta).unwrap();
    fs::remove_file(&meta).unwrap();
    let before = snapshot(&dir);
    let e = open_err(&dir);
    assert_has(
        &e,
        &[
            "shard-000.log, shard-001.log",
            "but no manifest (weft-kv.meta)",
            "Nothing was changed",
            "--repair",
        ],
    );
    assert!(!meta.exists());
    let report = check(&dir, false).unwrap();
    assert!(!report.usable(), "{report}");
    assert!(
        report.to_string().contains("rebuilds it from them"),
        "{report}"
    );
    let after: Vec<_> = snapshot(&dir)
        .into_iter()
        .filter(|(n, _)| n != "LOCK")
        .collect();
    let before: Vec<_> = before.into_iter().filter(|(n, _)| n != "LOCK").collect();
    assert_eq!(
        after, before,
        "check without --repair changed the directory"
    );
    let report = check(&dir, true).unwrap();
    assert!(report.usable(), "{report}");
    assert_eq!(
        fs::read_to_string(&meta).unwrap(),
        text,
        "the same manifest again"
    );
    let d = DataDir::open(&dir, 1).unwrap();
    assert_eq!((d.shards(), d.id()), (2, id));
    for (s, want) in recs.iter().enumerate() {
        assert_eq!(&recover_all(&d.log_path(s)).unwrap().0, want);
    }
}

/// A manifest edited from 2 to 3 shards loaded every key, then GET missed most (the
/// keys hash to other shards). Now the manifest does not hold together, or, edited
/// whole, the logs' headers say 2 shards: refused either way.
#[test]
fn an_edited_shard_count_stops_the_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    dir_with_data(&dir, 2);
    let meta = dir.join("weft-kv.meta");
    let text = fs::read_to_string(&meta).unwrap();
    fs::write(&meta, text.replace("shards 2", "shards 3")).unwrap();
    assert_has(
        &open_err(&dir),
        &["weft-kv.meta", "says `shards 3` but names 2 logs"],
    );
    assert!(check(&dir, false).is_err());
    let whole = text.replace("shards 2", "shards 3") + "log shard-002.log\n";
    fs::write(&meta, &whole).unwrap();
    let e = open_err(&dir);
    assert_has(
        &e,
        &[
            "shard-000.log: its header says it is shard 0 of 2",
            "shard-001.log: its header says it is shard 1 of 2",
            "shard-002.log is missing",
        ],
    );
    assert!(!dir.join("shard-002.log").exists());
    let report = check(&dir, true).unwrap();
    assert!(
        matches!(report.shards[0].state, ShardState::Foreign(_)),
        "{report}"
    );
    assert!(
        !report.usable(),
        "a log of another shard count is not repaired"
    );
}

/// A log of another data directory, or of another shard, stops the start, naming
/// what its header says and what this directory expects.
#[test]
fn a_log_of_another_directory_or_shard_stops_the_start() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    dir_with_data(&a, 2);
    dir_with_data(&b, 2);
    let (ida, idb) = (id_of(&a, 0).dir, id_of(&b, 0).dir);
    fs::copy(b.join("shard-001.log"), a.join("shard-001.log")).unwrap();
    let e = open_err(&a);
    assert_has(
        &e,
        &[
            &format!("shard 1 of 2 of the data directory {idb}"),
            &format!("this file is shard 1 of 2 of the data directory {ida}"),
            "not this directory's log",
        ],
    );
    assert!(matches!(
        check(&a, false).unwrap().shards[1].state,
        ShardState::Foreign(_)
    ));
    // Two logs swapped.
    dir_with_data(&tmp.path().join("c"), 2);
    let c = tmp.path().join("c");
    fs::rename(c.join("shard-000.log"), c.join("tmp")).unwrap();
    fs::rename(c.join("shard-001.log"), c.join("shard-000.log")).unwrap();
    fs::rename(c.join("tmp"), c.join("shard-001.log")).unwrap();
    assert_has(
        &open_err(&c),
        &[
            "shard-000.log: its header says it is shard 1 of 2",
            "shard-001.log: its header says it is shard 0 of 2",
        ],
    );
}

/// A `shard-NNN.log` the manifest does not name may hold keys no shard would see: the
/// start is refused until it is moved away.
#[test]
fn a_log_the_manifest_does_not_name_stops_the_start() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    dir_with_data(&dir, 1);
    let extra = dir.join("shard-001.log");
    fs::copy(dir.join("shard-000.log"), &extra).unwrap();
    assert_has(
        &open_err(&dir),
        &[
            &extra.display().to_string(),
            "names 1 shard logs",
            "Move it out",
        ],
    );
    let report = check(&dir, true).unwrap();
    assert!(!report.usable(), "{report}");
    assert!(
        report.to_string().contains("shard-001.log: not one of"),
        "{report}"
    );
    fs::remove_file(&extra).unwrap();
    DataDir::open(&dir, 1).unwrap();
}

/// A format 1 directory (16-byte headers, a manifest of `format 1` and `shards N`) is
/// read by `check` as it is, and upgraded by an open: every record stays, each log's
/// header then names the directory and the shard, a missing log is created. An
/// upgrade cut short (one log already upgraded) is finished with the same id.
#[test]
fn a_format_1_directory_is_upgraded_on_open() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("old");
    fs::create_dir(&dir).unwrap();
    fs::write(
        dir.join("weft-kv.meta"),
        "weft-kv data directory\nformat 1\nshards 3\n",
    )
    .unwrap();
    let v1 = |recs: &[Record]| {
        let mut b = weft_kv::log::header::header_v1().to_vec();
        b.extend(frames(recs));
        b
    };
    let r0 = sample();
    let r2 = vec![set("two", b"2")];
    fs::write(dir.join("shard-000.log"), v1(&r0)).unwrap();
    fs::write(dir.join("shard-002.log"), v1(&r2)).unwrap();
    let before = snapshot(&dir);
    let report = check(&dir, false).unwrap();
    assert_eq!(report.format, 1);
    assert_eq!(report.shards[0].state, ShardState::Ok);
    assert_eq!(report.shards[1].state, ShardState::NotCreated);
    assert!(report.usable() && report.clean(), "{report}");
    assert!(
        report.to_string().contains("upgrades it to format 3"),
        "{report}"
    );
    assert_eq!(snapshot(&dir), before, "check changed a format 1 directory");

    // An upgrade cut short: shard 2 already has its new header.
    let id = DirId([9; 16]);
    let lid = |shard| LogId {
        dir: id,
        shard,
        shards: 3,
    };
    let mut b = weft_kv::log::header::header(&lid(2)).to_vec();
    b.extend(frames(&r2));
    fs::write(dir.join("shard-002.log"), &b).unwrap();

    let d = DataDir::open(&dir, 1).unwrap();
    assert!(d.upgraded());
    assert_eq!((d.shards(), d.id()), (3, id));
    for (s, want) in [(0, r0), (1, vec![]), (2, r2)] {
        let head = fs::read(d.log_path(s)).unwrap()[..HEADER_LEN].to_vec();
        assert_eq!(head, weft_kv::log::header::header(&lid(s as u32)));
        assert_eq!(recover_all(&d.log_path(s)).unwrap().0, want);
    }
    assert!(fs::read_to_string(dir.join("weft-kv.meta"))
        .unwrap()
        .contains("format 3"));
    drop(d);
    assert!(!DataDir::open(&dir, 1).unwrap().upgraded());
    assert!(check(&dir, false).unwrap().clean());
}

/// A format 2 directory, as the weft-kv before typed values wrote it (version 2
/// headers; Set, Del, Expire and Flush records of kinds 1 to 4, without a database),
/// is read by `check` as it is, and upgraded in place by an open: the headers say
/// version 3, the manifest format 3, and every record is read back as before, in
/// database 0. An upgrade cut short (one header already rewritten) is finished.
#[test]
fn a_format_2_directory_opens_and_is_upgraded_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("old");
    fs::create_dir(&dir).unwrap();
    let id = DirId([7; 16]);
    fs::write(
        dir.join("weft-kv.meta"),
        format!(
            "weft-kv data directory\nformat 2\nid {id}\nshards 2\nlog shard-000.log\nlog shard-001.log\n"
        ),
    )
    .unwrap();
    let lid = |shard| LogId {
        dir: id,
        shard,
        shards: 2,
    };
    // Format 2's frames, byte for byte: kind, then the fields (no database byte).
    let frame = |payload: Vec<u8>| {
        let mut f = (payload.len() as u32).to_le_bytes().to_vec();
        f.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        f.extend(payload);
        f
    };
    let bytes = |b: &[u8]| [&(b.len() as u32).to_le_bytes()[..], b].concat();
    let v2_set = |k: &[u8], v: &[u8], at: Option<u64>| {
        let mut p = vec![1];
        p.extend(bytes(k));
        p.extend(bytes(v));
        match at {
            None => p.push(0),
            Some(t) => {
                p.push(1);
                p.extend_from_slice(&t.to_le_bytes());
            }
        }
        frame(p)
    };
    let v2_del = |k: &[u8]| frame([&[2u8][..], &bytes(k)].concat());
    let v2_persist = |k: &[u8]| frame([&[3u8][..], &bytes(k), &[0]].concat());
    let later = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 3_600_000;
    // Shard 0 of format 2; shard 1 already upgraded by an open that did not finish.
    let mut logs = [
        weft_kv::log::header::header_v2(&lid(0)).to_vec(),
        weft_kv::log::header::header(&lid(1)).to_vec(),
    ];
    let shard = |k: &[u8]| (crc32c::crc32c(k) % 2) as usize;
    for (k, f) in [
        (&b"gone"[..], v2_set(b"gone", b"x", None)),
        (b"kept", v2_set(b"kept", b"v0", None)),
        (b"a", v2_set(b"a", b"1", None)),
        (b"b", v2_set(b"b", b"2", Some(later))),
        (b"c", v2_set(b"c", b"3", Some(1))), // long passed
        (b"p", v2_set(b"p", b"4", Some(later))),
        (b"p", v2_persist(b"p")),
        (b"a", v2_del(b"a")),
        (b"one", v2_set(b"one", b"1", None)),
    ] {
        logs[shard(k)].extend(f);
        if k == b"gone" {
            logs[shard(k)].extend(frame(vec![4])); // FLUSH
        }
    }
    logs[shard(b"kept")].extend(v2_set(b"kept", b"v1", None));
    let log0 = logs[0].clone();
    fs::write(dir.join("shard-000.log"), &logs[0]).unwrap();
    fs::write(dir.join("shard-001.log"), &logs[1]).unwrap();

    let before = snapshot(&dir);
    let report = check(&dir, false).unwrap();
    assert_eq!(report.format, 2);
    assert!(report.usable() && report.clean(), "{report}");
    assert!(
        report.to_string().contains("data format 2: the next"),
        "{report}"
    );
    assert_eq!(snapshot(&dir), before, "check changed a format 2 directory");

    let d = DataDir::open(&dir, 1).unwrap();
    assert!(d.upgraded());
    for s in 0..2 {
        let head = fs::read(d.log_path(s)).unwrap()[..HEADER_LEN].to_vec();
        assert_eq!(head, weft_kv::log::header::header(&lid(s as u32)));
    }
    // Only the header changed.
    assert_eq!(
        fs::read(d.log_path(0)).unwrap()[HEADER_LEN..],
        log0[HEADER_LEN..]
    );
    assert!(fs::read_to_string(dir.join("weft-kv.meta"))
        .unwrap()
        .contains("format 3\n"));
    drop(d);
    let store = weft_kv::Store::open(&dir).unwrap();
    let mut keys = store.keys(b"*").unwrap();
    keys.sort();
    assert_eq!(keys, [&b"b"[..], b"kept", b"one", b"p"]);
    assert_eq!(store.get(b"kept").unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(
        store.exec(&[b"ttl", b"p"]),
        weft_kv::Reply::Int(-1),
        "PERSIST after SET EX keeps the key"
    );
    assert!(matches!(store.exec(&[b"ttl", b"b"]), weft_kv::Reply::Int(t) if t > 3000));
    // New records of every kind go after the old ones, and all of it reads back.
    store.exec(&[b"hset", b"h", b"f", b"v"]);
    store.exec(&[b"append", b"kept", b"+"]);
    drop(store);
    let store = weft_kv::Store::open(&dir).unwrap();
    assert_eq!(store.get(b"kept").unwrap().as_deref(), Some(&b"v1+"[..]));
    assert_eq!(
        store.exec(&[b"hget", b"h", b"f"]),
        weft_kv::Reply::Bulk(b"v".to_vec())
    );
    drop(store);
    assert!(check(&dir, false).unwrap().clean());
}

/// `check` without `--repair` changes nothing: it used to delete `.rewrite` leftovers
/// (and write its pid into LOCK). A directory with a leftover, a torn tail, damage in
/// the middle, a missing log and no LOCK file is byte for byte the same after it.
#[test]
fn check_without_repair_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    dir_with_data(&dir, 4);
    let (bytes, ends) = log_bytes_of(&id_of(&dir, 1), &sample());
    write_shard(&dir, 1, &bytes[..bytes.len() - 3]);
    let (mut bytes, _) = log_bytes_of(&id_of(&dir, 2), &sample());
    bytes[ends[1] + 9] ^= 2;
    write_shard(&dir, 2, &bytes);
    fs::write(dir.join("shard-001.log.rewrite"), b"half a compaction").unwrap();
    fs::remove_file(dir.join("shard-003.log")).unwrap();
    fs::remove_file(dir.join("LOCK")).unwrap();
    let before = snapshot(&dir);
    let report = check(&dir, false).unwrap();
    assert!(matches!(
        report.shards[1].state,
        ShardState::TornTail { .. }
    ));
    assert!(matches!(report.shards[2].state, ShardState::Corrupt { .. }));
    assert_eq!(report.shards[3].state, ShardState::Missing);
    assert!(
        report
            .to_string()
            .contains("shard-001.log.rewrite: left by a compaction"),
        "{report}"
    );
    assert_eq!(
        snapshot(&dir),
        before,
        "check without --repair changed the directory"
    );
    // With LOCK there (a server ran here), its pid is left alone too.
    fs::write(dir.join("LOCK"), b"12345\n").unwrap();
    let before = snapshot(&dir);
    check(&dir, false).unwrap();
    assert_eq!(snapshot(&dir), before);
    // --repair does remove the leftover.
    let report = check(&dir, true).unwrap();
    assert!(report.usable(), "{report}");
    assert!(!dir.join("shard-001.log.rewrite").exists());
}

/// The list records (30 List, 31 LPush, 32 RPush, 33 LPop, 34 RPop, 35 LSet, 36
/// LInsert, 37 LRem) recover like any other: torn at every byte offset, the whole
/// records before the cut come back, and replaying them gives the list those records
/// make (a change of a missing list is ignored; popping the last element removes it).
#[test]
fn list_records_recover_and_replay() {
    let strs = |v: &[&str]| -> Vec<Vec<u8>> { v.iter().map(|s| s.as_bytes().to_vec()).collect() };
    let key = || b"l".to_vec();
    let recs = vec![
        Record::List {
            key: key(),
            expire_at_ms: None,
            items: strs(&["a", "b", "c"]),
        },
        Record::LPush {
            key: key(),
            items: strs(&["x", "y"]),
        },
        Record::RPush {
            key: key(),
            items: strs(&["z"]),
        },
        Record::LPop {
            key: key(),
            count: 1,
        },
        Record::RPop {
            key: key(),
            count: 1,
        },
        Record::LSet {
            key: key(),
            index: 1,
            value: b"A".to_vec(),
        },
        Record::LInsert {
            key: key(),
            index: 4,
            value: b"end".to_vec(),
        },
        Record::LRem {
            key: key(),
            positions: vec![3u64.to_le_bytes().to_vec(), 0u64.to_le_bytes().to_vec()],
        },
        Record::LPop {
            key: key(),
            count: 3,
        },
        Record::RPush {
            key: key(),
            items: strs(&["ignored: no such list"]),
        },
    ];
    // The list each prefix of the records leaves in `l`.
    let want: [&[&str]; 11] = [
        &[],
        &["a", "b", "c"],
        &["y", "x", "a", "b", "c"],
        &["y", "x", "a", "b", "c", "z"],
        &["x", "a", "b", "c", "z"],
        &["x", "a", "b", "c"],
        &["x", "A", "b", "c"],
        &["x", "A", "b", "c", "end"],
        &["A", "b", "end"],
        &[],
        &[],
    ];
    for_each_torn_replay(&recs, |cut, whole, ks| {
        let elements: Vec<Vec<u8>> = ks.peek(b"l", 0).map_or(vec![], |e| {
            weft_kv::keyspace::list::iter_from(e, 0)
                .map(<[u8]>::to_vec)
                .collect()
        });
        assert_eq!(elements, strs(want[whole]), "cut at {cut}");
    });
}

/// The set records (40 Members, 41 SAdd, 42 SRem) recover like any other: torn at
/// every byte offset, the whole records before the cut come back, and replaying them
/// gives the set those records make (a removal that empties a set removes it).
#[test]
fn set_records_recover_and_replay() {
    let strs = |v: &[&str]| -> Vec<Vec<u8>> { v.iter().map(|s| s.as_bytes().to_vec()).collect() };
    let recs = vec![
        Record::Members {
            key: b"s".to_vec(),
            expire_at_ms: None,
            items: strs(&["1", "2", "a"]),
        },
        Record::SAdd {
            key: b"s".to_vec(),
            items: strs(&["b", "2"]),
        },
        Record::SRem {
            key: b"s".to_vec(),
            items: strs(&["1", "zz"]),
        },
        Record::Members {
            key: b"t".to_vec(),
            expire_at_ms: Some(u64::MAX),
            items: strs(&["x"]),
        },
        Record::SRem {
            key: b"t".to_vec(),
            items: strs(&["x"]),
        },
        Record::SAdd {
            key: b"t".to_vec(),
            items: strs(&["ignored: no such set"]),
        },
    ];
    // The set each prefix of the records leaves in `s` and whether `t` exists.
    let want_s: [&[&str]; 7] = [
        &[],
        &["1", "2", "a"],
        &["1", "2", "a", "b"],
        &["2", "a", "b"],
        &["2", "a", "b"],
        &["2", "a", "b"],
        &["2", "a", "b"],
    ];
    let want_t = [false, false, false, false, true, false, false];
    for_each_torn_replay(&recs, |cut, whole, ks| {
        let members = |key: &[u8]| -> Vec<Vec<u8>> {
            let Some(e) = ks.peek(key, 0) else {
                return vec![];
            };
            let mut m: Vec<Vec<u8>> = weft_kv::keyspace::set::iter(e)
                .map(|m| m.to_vec())
                .collect();
            m.sort();
            m
        };
        assert_eq!(members(b"s"), strs(want_s[whole]), "cut at {cut}");
        assert_eq!(ks.peek(b"t", 0).is_some(), want_t[whole], "cut at {cut}");
    });
}

/// The sorted-set records (50 ZSet, 51 ZAdd, 52 ZRem) recover like any other: torn at
/// every byte offset, the whole records before the cut come back, and replaying them
/// gives the sorted set those records make, in (score, member) order (a removal that
/// empties one removes it; a change of a missing one is ignored).
#[test]
fn zset_records_recover_and_replay() {
    let pairs = |v: &[(&str, f64)]| -> Vec<Vec<u8>> {
        v.iter()
            .flat_map(|&(m, s)| [m.as_bytes().to_vec(), s.to_bits().to_le_bytes().to_vec()])
            .collect()
    };
    let recs = vec![
        Record::ZSet {
            key: b"z".to_vec(),
            expire_at_ms: None,
            items: pairs(&[("a", 1.0), ("b", 2.0)]),
        },
        Record::ZAdd {
            key: b"z".to_vec(),
            items: pairs(&[("a", 3.5), ("c", f64::NEG_INFINITY)]),
        },
        Record::ZRem {
            key: b"z".to_vec(),
            items: vec![b"b".to_vec(), b"zz".to_vec()],
        },
        Record::ZSet {
            key: b"t".to_vec(),
            expire_at_ms: Some(u64::MAX),
            items: pairs(&[("x", 0.0)]),
        },
        Record::ZRem {
            key: b"t".to_vec(),
            items: vec![b"x".to_vec()],
        },
        Record::ZAdd {
            key: b"t".to_vec(),
            items: pairs(&[("ignored: no such sorted set", 1.0)]),
        },
    ];
    // What each prefix of the records leaves in `z`, and whether `t` exists.
    let want_z: [&[(&str, f64)]; 7] = [
        &[],
        &[("a", 1.0), ("b", 2.0)],
        &[("c", f64::NEG_INFINITY), ("b", 2.0), ("a", 3.5)],
        &[("c", f64::NEG_INFINITY), ("a", 3.5)],
        &[("c", f64::NEG_INFINITY), ("a", 3.5)],
        &[("c", f64::NEG_INFINITY), ("a", 3.5)],
        &[("c", f64::NEG_INFINITY), ("a", 3.5)],
    ];
    let want_t = [false, false, false, false, true, false, false];
    for_each_torn_replay(&recs, |cut, whole, ks| {
        let elements = |key: &[u8]| -> Vec<(Vec<u8>, f64)> {
            let Some(e) = ks.peek(key, 0) else {
                return vec![];
            };
            weft_kv::keyspace::zset::view(e)
                .iter()
                .map(|(m, s)| (m.to_vec(), s))
                .collect()
        };
        let want: Vec<(Vec<u8>, f64)> = want_z[whole]
            .iter()
            .map(|&(m, s)| (m.as_bytes().to_vec(), s))
            .collect();
        assert_eq!(elements(b"z"), want, "cut at {cut}");
        assert_eq!(ks.peek(b"t", 0).is_some(), want_t[whole], "cut at {cut}");
    });
}

#[test]
fn stream_records_recover_and_replay() {
    use weft_kv::keyspace::stream::{self, Change, Full, Id};
    let id = |ms: u64| Id { ms, seq: 1 };
    let entry = |ms: u64| (id(ms), vec![b"f".to_vec(), ms.to_string().into_bytes()]);
    let rec = |key: &str, c: Change| Record::Stream {
        kind: c.kind(),
        key: key.as_bytes().to_vec(),
        body: c.body(),
    };
    let g = || b"g".to_vec();
    let recs = vec![
        Record::Stream {
            kind: 70,
            key: b"s".to_vec(),
            body: Full {
                expire_at_ms: None,
                last_id: id(2),
                max_deleted: Id::MIN,
                entries_added: 2,
                entries: vec![entry(1), entry(2)],
            }
            .body(),
        },
        rec(
            "s",
            Change::Add {
                last_id: id(3),
                entries_added: 3,
                entries: vec![entry(3)],
            },
        ),
        rec(
            "s",
            Change::Group {
                name: g(),
                last_id: id(2),
                entries_read: 2,
            },
        ),
        rec(
            "s",
            Change::Claim {
                group: g(),
                consumer: b"c".to_vec(),
                items: vec![(id(1), 5, 1), (id(2), 5, 1)],
            },
        ),
        rec(
            "s",
            Change::Ack {
                group: g(),
                ids: vec![id(1)],
            },
        ),
        rec(
            "s",
            Change::Del {
                max_deleted: id(3),
                ids: vec![id(3)],
            },
        ),
        rec("s", Change::Trim { below: id(2) }),
        rec("t", Change::Trim { below: id(9) }),
    ];
    // What each prefix of the records leaves: the entries of `s` and its pending count.
    let want: [(usize, usize); 9] = [
        (0, 0),
        (2, 0),
        (3, 0),
        (3, 0),
        (3, 2),
        (3, 1),
        (2, 1),
        (1, 1),
        (1, 1),
    ];
    for_each_torn_replay(&recs, |cut, whole, ks| {
        let state = ks.peek(b"s", 0).map_or((0, 0), |e| {
            let s = stream::of(e);
            (s.len(), s.groups.get(&g()).map_or(0, |g| g.pel.len()))
        });
        assert_eq!(state, want[whole], "cut at {cut}");
        assert!(ks.peek(b"t", 0).is_none(), "cut at {cut}");
    });
}

// ---- transactions over several shards: the Tx record (log/tx.rs) ------------------

/// A key of shard `s` of two (`k{s}:{n}` names tried in turn).
fn key_of_shard(s: u32, n: usize) -> String {
    (0..)
        .map(|i| format!("k{s}:{n}:{i}"))
        .find(|k| crc32c::crc32c(k.as_bytes()) % 2 == s)
        .unwrap()
}

/// Transaction `id`'s part over `shards` holding `recs`, as one frame.
fn tx_frame(id: u64, shards: &[usize], recs: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    weft_kv::log::tx::encode_part(
        id,
        &weft_kv::log::tx::shards_bytes(shards),
        &frames(recs),
        &mut out,
    );
    out
}

/// A two-shard directory whose logs hold `logs[s]` after their headers; the paths.
fn two_shards(dir: &Path, logs: [Vec<u8>; 2]) -> [PathBuf; 2] {
    let d = DataDir::open(dir, 2).unwrap();
    let paths = [d.log_path(0), d.log_path(1)];
    for (s, bytes) in logs.iter().enumerate() {
        let mut w = LogWriter::open(&paths[s]).unwrap();
        w.write(bytes, true).unwrap();
    }
    paths
}

fn get(store: &weft_kv::Store, key: &str) -> weft_kv::Reply {
    store.exec(&[b"get", key.as_bytes()])
}

/// A Tx record round-trips; its records come back with their databases.
#[test]
fn a_tx_record_round_trips() {
    let recs = [set("a", b"1"), Record::Del { key: b"b".to_vec() }];
    let f = tx_frame(42, &[0, 3], &recs);
    let (rec, n) = weft_kv::log::decode(&f).unwrap();
    assert_eq!(n, f.len());
    let Record::Tx {
        id,
        more,
        shards,
        body,
    } = rec
    else {
        panic!("{rec:?}")
    };
    assert_eq!((id, more), (42, false));
    assert_eq!(weft_kv::log::tx::shards_of(&shards), [0, 3]);
    let inner: Vec<Record> = weft_kv::log::tx::records(&body)
        .map(|(_, r)| r.to_record())
        .collect();
    assert_eq!(inner, recs);
    // Cut anywhere, it is no record: a torn tail cuts a part whole.
    for cut in 0..f.len() {
        assert!(weft_kv::log::decode(&f[..cut]).is_err(), "cut at {cut}");
    }
}

/// A part that ends a log is applied when every participant has it, and cut (the log
/// truncated before it, for good) when one lacks it; a part followed by anything is
/// applied whatever the others have.
#[test]
fn a_tx_ending_a_log_is_kept_only_if_every_participant_has_it() {
    let (a, b) = (key_of_shard(0, 1), key_of_shard(1, 1));
    let (x0, x1) = (key_of_shard(0, 2), key_of_shard(1, 2));
    // Both have transaction 5.
    let tmp = tempfile::tempdir().unwrap();
    let mut l0 = frames(&[set(&a, b"a")]);
    l0.extend(tx_frame(5, &[0, 1], &[set(&x0, b"tx")]));
    let mut l1 = frames(&[set(&b, b"b")]);
    l1.extend(tx_frame(5, &[0, 1], &[set(&x1, b"tx")]));
    two_shards(tmp.path(), [l0.clone(), l1]);
    let store = weft_kv::Store::open(tmp.path()).unwrap();
    assert_eq!(get(&store, &x0), weft_kv::Reply::Bulk(b"tx".to_vec()));
    assert_eq!(get(&store, &x1), weft_kv::Reply::Bulk(b"tx".to_vec()));
    drop(store);

    // Shard 1 lacks it: cut on shard 0, and still cut after another start.
    let tmp = tempfile::tempdir().unwrap();
    let paths = two_shards(tmp.path(), [l0.clone(), frames(&[set(&b, b"b")])]);
    let len0 = fs::metadata(&paths[0]).unwrap().len();
    // `check` says start-up cuts it, and changes nothing.
    let report = check(tmp.path(), false).unwrap();
    assert!(report.usable());
    let f = report
        .findings
        .iter()
        .find(|f| f.path == paths[0])
        .expect("a finding about shard 0");
    assert!(
        f.what.contains("transaction 5 over shards [0, 1]") && f.what.contains("cuts it"),
        "{}",
        f.what
    );
    assert_eq!(fs::metadata(&paths[0]).unwrap().len(), len0);
    for _ in 0..2 {
        let store = weft_kv::Store::open(tmp.path()).unwrap();
        assert_eq!(get(&store, &x0), weft_kv::Reply::Nil);
        assert_eq!(get(&store, &a), weft_kv::Reply::Bulk(b"a".to_vec()));
        assert_eq!(get(&store, &b), weft_kv::Reply::Bulk(b"b".to_vec()));
    }
    let frame = tx_frame(5, &[0, 1], &[set(&x0, b"tx")]).len() as u64;
    assert_eq!(fs::metadata(&paths[0]).unwrap().len(), len0 - frame);

    // Shard 1 went on past it (a later transaction of its own): it had it.
    let tmp = tempfile::tempdir().unwrap();
    two_shards(
        tmp.path(),
        [l0.clone(), tx_frame(6, &[1], &[set(&b, b"later")])],
    );
    let store = weft_kv::Store::open(tmp.path()).unwrap();
    assert_eq!(get(&store, &x0), weft_kv::Reply::Bulk(b"tx".to_vec()));
    drop(store);

    // Not the last frame of its log: applied (no crash can have cut the others then).
    let tmp = tempfile::tempdir().unwrap();
    let mut l0b = l0.clone();
    l0b.extend(frames(&[set(&a, b"after")]));
    two_shards(tmp.path(), [l0b, Vec::new()]);
    let store = weft_kv::Store::open(tmp.path()).unwrap();
    assert_eq!(get(&store, &x0), weft_kv::Reply::Bulk(b"tx".to_vec()));
    assert_eq!(get(&store, &a), weft_kv::Reply::Bulk(b"after".to_vec()));
}

/// A part split over several frames whose last frame is missing is cut whole.
#[test]
fn a_split_part_missing_its_last_frame_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let big = vec![b'v'; weft_kv::log::tx::TX_SPLIT / 2 + 1];
    let keys: Vec<String> = (0..3).map(|i| key_of_shard(0, 10 + i)).collect();
    let recs: Vec<Record> = keys.iter().map(|k| set(k, &big)).collect();
    let whole = tx_frame(9, &[0], &recs);
    // Drop the last frame.
    let mut ends = vec![0];
    while *ends.last().unwrap() < whole.len() {
        let at = *ends.last().unwrap();
        ends.push(at + weft_kv::log::decode(&whole[at..]).unwrap().1);
    }
    let last = ends[ends.len() - 2];
    assert!(last > 0, "the part is split");
    let paths = two_shards(tmp.path(), [whole[..last].to_vec(), Vec::new()]);
    let store = weft_kv::Store::open(tmp.path()).unwrap();
    for k in &keys {
        assert_eq!(get(&store, k), weft_kv::Reply::Nil);
    }
    drop(store);
    assert_eq!(fs::metadata(&paths[0]).unwrap().len(), HEADER_LEN as u64);
}

/// The embedded store logs a transaction over two shards as one Tx frame on each,
/// of one id, naming both; they come back after a restart.
#[test]
fn the_store_logs_transactions_as_tx_frames() {
    let tmp = tempfile::tempdir().unwrap();
    DataDir::open(tmp.path(), 2).unwrap();
    let (a, b) = (key_of_shard(0, 1), key_of_shard(1, 1));
    let store = weft_kv::Store::open(tmp.path()).unwrap();
    assert_eq!(
        store.exec(&[b"mset", a.as_bytes(), b"1", b.as_bytes(), b"2"]),
        weft_kv::Reply::OK
    );
    drop(store);
    let mut ids = Vec::new();
    for s in 0..2 {
        let path = tmp.path().join(format!("shard-{s:03}.log"));
        let (got, _) = recover_all(&path).unwrap();
        let [Record::Tx { id, shards, .. }] = &got[..] else {
            panic!("shard {s}: {got:?}")
        };
        assert_eq!(weft_kv::log::tx::shards_of(shards), [0, 1]);
        ids.push(*id);
    }
    assert_eq!(ids[0], ids[1]);
    let store = weft_kv::Store::open(tmp.path()).unwrap();
    assert_eq!(get(&store, &a), weft_kv::Reply::Bulk(b"1".to_vec()));
    assert_eq!(get(&store, &b), weft_kv::Reply::Bulk(b"2".to_vec()));
    // A second transaction takes a higher id than the first, after the restart.
    store.exec(&[b"mset", a.as_bytes(), b"3", b.as_bytes(), b"4"]);
    drop(store);
    let (got, _) = recover_all(&tmp.path().join("shard-000.log")).unwrap();
    let Some(Record::Tx { id, .. }) = got.last() else {
        panic!("{got:?}")
    };
    assert!(*id > ids[0], "{id} after {}", ids[0]);
}
