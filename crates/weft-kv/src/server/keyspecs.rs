//! Key specifications (Redis 7's `key_specs`, COMMAND INFO's ninth field): where a
//! command's keys are among its arguments, and how it uses each. One specification
//! says where its keys begin (an argument's position, or the argument after a
//! keyword) and how many follow (a range, or a count given by an argument), with the
//! flags of those keys: `RO`, `RW`, `OW` or `RM` (read, read and write, overwrite,
//! remove), and `access`, `insert`, `update`, `delete`, `variable_flags`.
//!
//! Most commands have one range from the command table's first key to its last; the
//! table here gives the flags of each command, and the specifications of those whose
//! keys are used in different ways (a source and a destination) or move (a count of
//! keys, a STORE option). Redis's free-text notes on some specifications are not given.

use crate::commands::{flags, Command};
use crate::resp::Reply;

/// Where a specification's keys begin.
#[derive(Clone, Copy, Debug)]
pub enum Begin {
    /// At this argument.
    Index(i64),
    /// After the first of these keywords from this argument on.
    Keyword(&'static str, i64),
    /// Only the command knows (SORT's BY, GET and STORE).
    Unknown,
}

/// How many keys follow the beginning.
#[derive(Clone, Copy, Debug)]
pub enum Find {
    /// Up to `last` (relative to the beginning; negative: from the end), `step` apart;
    /// with `limit`, only the first 1/limit of what is left.
    Range(i64, i64, i64),
    /// The argument at `idx` (relative) counts them; they begin `first` after the
    /// beginning, `step` apart.
    Keynum(i64, i64, i64),
    /// Only the command knows.
    Unknown,
}

/// One key specification.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// Its keys' flags.
    pub flags: &'static [&'static str],
    /// Where they begin.
    pub begin: Begin,
    /// How many follow.
    pub find: Find,
}

const fn one(flags: &'static [&'static str], at: i64) -> Spec {
    Spec {
        flags,
        begin: Begin::Index(at),
        find: Find::Range(0, 1, 0),
    }
}

const fn rest(flags: &'static [&'static str], at: i64) -> Spec {
    Spec {
        flags,
        begin: Begin::Index(at),
        find: Find::Range(-1, 1, 0),
    }
}

const fn counted(flags: &'static [&'static str], at: i64) -> Spec {
    Spec {
        flags,
        begin: Begin::Index(at),
        find: Find::Keynum(0, 1, 1),
    }
}

const fn after(flags: &'static [&'static str], word: &'static str, from: i64) -> Spec {
    Spec {
        flags,
        begin: Begin::Keyword(word, from),
        find: Find::Range(0, 1, 0),
    }
}

const UNKNOWN: Spec = Spec {
    flags: RO_ACCESS,
    begin: Begin::Unknown,
    find: Find::Unknown,
};

const RO: &[&str] = &["RO"];
const RO_ACCESS: &[&str] = &["RO", "access"];
const RW_ACCESS: &[&str] = &["RW", "access"];
const RW_UPDATE: &[&str] = &["RW", "update"];
const RW_INSERT: &[&str] = &["RW", "insert"];
const RW_DELETE: &[&str] = &["RW", "delete"];
const RW_ACCESS_UPDATE: &[&str] = &["RW", "access", "update"];
const RW_ACCESS_DELETE: &[&str] = &["RW", "access", "delete"];
const OW_UPDATE: &[&str] = &["OW", "update"];
const OW_INSERT: &[&str] = &["OW", "insert"];

/// The flags of a command with one range of keys.
fn range_flags(c: &Command) -> &'static [&'static str] {
    match c.name {
        "del" | "unlink" => &["RM", "delete"],
        "getdel" => RW_ACCESS_DELETE,
        "setnx" | "msetnx" => OW_INSERT,
        "setex" | "psetex" | "mset" | "restore" => OW_UPDATE,
        "set" | "bitfield" => &["RW", "access", "update", "variable_flags"],
        "getset" | "getex" | "incr" | "decr" | "incrby" | "decrby" | "incrbyfloat" | "move"
        | "hincrby" | "hincrbyfloat" | "setbit" | "zincrby" => RW_ACCESS_UPDATE,
        "append" | "lpush" | "rpush" | "lpushx" | "rpushx" | "linsert" | "hsetnx" | "pfadd"
        | "sadd" => RW_INSERT,
        "lpop" | "rpop" | "spop" | "zpopmin" | "zpopmax" | "blpop" | "brpop" | "bzpopmin"
        | "bzpopmax" => RW_ACCESS_DELETE,
        "lrem" | "ltrim" | "hdel" | "srem" | "zrem" | "zremrangebyrank" | "zremrangebyscore"
        | "zremrangebylex" | "xdel" | "xtrim" | "xautoclaim" => RW_DELETE,
        "pfcount" | "pfdebug" => RW_ACCESS,
        "touch" | "exists" | "type" | "strlen" | "hlen" | "hstrlen" | "hexists" | "llen"
        | "scard" | "sismember" | "zcard" | "xlen" | "watch" => RO,
        _ if c.flags & flags::WRITE != 0 => RW_UPDATE,
        _ => RO_ACCESS,
    }
}

/// A command's key specifications, in Redis's order.
pub fn specs(c: &Command) -> Vec<Spec> {
    match c.name {
        "lmove" | "rpoplpush" | "blmove" | "brpoplpush" | "smove" => {
            vec![one(RW_ACCESS_DELETE, 1), one(RW_INSERT, 2)]
        }
        "rename" => vec![one(RW_ACCESS_DELETE, 1), one(OW_UPDATE, 2)],
        "renamenx" => vec![one(RW_ACCESS_DELETE, 1), one(OW_INSERT, 2)],
        "copy" => vec![one(RO_ACCESS, 1), one(OW_UPDATE, 2)],
        "geosearchstore" | "zrangestore" => vec![one(OW_UPDATE, 1), one(RO_ACCESS, 2)],
        "bitop" => vec![one(OW_UPDATE, 2), rest(RO_ACCESS, 3)],
        "pfmerge" => vec![one(&["RW", "access", "insert"], 1), rest(RO_ACCESS, 2)],
        "sinterstore" => vec![one(RW_UPDATE, 1), rest(RO_ACCESS, 2)],
        "sunionstore" | "sdiffstore" => vec![one(OW_UPDATE, 1), rest(RO_ACCESS, 2)],
        "zunionstore" | "zinterstore" | "zdiffstore" => {
            vec![one(OW_UPDATE, 1), counted(RO_ACCESS, 2)]
        }
        "zunion" | "zinter" | "zdiff" | "zintercard" | "sintercard" => {
            vec![counted(RO_ACCESS, 1)]
        }
        "lmpop" | "zmpop" => vec![counted(RW_ACCESS_DELETE, 1)],
        "blmpop" | "bzmpop" => vec![counted(RW_ACCESS_DELETE, 2)],
        "eval" | "evalsha" | "fcall" => vec![counted(RW_ACCESS_UPDATE, 2)],
        "eval_ro" | "evalsha_ro" | "fcall_ro" => vec![counted(RO_ACCESS, 2)],
        "georadius" | "georadiusbymember" => {
            let from = if c.name == "georadius" { 6 } else { 5 };
            vec![
                one(RO_ACCESS, 1),
                after(OW_UPDATE, "STORE", from),
                after(OW_UPDATE, "STOREDIST", from),
            ]
        }
        "sort" => vec![
            one(RO_ACCESS, 1),
            UNKNOWN,
            Spec {
                flags: OW_UPDATE,
                ..UNKNOWN
            },
        ],
        "sort_ro" => vec![one(RO_ACCESS, 1), UNKNOWN],
        "xread" | "xreadgroup" => vec![Spec {
            flags: RO_ACCESS,
            begin: Begin::Keyword("STREAMS", if c.name == "xread" { 1 } else { 4 }),
            find: Find::Range(-1, 1, 2),
        }],
        _ if c.first_key <= 0 => Vec::new(),
        _ => {
            let last = if c.last_key < 0 {
                c.last_key as i64
            } else {
                (c.last_key - c.first_key) as i64
            };
            vec![Spec {
                flags: range_flags(c),
                begin: Begin::Index(c.first_key as i64),
                find: Find::Range(last, c.step as i64, 0),
            }]
        }
    }
}

/// The flags of the key at position `pos` of `args` (a whole command line): for SET
/// and BITFIELD (whose flags vary), from their options; else those of the first
/// specification that finds it there, else (SORT's STORE destination, which only the
/// command finds) Redis's for it.
pub fn flags_at<A: AsRef<[u8]>>(c: &Command, args: &[A], pos: usize) -> &'static [&'static str] {
    let word = |i: usize, w: &str| args[i].as_ref().eq_ignore_ascii_case(w.as_bytes());
    match c.name {
        // SET reads its key only with GET.
        "set" => {
            return if (3..args.len()).any(|i| word(i, "get")) {
                RW_ACCESS_UPDATE
            } else {
                OW_UPDATE
            };
        }
        // BITFIELD only reads unless it has a SET or INCRBY (or an error).
        "bitfield" => {
            let mut i = 2;
            while i < args.len() {
                let left = args.len() - i - 1;
                if word(i, "get") && left >= 2 {
                    i += 3;
                } else if word(i, "overflow") && left >= 1 {
                    i += 2;
                } else {
                    return RW_ACCESS_UPDATE;
                }
            }
            return RO_ACCESS;
        }
        _ => {}
    }
    if let Some(f) = c.sub(args).and_then(|s| sub_key(s.name)) {
        return f;
    }
    specs(c)
        .into_iter()
        .find(|s| positions(s, args).contains(&pos))
        .map_or(OW_UPDATE, |s| s.flags)
}

/// The positions a specification finds in `args`, as Redis's search finds them (none
/// when the search fails).
fn positions<A: AsRef<[u8]>>(s: &Spec, args: &[A]) -> Vec<usize> {
    let argc = args.len() as i64;
    let first = match s.begin {
        Begin::Index(i) => i,
        Begin::Keyword(word, from) => {
            let found = (from..argc - 1).find(|&i| {
                args[i as usize]
                    .as_ref()
                    .eq_ignore_ascii_case(word.as_bytes())
            });
            match found {
                Some(i) => i + 1,
                None => return Vec::new(),
            }
        }
        Begin::Unknown => return Vec::new(),
    };
    let (first, last, step) = match s.find {
        Find::Range(last, step, limit) => {
            let end = if last >= 0 {
                first + last
            } else if limit == 0 {
                argc + last
            } else {
                first + (argc - first) / limit + last
            };
            (first, end, step)
        }
        Find::Keynum(idx, from, step) => {
            let Some(n) = args
                .get((first + idx) as usize)
                .and_then(|a| crate::commands::parse_i64(a.as_ref()))
            else {
                return Vec::new();
            };
            (first + from, first + from + n - 1, step)
        }
        Find::Unknown => return Vec::new(),
    };
    if first >= argc || last >= argc || last < first {
        return Vec::new();
    }
    (first..=last)
        .step_by(step.max(1) as usize)
        .map(|i| i as usize)
        .collect()
}

/// The flags of the one key (at position 2) of a subcommand that has one.
pub fn sub_key(name: &str) -> Option<&'static [&'static str]> {
    Some(match name {
        "memory|usage" | "object|encoding" | "object|freq" | "object|idletime"
        | "object|refcount" => RO,
        "xgroup|create" | "xgroup|createconsumer" => RW_INSERT,
        "xgroup|delconsumer" | "xgroup|destroy" => RW_DELETE,
        "xgroup|setid" => RW_UPDATE,
        "xinfo|consumers" | "xinfo|groups" | "xinfo|stream" => RO_ACCESS,
        _ => return None,
    })
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

fn map(pairs: Vec<(&str, Reply)>) -> Reply {
    Reply::Map(pairs.into_iter().map(|(k, v)| (bulk(k), v)).collect())
}

/// COMMAND INFO's key specifications of `c`.
pub fn reply(c: &Command) -> Reply {
    to_reply(specs(c))
}

/// COMMAND INFO's key specifications of the subcommand `name`.
pub fn sub_reply(name: &str) -> Reply {
    to_reply(sub_key(name).map(|f| one(f, 2)).into_iter().collect())
}

fn to_reply(specs: Vec<Spec>) -> Reply {
    let spec = |s: Spec| {
        let (bt, bs) = match s.begin {
            Begin::Index(i) => ("index", map(vec![("index", Reply::Int(i))])),
            Begin::Keyword(w, from) => (
                "keyword",
                map(vec![("keyword", bulk(w)), ("startfrom", Reply::Int(from))]),
            ),
            Begin::Unknown => ("unknown", Reply::Map(vec![])),
        };
        let (ft, fs) = match s.find {
            Find::Range(last, step, limit) => (
                "range",
                map(vec![
                    ("lastkey", Reply::Int(last)),
                    ("keystep", Reply::Int(step)),
                    ("limit", Reply::Int(limit)),
                ]),
            ),
            Find::Keynum(idx, first, step) => (
                "keynum",
                map(vec![
                    ("keynumidx", Reply::Int(idx)),
                    ("firstkey", Reply::Int(first)),
                    ("keystep", Reply::Int(step)),
                ]),
            ),
            Find::Unknown => ("unknown", Reply::Map(vec![])),
        };
        map(vec![
            (
                "flags",
                Reply::Set(s.flags.iter().map(|f| Reply::Simple((*f).into())).collect()),
            ),
            ("begin_search", map(vec![("type", bulk(bt)), ("spec", bs)])),
            ("find_keys", map(vec![("type", bulk(ft)), ("spec", fs)])),
        ])
    };
    Reply::Set(specs.into_iter().map(spec).collect())
}
