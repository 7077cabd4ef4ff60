//! Crash atomicity of transactions over several shards: the `Tx` record (kind 60),
//! and how recovery holds back a transaction's part that ends a log.
//!
//! ```text
//! payload = 60 0 more:u8 id:u64le shards:bytes body
//!           shards = n:u32le then n/4 shard numbers, u32le each (the participants)
//!           body   = the frames of the records the part logged, to the end
//! ```
//!
//! A transaction's part on one shard (every record it logged there, for an EXEC all of
//! that shard's commands) is one `Tx` frame, so a torn tail cuts all of it or none of
//! it. A part of more than [`TX_SPLIT`] bytes is several consecutive frames of the same
//! id, each but the last with `more` set; their records stay whole (a record is never
//! split). Ids increase in the order in which transactions hold all their gates, so on
//! every shard the parts appear in increasing id order.
//!
//! The coordinator leaves its gates only once every part is written, so no shard logs
//! anything after a part that another participant lacks: such a part is the last thing
//! in its log. Recovery ([`TxReplay`]) therefore applies every `Tx` frame as soon as
//! another frame follows it, and holds back the run of frames that ends a log.
//! [`settle`] then keeps a held-back part only if it is whole (its last frame is
//! there) and every participant has reached its id (a participant's highest id reaches
//! it only if it has it, since ids increase); otherwise it is cut off its log
//! ([`cut`]): it was never acknowledged, and no client saw it.
//!
//! Compaction keeps the ids: the part of a `Tx` frame about keys its walk has passed
//! goes to its tail as a `Tx` frame of the same id (maybe empty), and the tail starts
//! with an empty `Tx` frame of the shard's highest id when the compaction began, so a
//! shard never forgets which transactions it has (at the start, not the end: a note
//! after the last part would keep it from being held back).

use super::record::{decode_frame, encode_in, RecordRef, FRAME_HEADER};
use std::path::Path;

/// A part's records are cut into `Tx` frames of at most this many bytes of records
/// (unless one record alone is larger).
pub const TX_SPLIT: usize = 1 << 20;

/// The most a `Tx` frame adds to the largest record it holds: its kind, database,
/// flag, id, the participants (at most [`super::dir::MAX_SHARDS`]) and the record's
/// frame header.
pub const TX_OVERHEAD: usize = 2 + 1 + 8 + 4 + 4 * super::dir::MAX_SHARDS + FRAME_HEADER;

/// The kind byte of a `Tx` record.
pub const TX_KIND: u8 = 60;

/// The participants of a transaction as a `Tx` record holds them (u32le each).
pub fn shards_bytes(shards: &[usize]) -> Vec<u8> {
    shards
        .iter()
        .flat_map(|&s| (s as u32).to_le_bytes())
        .collect()
}

/// The participants a `Tx` record names.
pub fn shards_of(bytes: &[u8]) -> Vec<usize> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")) as usize)
        .collect()
}

/// Appends to `out` the `Tx` frames of transaction `id`'s part whose records (whole
/// frames) are `records`, naming the participants `shards` (as [`shards_bytes`]): one
/// frame, or several of at most [`TX_SPLIT`] bytes of records each. An empty part is
/// one empty frame (a compacted log's note of its highest id).
pub fn encode_part(id: u64, shards: &[u8], records: &[u8], out: &mut Vec<u8>) {
    let mut from = 0;
    loop {
        let mut to = from;
        while to < records.len() {
            let n = frame_len(&records[to..]);
            if to > from && to - from + n > TX_SPLIT {
                break;
            }
            to += n;
        }
        let more = to < records.len();
        let rec = RecordRef::Tx {
            id,
            more,
            shards,
            body: &records[from..to],
        };
        encode_in(0, &rec, out);
        if !more {
            return;
        }
        from = to;
    }
}

/// The length of the whole frame at the start of `buf` (which holds whole frames).
fn frame_len(buf: &[u8]) -> usize {
    FRAME_HEADER + u32::from_le_bytes(buf[..4].try_into().expect("a frame header")) as usize
}

/// The records of a `Tx` record's body, in order, each with its database.
pub fn records(body: &[u8]) -> impl Iterator<Item = (u8, RecordRef<'_>)> {
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= body.len() {
            return None;
        }
        let (db, rec, n) = decode_frame(&body[at..]).expect("a checked Tx body");
        at += n;
        Some((db, rec))
    })
}

/// Whether `body` is whole frames of records that are not themselves `Tx` records.
pub fn valid_body(body: &[u8]) -> bool {
    let mut at = 0;
    while at < body.len() {
        match decode_frame(&body[at..]) {
            Ok((_, RecordRef::Tx { .. }, _)) | Err(_) => return false,
            Ok((_, _, n)) => at += n,
        }
    }
    true
}

/// A run of `Tx` frames of one transaction that ends a log, held back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldTx {
    /// The transaction.
    pub id: u64,
    /// Its participants.
    pub shards: Vec<usize>,
    /// Its last frame is there (none says `more`).
    pub whole: bool,
    /// The frames, as they are in the log.
    pub frames: Vec<u8>,
}

impl HeldTx {
    /// Applies its records through `apply` (each with its database).
    pub fn apply(&self, mut apply: impl FnMut(u8, RecordRef<'_>)) {
        let mut at = 0;
        while at < self.frames.len() {
            let (_, rec, n) = decode_frame(&self.frames[at..]).expect("frames a log held");
            if let RecordRef::Tx { body, .. } = rec {
                for (db, r) in records(body) {
                    apply(db, r);
                }
            }
            at += n;
        }
    }
}

/// What a shard's log says about transactions, once replayed ([`TxReplay::finish`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxTail {
    /// The highest id of the parts applied (0: none).
    pub applied: u64,
    /// The part that ends the log, held back.
    pub held: Option<HeldTx>,
}

/// Replays a log's records through `apply`, expanding `Tx` frames into their records
/// and holding back the run of `Tx` frames that ends the log (module doc).
pub struct TxReplay<F: FnMut(u8, RecordRef<'_>)> {
    apply: F,
    tail: TxTail,
}

impl<F: FnMut(u8, RecordRef<'_>)> TxReplay<F> {
    /// Replays into `apply`.
    pub fn new(apply: F) -> Self {
        TxReplay {
            apply,
            tail: TxTail::default(),
        }
    }

    /// The next record of the log.
    pub fn push(&mut self, db: u8, rec: RecordRef<'_>) {
        match rec {
            RecordRef::Tx {
                id, more, shards, ..
            } => {
                let same = matches!(&self.tail.held, Some(h) if h.id == id && !h.whole);
                if !same {
                    self.release();
                }
                let h = self.tail.held.get_or_insert_with(|| HeldTx {
                    id,
                    shards: shards_of(shards),
                    whole: false,
                    frames: Vec::new(),
                });
                h.whole = !more;
                encode_in(db, &rec, &mut h.frames);
            }
            rec => {
                self.release();
                (self.apply)(db, rec);
            }
        }
    }

    /// Applies the part held back: something follows it.
    fn release(&mut self) {
        if let Some(h) = self.tail.held.take() {
            h.apply(&mut self.apply);
            self.tail.applied = self.tail.applied.max(h.id);
        }
    }

    /// The end of the log: what it says about transactions, with the part that ends
    /// it held back (not applied).
    pub fn finish(self) -> TxTail {
        self.tail
    }
}

/// Which held-back parts to keep (`true`) or cut, given every shard's [`TxTail`]
/// (indexed by shard): a part is kept if it is whole and every participant has
/// reached its id, counting only what is kept.
pub fn settle(tails: &[TxTail]) -> Vec<bool> {
    let mut keep: Vec<bool> = tails
        .iter()
        .map(|t| t.held.as_ref().is_some_and(|h| h.whole))
        .collect();
    loop {
        let reached = |s: usize, keep: &[bool]| -> u64 {
            let t = &tails[s];
            match &t.held {
                Some(h) if keep[s] => t.applied.max(h.id),
                _ => t.applied,
            }
        };
        let mut changed = false;
        for s in 0..tails.len() {
            let Some(h) = tails[s].held.as_ref().filter(|_| keep[s]) else {
                continue;
            };
            let lacks = h
                .shards
                .iter()
                .any(|&p| p >= tails.len() || reached(p, &keep) < h.id);
            if lacks {
                keep[s] = false;
                changed = true;
            }
        }
        if !changed {
            return keep;
        }
    }
}

/// The highest transaction id of the shards once [`settle`]d (the next transaction
/// takes a higher one).
pub fn highest(tails: &[TxTail], keep: &[bool]) -> u64 {
    tails
        .iter()
        .zip(keep)
        .map(|(t, &k)| match &t.held {
            Some(h) if k => t.applied.max(h.id),
            _ => t.applied,
        })
        .max()
        .unwrap_or(0)
}

/// Settles the held-back parts of a directory's shards once each is replayed
/// (`tails[s]`, the log of shard `s` at `paths[s]` ending at `ends[s]`): a kept part
/// is handed to `keep` to apply, a cut one is cut off its log ([`cut`]). Answers each
/// shard's highest transaction id, and the highest of all.
pub fn settle_shards(
    paths: &[std::path::PathBuf],
    ends: &[u64],
    tails: &[TxTail],
    mut keep: impl FnMut(usize, &HeldTx),
) -> std::io::Result<(Vec<u64>, u64)> {
    let kept = settle(tails);
    let mut last = Vec::with_capacity(tails.len());
    for (s, t) in tails.iter().enumerate() {
        match &t.held {
            Some(h) if kept[s] => {
                keep(s, h);
                last.push(t.applied.max(h.id));
            }
            Some(h) => {
                cut(&paths[s], ends[s], h)?;
                last.push(t.applied);
            }
            None => last.push(t.applied),
        }
    }
    Ok((last, highest(tails, &kept)))
}

/// Cuts a held-back part off the log at `path`, whose records end at `end` (the
/// recovered length), fsyncs it, and says so on stderr. Why: `why`.
pub fn cut(path: &Path, end: u64, held: &HeldTx) -> std::io::Result<u64> {
    let at = end - held.frames.len() as u64;
    let f = std::fs::OpenOptions::new().write(true).open(path)?;
    f.set_len(at)?;
    f.sync_all()?;
    let lacking = if held.whole {
        "a participant shard does not have its part"
    } else {
        "its last frame is missing"
    };
    eprintln!(
        "weft-kv: {}: cut the last {} bytes at offset {at}: part of transaction {} over \
         shards {:?} that {lacking}, so it was never acknowledged and no client saw it",
        path.display(),
        held.frames.len(),
        held.id,
        held.shards,
    );
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::Record;

    fn set(key: &str, value: &str) -> Vec<u8> {
        let mut out = Vec::new();
        encode_in(
            3,
            &RecordRef::Set {
                key: key.as_bytes(),
                value: value.as_bytes(),
                expire_at_ms: None,
            },
            &mut out,
        );
        out
    }

    fn replay(log: &[u8]) -> (Vec<(u8, Record)>, TxTail) {
        let mut got = Vec::new();
        let mut r = TxReplay::new(|db, rec: RecordRef<'_>| got.push((db, rec.to_record())));
        let mut at = 0;
        while at < log.len() {
            let (db, rec, n) = decode_frame(&log[at..]).unwrap();
            r.push(db, rec);
            at += n;
        }
        let tail = r.finish();
        (got, tail)
    }

    /// A part round-trips through its frame; a big one is split into frames of whole
    /// records, all but the last saying more follow.
    #[test]
    fn parts_round_trip_and_split() {
        let mut records = set("a", "1");
        records.extend(set("b", "2"));
        let mut out = Vec::new();
        encode_part(7, &shards_bytes(&[0, 2]), &records, &mut out);
        let (db, rec, n) = decode_frame(&out).unwrap();
        assert_eq!(n, out.len());
        assert_eq!(db, 0);
        let RecordRef::Tx {
            id,
            more,
            shards,
            body,
        } = rec
        else {
            panic!("{rec:?}")
        };
        assert_eq!((id, more, shards_of(shards)), (7, false, vec![0, 2]));
        let keys: Vec<_> = records_keys(body);
        assert_eq!(keys, ["a", "b"]);

        // Two records fit in a frame, not three.
        let big: Vec<u8> = (0..5)
            .flat_map(|i| set(&format!("k{i}"), &"x".repeat(TX_SPLIT / 3)))
            .collect();
        let mut out = Vec::new();
        encode_part(9, &shards_bytes(&[1]), &big, &mut out);
        let mut at = 0;
        let mut flags = Vec::new();
        let mut all = Vec::new();
        while at < out.len() {
            let (_, rec, n) = decode_frame(&out[at..]).unwrap();
            let RecordRef::Tx { id, more, body, .. } = rec else {
                panic!()
            };
            assert_eq!(id, 9);
            flags.push(more);
            all.extend(records_keys(body));
            at += n;
        }
        assert_eq!(flags, [true, true, false]);
        assert_eq!(all, ["k0", "k1", "k2", "k3", "k4"]);
        // A body that is not whole records, or holds a Tx, is not a record.
        for body in [&out[..], &records[..records.len() - 1]] {
            let mut bad = Vec::new();
            let rec = RecordRef::Tx {
                id: 1,
                more: false,
                shards: &[],
                body,
            };
            encode_in(0, &rec, &mut bad);
            assert!(decode_frame(&bad).is_err());
        }
    }

    fn records_keys(body: &[u8]) -> Vec<String> {
        records(body)
            .map(|(_, r)| String::from_utf8(r.key().unwrap().to_vec()).unwrap())
            .collect()
    }

    /// A Tx frame followed by anything is applied in place; the run that ends the
    /// log is held back, whole or not.
    #[test]
    fn the_last_part_is_held_back() {
        let mut log = Vec::new();
        encode_part(1, &shards_bytes(&[0, 1]), &set("a", "1"), &mut log);
        log.extend(set("b", "2"));
        encode_part(4, &shards_bytes(&[0, 1]), &set("c", "3"), &mut log);
        let (got, tail) = replay(&log);
        let keys: Vec<_> = got
            .iter()
            .map(|(_, r)| r.as_ref().key().unwrap().to_vec())
            .collect();
        assert_eq!(keys, [b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(got[0].0, 3, "the database of a record inside a Tx");
        assert_eq!(tail.applied, 1);
        let held = tail.held.unwrap();
        assert_eq!(
            (held.id, held.whole, held.shards.clone()),
            (4, true, vec![0, 1])
        );
        assert!(log.ends_with(&held.frames));
        let mut applied = Vec::new();
        held.apply(|_, r| applied.push(r.key().unwrap().to_vec()));
        assert_eq!(applied, [b"c".to_vec()]);
        // A split part whose last frame is missing is held back, not whole.
        let big: Vec<u8> = (0..3)
            .flat_map(|i| set(&format!("k{i}"), &"x".repeat(TX_SPLIT / 2)))
            .collect();
        let mut log = Vec::new();
        encode_part(5, &shards_bytes(&[0]), &big, &mut log);
        let mut last = 0;
        let mut at = 0;
        while at < log.len() {
            last = at;
            at += decode_frame(&log[at..]).unwrap().2;
        }
        assert!(last > 0, "split into several frames");
        let (got, tail) = replay(&log[..last]);
        assert!(got.is_empty());
        assert!(!tail.held.unwrap().whole);
    }

    fn tail(applied: u64, held: Option<(u64, &[usize], bool)>) -> TxTail {
        TxTail {
            applied,
            held: held.map(|(id, shards, whole)| HeldTx {
                id,
                shards: shards.to_vec(),
                whole,
                frames: vec![],
            }),
        }
    }

    /// A held-back part is kept when every participant reached its id, counting only
    /// the parts that are kept themselves; cut otherwise.
    #[test]
    fn settle_keeps_only_parts_every_participant_has() {
        // Both ends with transaction 5: kept on both.
        let t = [
            tail(3, Some((5, &[0, 1], true))),
            tail(2, Some((5, &[0, 1], true))),
        ];
        assert_eq!(settle(&t), [true, true]);
        assert_eq!(highest(&t, &settle(&t)), 5);
        // Shard 1 lacks it: cut.
        let t = [tail(3, Some((5, &[0, 1], true))), tail(4, None)];
        assert_eq!(settle(&t), [false, false]);
        assert_eq!(highest(&t, &settle(&t)), 4);
        // Shard 1 went on past it (a later transaction): it has it.
        let t = [tail(3, Some((5, &[0, 1], true))), tail(6, None)];
        assert_eq!(settle(&t), [true, false]);
        // Shard 1's part is not whole: cut there, and so on shard 0 too.
        let t = [
            tail(0, Some((5, &[0, 1], true))),
            tail(0, Some((5, &[0, 1], false))),
        ];
        assert_eq!(settle(&t), [false, false]);
        // Three shards, the cut spreading: 2 lacks 8, so 8 is cut on 1, so shard 0's
        // 8 is cut too.
        let t = [
            tail(0, Some((8, &[0, 1, 2], true))),
            tail(0, Some((8, &[0, 1, 2], true))),
            tail(7, None),
        ];
        assert_eq!(settle(&t), [false, false, false]);
        // A compacted log's empty note (no participants) is kept.
        let t = [tail(0, Some((9, &[], true)))];
        assert_eq!(settle(&t), [true]);
    }
}
