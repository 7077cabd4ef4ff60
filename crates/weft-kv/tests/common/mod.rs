//! What the command tests share: one keyspace, a clock, and the log of everything run on it.

#![allow(dead_code)]

#[path = "../../../../tests/support/skip.rs"]
mod skip;
#[allow(unused_imports)] // each test binary uses its own subset
pub use skip::{note, skip};

pub use weft_kv::commands::{self, check_arity, lookup, Ctx, Exec};
pub use weft_kv::keyspace::Keyspace;
pub use weft_kv::log::{decode, Record};
pub use weft_kv::resp::Reply;
pub const NOW: u64 = 1_700_000_000_000;

/// A bulk string reply.
pub fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

/// An error reply.
pub fn err(s: &str) -> Reply {
    Reply::Error(s.to_string().into())
}

/// An array of bulk strings.
pub fn bulks(v: &[&str]) -> Reply {
    Reply::Array(v.iter().map(|s| bulk(s)).collect())
}

/// An array of integers.
pub fn ints(v: &[i64]) -> Reply {
    Reply::Array(v.iter().map(|&n| Reply::Int(n)).collect())
}

/// Words as owned bytes (a record's items, a command's arguments).
pub fn items<S: AsRef<[u8]>>(v: &[S]) -> Vec<Vec<u8>> {
    v.iter().map(|s| s.as_ref().to_vec()).collect()
}

/// A keyspace, a clock and the log of everything run on it.
pub struct T {
    pub ks: Keyspace,
    pub now: u64,
    pub log: Vec<u8>,
    pub last: Vec<u8>,
    /// The bytes a command may add to memory (`Ctx::room`; `u64::MAX`: no limit).
    pub room: u64,
}

impl T {
    pub fn new() -> T {
        T {
            ks: Keyspace::new(),
            now: NOW,
            log: Vec::new(),
            last: Vec::new(),
            room: u64::MAX,
        }
    }

    /// Runs a command as the server would on a single shard.
    pub fn run(&mut self, line: &[&str]) -> Reply {
        let args: Vec<Vec<u8>> = line.iter().map(|a| a.as_bytes().to_vec()).collect();
        self.run_bytes(&args)
    }

    pub fn run_bytes(&mut self, args: &[Vec<u8>]) -> Reply {
        let Some(cmd) = lookup(&args[0]) else {
            return commands::unknown(args);
        };
        if let Err(e) = check_arity(cmd, args) {
            return e;
        }
        let mut buf = Vec::new();
        let mut ctx = Ctx {
            now_ms: self.now,
            log: &mut buf,
            db: 0,
            over_memory: false,
            room: self.room,
            out: None,
        };
        let r = match cmd.exec {
            Exec::Shard(f) | Exec::Split(f, _) => {
                f(&mut self.ks, &commands::borrow_args(args), &mut ctx)
            }
            Exec::Server => match commands::across::one_keyspace(cmd) {
                Some(f) => f(&mut self.ks, &commands::borrow_args(args), &mut ctx),
                None => panic!("server command in a shard test"),
            },
        };
        self.log.extend_from_slice(&buf);
        self.last = buf;
        r
    }

    /// The records the last command logged.
    pub fn logged(&self) -> Vec<Record> {
        records(&self.last)
    }

    /// Replays the whole log into a fresh keyspace and checks it equals this one.
    pub fn check_replay(&self) {
        let mut fresh = Keyspace::new();
        for r in records(&self.log) {
            fresh.apply(r.as_ref(), self.now);
        }
        assert_eq!(dump(&fresh, self.now), dump(&self.ks, self.now));
    }
}

pub fn records(mut buf: &[u8]) -> Vec<Record> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let (r, n) = decode(buf).expect("a well-formed record");
        out.push(r);
        buf = &buf[n..];
    }
    out
}

/// Every live key with its value and expiry, sorted (a list's value: `list:` and its
/// elements in order, each ended by a zero byte). A hash's value is written as
/// `hash:` and its sorted `field=value` pairs, each ended by a zero byte; a set's as
/// `set:` and its sorted members, each ended by a zero byte.
pub fn dump(ks: &Keyspace, now: u64) -> Vec<(Vec<u8>, Vec<u8>, Option<u64>)> {
    use weft_kv::log::RecordRef;
    let mut strings = Vec::new();
    // Each hash's fields and values, and its expiry.
    type Fields = (Vec<Vec<u8>>, Option<u64>);
    let mut hashes: std::collections::BTreeMap<Vec<u8>, Fields> = Default::default();
    // Each sorted set's members and scores in order, and its expiry.
    let mut zsets: std::collections::BTreeMap<Vec<u8>, Fields> = Default::default();
    // Each set's members, and its expiry.
    let mut sets: std::collections::BTreeMap<Vec<u8>, Fields> = Default::default();
    // Each list's elements in order, and its expiry.
    let mut lists: std::collections::BTreeMap<Vec<u8>, Fields> = Default::default();
    // Each stream's state records (kind and body), in the order written.
    let mut streams: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = Default::default();
    let mut cur = 0;
    loop {
        cur = ks.walk(cur, 7, now, |r| match r {
            RecordRef::Set {
                key,
                value,
                expire_at_ms,
            } => strings.push((key.to_vec(), value.to_vec(), expire_at_ms)),
            // A string whose making decides its encoding: written with it, so that a
            // replay that lost it differs.
            RecordRef::SetStr {
                key,
                value,
                expire_at_ms,
                enc,
            } => strings.push((
                key.to_vec(),
                [format!("str{}:", enc as u8).into_bytes(), value.to_vec()].concat(),
                expire_at_ms,
            )),
            RecordRef::Hash {
                key,
                expire_at_ms,
                items,
            } => {
                hashes.insert(key.to_vec(), (items.to_vec(), expire_at_ms));
            }
            RecordRef::HSet { key, items } => {
                let h = hashes.get_mut(key).expect("a Hash record first");
                h.0.extend(items.to_vec());
            }
            RecordRef::Members {
                key,
                expire_at_ms,
                items,
            } => {
                sets.insert(key.to_vec(), (items.to_vec(), expire_at_ms));
            }
            RecordRef::SAdd { key, items } => {
                let s = sets.get_mut(key).expect("a Members record first");
                s.0.extend(items.to_vec());
            }
            RecordRef::List {
                key,
                expire_at_ms,
                items,
            } => {
                lists.insert(key.to_vec(), (items.to_vec(), expire_at_ms));
            }
            RecordRef::RPush { key, items } => {
                let l = lists.get_mut(key).expect("a List record first");
                l.0.extend(items.to_vec());
            }
            RecordRef::ZSet {
                key,
                expire_at_ms,
                items,
            } => {
                zsets.insert(key.to_vec(), (items.to_vec(), expire_at_ms));
            }
            RecordRef::ZAdd { key, items } => {
                let z = zsets.get_mut(key).expect("a ZSet record first");
                z.0.extend(items.to_vec());
            }
            RecordRef::Stream { kind, key, body } => {
                let s = streams.entry(key.to_vec()).or_default();
                s.push(kind);
                s.extend_from_slice(&(body.len() as u32).to_le_bytes());
                s.extend_from_slice(body);
            }
            r => panic!("compaction wrote {r:?}"),
        });
        if cur == 0 {
            break;
        }
    }
    for (key, (items, at)) in hashes {
        let mut pairs: Vec<Vec<u8>> = items
            .chunks(2)
            .map(|p| [&p[0][..], b"=", &p[1], b"\0"].concat())
            .collect();
        pairs.sort();
        strings.push((key, [b"hash:".to_vec(), pairs.concat()].concat(), at));
    }
    for (key, (elements, at)) in lists {
        let all: Vec<Vec<u8>> = elements
            .into_iter()
            .map(|x| [x, b"\0".to_vec()].concat())
            .collect();
        strings.push((key, [b"list:".to_vec(), all.concat()].concat(), at));
    }
    for (key, (mut members, at)) in sets {
        members.sort();
        let all: Vec<Vec<u8>> = members
            .into_iter()
            .map(|m| [m, b"\0".to_vec()].concat())
            .collect();
        strings.push((key, [b"set:".to_vec(), all.concat()].concat(), at));
    }
    for (key, (pairs, at)) in zsets {
        // Members and scores (as the double's bits) in the order logged: the order of
        // the sorted set.
        let all: Vec<Vec<u8>> = pairs
            .chunks(2)
            .map(|p| [&p[0][..], b"=", &p[1], b"\0"].concat())
            .collect();
        strings.push((key, [b"zset:".to_vec(), all.concat()].concat(), at));
    }
    for (key, records) in streams {
        strings.push((key, [b"stream:".to_vec(), records].concat(), None));
    }
    strings.sort();
    strings
}

/// An embedded store of four shards (and its directory).
pub fn four_shards() -> (tempfile::TempDir, weft_kv::Store) {
    let dir = tempfile::tempdir().unwrap();
    drop(weft_kv::log::DataDir::open(dir.path(), 4).unwrap());
    let store = weft_kv::Store::open(dir.path()).unwrap();
    (dir, store)
}

/// `n` keys named `prefix0`, `prefix1`, ... each on a different shard (of four).
pub fn keys_on_shards(prefix: &str, n: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut used = Vec::new();
    for i in 0.. {
        let k = format!("{prefix}{i}");
        let s = crc32c::crc32c(k.as_bytes()) % 4;
        if !used.contains(&s) {
            used.push(s);
            out.push(k);
            if out.len() == n {
                break;
            }
        }
    }
    out
}
