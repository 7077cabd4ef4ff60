//! The steps of a command over several keys that runs as one transaction (SMOVE, the
//! set and sorted-set algebra and their STORE forms, ZRANGESTORE, ZMPOP, SORT ...
//! STORE): [`transaction`] holds the gates of its keys' shards
//! (`ShardSet::atomically`, docs/kv-types.md "How are commands over several shards
//! atomic?"), and [`Steps::run`] runs one-key shard functions on their key's shard
//! under them, each acknowledged as a reply would be. The caller computes between the
//! steps; no client sees the keys change between them.

use super::ShardFn;
use crate::exec::{Acks, Held, ShardSet};
use crate::resp::Reply;
use crate::route::shard_of;

/// The steps of a transaction: shard functions run on the shard of their key.
pub(super) struct Steps<'a> {
    pub(super) held: &'a dyn Held,
    pub(super) shards: usize,
    pub(super) db: u8,
    pub(super) now: u64,
    pub(super) acks: &'a mut Acks,
}

impl Steps<'_> {
    /// Runs `f` with `args` on the shard of `key` (usually `args[1]`).
    pub(super) fn run(&mut self, f: ShardFn, key: &[u8], args: &[&[u8]]) -> Reply {
        let s = shard_of(key, self.shards);
        let (db, now) = (self.db, self.now);
        let mut out = None;
        self.held
            .with(s, &mut |sh| out = Some(sh.run(f, db, args, now, None)));
        let (reply, lsn) = out.expect("the step ran");
        self.acks.note(s, lsn);
        reply
    }
}

/// Runs `f` with the steps of a transaction over the shards of `keys`, after checking
/// that the shards of `writes` take writes (else their refusal, and nothing runs).
pub(super) fn transaction<R>(
    set: &impl ShardSet,
    keys: &[&[u8]],
    writes: &[&[u8]],
    db: u8,
    acks: &mut Acks,
    f: impl FnOnce(&mut Steps<'_>) -> R,
) -> Result<R, Reply> {
    let n = set.count();
    for k in writes {
        if let Some(r) = set.refuses_writes(shard_of(k, n)) {
            return Err(r);
        }
    }
    let mut shards: Vec<usize> = keys.iter().map(|k| shard_of(k, n)).collect();
    shards.sort_unstable();
    shards.dedup();
    let now = crate::shard::now_ms();
    Ok(set.atomically(&shards, |held| {
        f(&mut Steps {
            held,
            shards: n,
            db,
            now,
            acks,
        })
    }))
}
