//! Which shard owns a key, and how a multi-key command splits over shards and its
//! parts' replies merge.
//!
//! The shard of a key is `CRC32C(key) mod shards`: stable across restarts and
//! machines (the shard count is fixed in the data directory's manifest), and fast
//! (one instruction per 8 bytes with SSE 4.2).

use crate::commands::{Command, Merge};
use crate::resp::Reply;

/// The shard that owns `key`.
#[inline]
pub fn shard_of(key: &[u8], shards: usize) -> usize {
    if shards == 1 {
        0
    } else {
        crc32c::crc32c(key) as usize % shards
    }
}

/// The shard of a single-key command (its `first_key` argument); `None` if the
/// command names no key there.
#[inline]
pub fn shard_of_command<A: AsRef<[u8]>>(cmd: &Command, args: &[A], shards: usize) -> Option<usize> {
    let i = cmd.first_key;
    if i <= 0 {
        return None;
    }
    args.get(i as usize).map(|k| shard_of(k.as_ref(), shards))
}

/// One shard's part of a split command.
pub struct Part {
    /// The shard.
    pub shard: usize,
    /// The sub-command: the name, then this shard's keys (each with its `step - 1`
    /// following arguments).
    pub args: Vec<Vec<u8>>,
    /// For each key of the part, its position among the command's keys (MGET puts
    /// the values back in that order).
    pub positions: Vec<usize>,
}

/// Splits a multi-key command into one part per shard that owns any of its keys.
/// Arguments after the last key group (none for the commands split today) are not
/// allowed: the caller has checked the arity.
pub fn split(cmd: &Command, args: &[Vec<u8>], shards: usize) -> Vec<Part> {
    let first = cmd.first_key.max(1) as usize;
    let step = cmd.step.max(1) as usize;
    let last = if cmd.last_key < 0 {
        (args.len() as i32 + cmd.last_key) as usize
    } else {
        cmd.last_key as usize
    };
    let mut parts: Vec<Part> = Vec::new();
    let mut n = 0;
    let mut i = first;
    while i <= last && i + step <= args.len() {
        let s = shard_of(&args[i], shards);
        let p = match parts.iter_mut().position(|p| p.shard == s) {
            Some(j) => &mut parts[j],
            None => {
                parts.push(Part {
                    shard: s,
                    args: vec![args[0].clone()],
                    positions: vec![],
                });
                parts.last_mut().unwrap()
            }
        };
        p.args.extend(args[i..i + step].iter().cloned());
        p.positions.push(n);
        n += 1;
        i += step;
    }
    parts
}

/// Merges the replies of a split command's parts (in the order of `parts`).
pub fn merge(how: Merge, parts: &[Part], replies: Vec<Reply>) -> Reply {
    if let Some(e) = replies.iter().find(|r| r.is_error()) {
        return e.clone();
    }
    match how {
        Merge::Sum => Reply::Int(
            replies
                .iter()
                .map(|r| if let Reply::Int(n) = r { *n } else { 0 })
                .sum(),
        ),
        Merge::AllOk => Reply::OK,
        Merge::InOrder => {
            let total = parts.iter().map(|p| p.positions.len()).sum();
            let mut out = vec![Reply::Nil; total];
            for (p, r) in parts.iter().zip(replies) {
                if let Reply::Array(items) = r {
                    for (pos, item) in p.positions.iter().zip(items) {
                        out[*pos] = item;
                    }
                }
            }
            Reply::Array(out)
        }
    }
}
