//! The command table, and one function per command (in the manner of Redis's
//! t_string.c: each function's doc comment spells out its edge cases).
//!
//! A command is one of three kinds ([`Exec`]):
//! - [`Exec::Shard`]: it touches one key and runs on the shard that owns that key.
//! - [`Exec::Split`]: it touches several keys (MGET, MSET, DEL, EXISTS, ...). The server
//!   splits it into one sub-command per shard (the same name, with that shard's keys,
//!   each with the arguments that follow it when `step` > 1), runs each with the same
//!   function and merges the replies as [`Merge`] says.
//! - [`Exec::Server`]: connection state, every shard at once, or administration
//!   (PING, HELLO, AUTH, KEYS, SCAN, DBSIZE, FLUSHALL, INFO, CONFIG, ...); the server
//!   module runs these.
//!
//! Arities and key positions follow Redis's `COMMAND` conventions: `arity` counts the
//! command name, a negative arity means "at least", `first_key`/`last_key`/`step` are
//! argument indexes (`last_key` -1 means the last argument).

use crate::keyspace::Keyspace;
use crate::resp::Reply;

pub mod across;
pub mod bits;
pub mod debug;
pub mod docs;
pub mod float80;
pub mod geo;
pub mod hashes;
pub mod hll;
pub mod keys;
pub mod lcs;
pub mod lists;
pub mod sets;
pub mod sort;
mod steps;
pub mod streams;
pub mod strings;
pub mod transfer;
pub mod zsets;
pub mod zsets_multi;

/// What a shard command is given besides its arguments.
pub struct Ctx<'a> {
    /// The time, in Unix milliseconds, that expiry is judged against.
    pub now_ms: u64,
    /// The shard's log buffer: a mutating command appends its effect here
    /// ([`Ctx::record`]: a key's whole state when it creates it, else its change).
    pub log: &'a mut Vec<u8>,
    /// The database the command runs in (its records name it).
    pub db: u8,
    /// The server is over its memory limit: commands that may grow memory answer
    /// [`OOM`] instead of running (deletions still run).
    pub over_memory: bool,
    /// The bytes of memory the command may add before the server passes its limit
    /// (`u64::MAX`: no limit). A write that would add more answers [`OOM`] and
    /// changes nothing (after reclaiming expired keys of its shard first).
    pub room: u64,
    /// The connection's output buffer, when the caller encodes replies in order as
    /// the commands run (the server's own worker): a command may write its reply
    /// there itself ([`Ctx::bulk`]) instead of building an owned [`Reply`].
    pub out: Option<&'a mut Vec<u8>>,
}

impl<'a> Ctx<'a> {
    /// A context without an output buffer (replies are built as values).
    pub fn new(now_ms: u64, log: &'a mut Vec<u8>) -> Ctx<'a> {
        Ctx {
            now_ms,
            log,
            db: 0,
            over_memory: false,
            room: u64::MAX,
            out: None,
        }
    }

    /// Appends `rec` to the log, in the command's database.
    #[inline]
    pub fn record(&mut self, rec: &crate::log::RecordRef<'_>) {
        crate::log::encode_in(self.db, rec, self.log);
    }

    /// The reply "bulk string `bytes`": encoded straight into the output buffer if
    /// there is one (no copy into a reply value first), else as a [`Reply::Bulk`].
    #[inline]
    pub fn bulk(&mut self, bytes: &[u8]) -> Reply {
        match self.out.as_deref_mut() {
            Some(out) => {
                crate::resp::reply::bulk(bytes, out);
                Reply::Written
            }
            None => Reply::bulk(bytes),
        }
    }

    /// The reply "array of the bulk strings `items`", of which there are exactly `n`:
    /// encoded straight into the output buffer if there is one (no reply value and no
    /// copy of each element first, as LRANGE of many elements wants), else as a
    /// [`Reply::Array`] of [`Reply::Bulk`]s.
    pub fn bulk_array<'b>(&mut self, n: usize, items: impl Iterator<Item = &'b [u8]>) -> Reply {
        match self.out.as_deref_mut() {
            Some(out) => {
                out.push(b'*');
                out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
                out.extend_from_slice(b"\r\n");
                let mut written = 0;
                for x in items {
                    crate::resp::reply::bulk(x, out);
                    written += 1;
                }
                debug_assert_eq!(written, n, "bulk_array: the count given and the items");
                Reply::Written
            }
            None => Reply::Array(items.map(Reply::bulk).collect()),
        }
    }
}

/// The reply to a command that may grow memory when the store is over its limit.
pub const OOM: Reply = Reply::err("OOM command not allowed when used memory > 'maxmemory'.");

/// A shard command: runs on `ks` with the full argument list (`args[0]` is the name),
/// borrowed (from the connection's read buffer, on the server's fast path).
pub type ShardFn = fn(&mut Keyspace, &[&[u8]], &mut Ctx<'_>) -> Reply;

/// An owned argument list borrowed as a shard command takes it.
pub fn borrow_args(args: &[Vec<u8>]) -> Vec<&[u8]> {
    args.iter().map(Vec::as_slice).collect()
}

/// How a command runs.
#[derive(Clone, Copy)]
pub enum Exec {
    /// On the shard that owns `args[first_key]`.
    Shard(ShardFn),
    /// Split by shard, each part run with the function, the replies merged.
    Split(ShardFn, Merge),
    /// By the server.
    Server,
}

/// How the replies of a split command's parts combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merge {
    /// Integers, summed (DEL, EXISTS, UNLINK, TOUCH).
    Sum,
    /// Every part answers `+OK`; so does the whole (MSET). An error from a part wins.
    AllOk,
    /// Arrays with one element per key, put back in the order of the keys (MGET).
    InOrder,
}

/// Command flags (a subset of Redis's).
pub mod flags {
    /// May modify the keyspace (logged; refused while the log cannot be written).
    pub const WRITE: u32 = 1;
    /// Never modifies the keyspace.
    pub const READONLY: u32 = 2;
    /// May grow memory (refused with OOM over the memory limit).
    pub const DENYOOM: u32 = 4;
    /// Administrative.
    pub const ADMIN: u32 = 8;
    /// Allowed before AUTH when a password is set.
    pub const NOAUTH: u32 = 16;
    /// Constant or logarithmic time.
    pub const FAST: u32 = 32;
    /// May block the connection until a key gets data (BLPOP, BZPOPMIN, ...:
    /// `server/blocking.rs`).
    pub const BLOCKING: u32 = 64;
}

/// One entry of the command table.
pub struct Command {
    /// The name, in lower case.
    pub name: &'static str,
    /// Redis's arity: the argument count including the name; negative means at least.
    pub arity: i32,
    /// [`flags`], or-ed.
    pub flags: u32,
    /// Index of the first key argument (0: no keys).
    pub first_key: i32,
    /// Index of the last key argument (-1: the last argument).
    pub last_key: i32,
    /// Distance between key arguments (2 for MSET's key value pairs).
    pub step: i32,
    /// How it runs.
    pub exec: Exec,
    /// Its subcommands (CLIENT LIST, CONFIG GET, ...), if it is a container: the
    /// second argument names one, and that one's arity applies.
    pub subs: &'static [Sub],
}

/// A subcommand of a container command (`client|list`): Redis 7 checks its arity
/// and shows it in COMMAND, and INFO commandstats counts it on its own.
pub struct Sub {
    /// The full name, lower case: `container|sub`.
    pub name: &'static str,
    /// Its arity, counting the container's name and its own.
    pub arity: i32,
    /// [`flags`], or-ed.
    pub flags: u32,
}

impl Sub {
    /// The subcommand's own name (`list` of `client|list`).
    pub fn short(&self) -> &'static str {
        self.name.split_once('|').map_or(self.name, |(_, s)| s)
    }
}

/// Redis's `ERR syntax error`.
pub const SYNTAX_ERR: Reply = Reply::err("ERR syntax error");
/// Redis's reply to a command on a key that holds another type.
pub const WRONGTYPE: Reply =
    Reply::err("WRONGTYPE Operation against a key holding the wrong kind of value");
/// Redis's reply to an argument that must be a 64-bit integer.
pub const NOT_INT: Reply = Reply::err("ERR value is not an integer or out of range");
/// Redis's reply to an argument that must be a float.
pub const NOT_FLOAT: Reply = Reply::err("ERR value is not a valid float");
/// The longest string value (Redis's default `proto-max-bulk-len`, 512 MB).
pub const MAX_STRING: u64 = 512 * 1024 * 1024;
/// Redis's reply to a string that would grow past [`MAX_STRING`].
pub const TOO_LONG: Reply =
    Reply::err("ERR string exceeds maximum allowed size (proto-max-bulk-len)");

/// `ERR invalid expire time in 'set' command` (the command named in lower case).
pub fn invalid_expire(args: &[&[u8]]) -> Reply {
    Reply::error(format!(
        "ERR invalid expire time in '{}' command",
        String::from_utf8_lossy(args[0]).to_ascii_lowercase()
    ))
}

/// Parses a 64-bit signed integer exactly as Redis's `string2ll` does: optional `-`,
/// no `+`, no spaces, no leading zeros (but "0"), at most 20 bytes.
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    if b == b"0" {
        return Some(0);
    }
    let (neg, digits) = match b[0] {
        b'-' => (true, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() || !(b'1'..=b'9').contains(&digits[0]) {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add((c - b'0') as u64)?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            None
        } else {
            Some((v as i64).wrapping_neg())
        }
    } else {
        i64::try_from(v).ok()
    }
}

/// An integer argument, or Redis's `ERR value is not an integer or out of range`.
pub fn arg_i64(b: &[u8]) -> Result<i64, Reply> {
    parse_i64(b).ok_or(NOT_INT)
}

const W: u32 = flags::WRITE;
const R: u32 = flags::READONLY;
const D: u32 = flags::DENYOOM;
const F: u32 = flags::FAST;
const A: u32 = flags::ADMIN;
const N: u32 = flags::NOAUTH;
const B: u32 = flags::BLOCKING;

const fn cmd(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: (i32, i32, i32),
    exec: Exec,
) -> Command {
    Command {
        name,
        arity,
        flags,
        first_key: keys.0,
        last_key: keys.1,
        step: keys.2,
        exec,
        subs: &[],
    }
}

/// A container command: keyless, run by the server, with subcommands.
const fn container(name: &'static str, subs: &'static [Sub]) -> Command {
    Command {
        name,
        arity: -2,
        flags: 0,
        first_key: 0,
        last_key: 0,
        step: 0,
        exec: Exec::Server,
        subs,
    }
}

const fn sub(name: &'static str, arity: i32, flags: u32) -> Sub {
    Sub { name, arity, flags }
}

/// CLIENT's subcommands.
static CLIENT_SUBS: [Sub; 18] = [
    sub("client|id", 2, 0),
    sub("client|getname", 2, 0),
    sub("client|setname", 3, 0),
    sub("client|setinfo", 4, 0),
    sub("client|info", 2, 0),
    sub("client|list", -2, A),
    sub("client|kill", -3, A),
    sub("client|pause", -3, A),
    sub("client|unpause", 2, A),
    sub("client|reply", 3, 0),
    sub("client|no-evict", 3, A),
    sub("client|no-touch", 3, 0),
    sub("client|unblock", -3, A),
    sub("client|tracking", -3, 0),
    sub("client|trackinginfo", 2, 0),
    sub("client|getredir", 2, 0),
    sub("client|caching", 3, 0),
    sub("client|help", 2, 0),
];

static CONFIG_SUBS: [Sub; 5] = [
    sub("config|get", -3, A),
    sub("config|set", -4, A),
    sub("config|resetstat", 2, A),
    sub("config|rewrite", 2, A),
    sub("config|help", 2, 0),
];

static COMMAND_SUBS: [Sub; 7] = [
    sub("command|count", 2, 0),
    sub("command|docs", -2, 0),
    sub("command|getkeys", -4, 0),
    sub("command|getkeysandflags", -4, 0),
    sub("command|info", -2, 0),
    sub("command|list", -2, 0),
    sub("command|help", 2, 0),
];

/// FUNCTION's subcommands: FLUSH answers OK (there is nothing to flush), the others
/// say that weft-kv has no scripting.
static FUNCTION_SUBS: [Sub; 9] = [
    sub("function|delete", 3, 0),
    sub("function|dump", 2, 0),
    sub("function|flush", -2, W),
    sub("function|help", 2, 0),
    sub("function|kill", 2, 0),
    sub("function|list", -2, 0),
    sub("function|load", -3, W | D),
    sub("function|restore", -3, W | D),
    sub("function|stats", 2, 0),
];

/// SCRIPT's subcommands, as FUNCTION's.
static SCRIPT_SUBS: [Sub; 6] = [
    sub("script|debug", 3, 0),
    sub("script|exists", -3, 0),
    sub("script|flush", -2, 0),
    sub("script|help", 2, 0),
    sub("script|kill", 2, 0),
    sub("script|load", 3, 0),
];

const ONE: (i32, i32, i32) = (1, 1, 1);
const ALL: (i32, i32, i32) = (1, -1, 1);
const NONE: (i32, i32, i32) = (0, 0, 0);

use bits as b;
use hashes as h;
use keys as k;
use lists as l;
use sets as st;
use streams as xs;
use strings as s;
use transfer as t;
use zsets as z;

/// OBJECT's subcommands (each names its key second).
static OBJECT_SUBS: [Sub; 5] = [
    sub("object|encoding", 3, R),
    sub("object|freq", 3, R),
    sub("object|help", 2, 0),
    sub("object|idletime", 3, R),
    sub("object|refcount", 3, R),
];

/// SLOWLOG's subcommands.
static SLOWLOG_SUBS: [Sub; 4] = [
    sub("slowlog|get", -2, A),
    sub("slowlog|help", 2, 0),
    sub("slowlog|len", 2, A),
    sub("slowlog|reset", 2, A),
];

/// LATENCY's subcommands.
static LATENCY_SUBS: [Sub; 5] = [
    sub("latency|doctor", 2, A),
    sub("latency|help", 2, 0),
    sub("latency|history", 3, A),
    sub("latency|latest", 2, A),
    sub("latency|reset", -2, A),
];

/// MEMORY's subcommands.
static MEMORY_SUBS: [Sub; 6] = [
    sub("memory|doctor", 2, 0),
    sub("memory|help", 2, 0),
    sub("memory|malloc-stats", 2, 0),
    sub("memory|purge", 2, 0),
    sub("memory|stats", 2, 0),
    sub("memory|usage", -3, R),
];

/// PUBSUB's subcommands.
static PUBSUB_SUBS: [Sub; 6] = [
    sub("pubsub|channels", -2, 0),
    sub("pubsub|help", 2, 0),
    sub("pubsub|numpat", 2, 0),
    sub("pubsub|numsub", -2, 0),
    sub("pubsub|shardchannels", -2, 0),
    sub("pubsub|shardnumsub", -2, 0),
];

/// The table: arities, flags and key positions as Redis 7.0's `COMMAND INFO` shows.
static TABLE: [Command; 225] = [
    // strings
    cmd("get", 2, R | F, ONE, Exec::Shard(s::get)),
    cmd("set", -3, W | D, ONE, Exec::Shard(s::set)),
    cmd("setnx", 3, W | D | F, ONE, Exec::Shard(s::setnx)),
    cmd("setex", 4, W | D, ONE, Exec::Shard(s::setex)),
    cmd("psetex", 4, W | D, ONE, Exec::Shard(s::psetex)),
    cmd("getset", 3, W | D | F, ONE, Exec::Shard(s::getset)),
    cmd("getdel", 2, W | F, ONE, Exec::Shard(s::getdel)),
    cmd("getex", -2, W | F, ONE, Exec::Shard(s::getex)),
    cmd("mget", -2, R | F, ALL, Exec::Split(s::mget, Merge::InOrder)),
    cmd(
        "mset",
        -3,
        W | D,
        (1, -1, 2),
        Exec::Split(s::mset, Merge::AllOk),
    ),
    cmd("incr", 2, W | D | F, ONE, Exec::Shard(s::incr)),
    cmd("decr", 2, W | D | F, ONE, Exec::Shard(s::decr)),
    cmd("incrby", 3, W | D | F, ONE, Exec::Shard(s::incrby)),
    cmd("decrby", 3, W | D | F, ONE, Exec::Shard(s::decrby)),
    cmd(
        "incrbyfloat",
        3,
        W | D | F,
        ONE,
        Exec::Shard(s::incrbyfloat),
    ),
    cmd("append", 3, W | D | F, ONE, Exec::Shard(s::append)),
    cmd("strlen", 2, R | F, ONE, Exec::Shard(s::strlen)),
    cmd("getrange", 4, R, ONE, Exec::Shard(s::getrange)),
    cmd("substr", 4, R, ONE, Exec::Shard(s::getrange)),
    cmd("setrange", 4, W | D, ONE, Exec::Shard(s::setrange)),
    // keys
    cmd("del", -2, W, ALL, Exec::Split(k::del, Merge::Sum)),
    cmd("unlink", -2, W | F, ALL, Exec::Split(k::del, Merge::Sum)),
    cmd("exists", -2, R | F, ALL, Exec::Split(k::exists, Merge::Sum)),
    cmd("touch", -2, R | F, ALL, Exec::Split(k::exists, Merge::Sum)),
    cmd("expire", -3, W | F, ONE, Exec::Shard(k::expire)),
    cmd("pexpire", -3, W | F, ONE, Exec::Shard(k::pexpire)),
    cmd("expireat", -3, W | F, ONE, Exec::Shard(k::expireat)),
    cmd("pexpireat", -3, W | F, ONE, Exec::Shard(k::pexpireat)),
    cmd("ttl", 2, R | F, ONE, Exec::Shard(k::ttl)),
    cmd("pttl", 2, R | F, ONE, Exec::Shard(k::pttl)),
    cmd("expiretime", 2, R | F, ONE, Exec::Shard(k::expiretime)),
    cmd("pexpiretime", 2, R | F, ONE, Exec::Shard(k::pexpiretime)),
    cmd("persist", 2, W | F, ONE, Exec::Shard(k::persist)),
    cmd("type", 2, R | F, ONE, Exec::Shard(k::type_)),
    // the server's own
    cmd("ping", -1, F, NONE, Exec::Server),
    cmd("echo", 2, F, NONE, Exec::Server),
    cmd("hello", -1, F | N, NONE, Exec::Server),
    cmd("auth", -2, F | N, NONE, Exec::Server),
    cmd("select", 2, F, NONE, Exec::Server),
    cmd("quit", -1, F | N, NONE, Exec::Server),
    cmd("reset", 1, F | N, NONE, Exec::Server),
    container("client", &CLIENT_SUBS),
    cmd("info", -1, 0, NONE, Exec::Server),
    container("config", &CONFIG_SUBS),
    cmd("command", -1, 0, NONE, Exec::Server).with_subs(&COMMAND_SUBS),
    cmd("dbsize", 1, R | F, NONE, Exec::Server),
    cmd("keys", 2, R, NONE, Exec::Server),
    cmd("scan", -2, R, NONE, Exec::Server),
    cmd("flushdb", -1, W, NONE, Exec::Server),
    cmd("flushall", -1, W, NONE, Exec::Server),
    cmd("save", 1, A, NONE, Exec::Server),
    cmd("bgsave", -1, A, NONE, Exec::Server),
    cmd("bgrewriteaof", 1, A, NONE, Exec::Server),
    cmd("lastsave", 1, F, NONE, Exec::Server),
    cmd("shutdown", -1, A, NONE, Exec::Server),
    cmd("time", 1, F, NONE, Exec::Server),
    cmd("wait", 3, 0, NONE, Exec::Server),
    // scripting, which weft-kv does not have: FUNCTION FLUSH and SCRIPT FLUSH answer OK
    // (test suites flush between tests), the rest a clear error.
    container("function", &FUNCTION_SUBS),
    container("script", &SCRIPT_SUBS),
    cmd("eval", -3, 0, NONE, Exec::Server),
    cmd("evalsha", -3, 0, NONE, Exec::Server),
    cmd("eval_ro", -3, R, NONE, Exec::Server),
    cmd("evalsha_ro", -3, R, NONE, Exec::Server),
    cmd("fcall", -3, 0, NONE, Exec::Server),
    cmd("fcall_ro", -3, R, NONE, Exec::Server),
    cmd("role", 1, F, NONE, Exec::Server),
    // keys, of every type, and databases
    cmd("object", -2, 0, (2, 2, 1), Exec::Shard(k::object)).with_subs(&OBJECT_SUBS),
    cmd("move", 3, W | F, ONE, Exec::Server),
    cmd("swapdb", 3, W | F, NONE, Exec::Server),
    // hashes
    cmd("hset", -4, W | D | F, ONE, Exec::Shard(h::hset)),
    cmd("hsetnx", 4, W | D | F, ONE, Exec::Shard(h::hsetnx)),
    cmd("hmset", -4, W | D | F, ONE, Exec::Shard(h::hmset)),
    cmd("hget", 3, R | F, ONE, Exec::Shard(h::hget)),
    cmd("hmget", -3, R | F, ONE, Exec::Shard(h::hmget)),
    cmd("hdel", -3, W | F, ONE, Exec::Shard(h::hdel)),
    cmd("hlen", 2, R | F, ONE, Exec::Shard(h::hlen)),
    cmd("hstrlen", 3, R | F, ONE, Exec::Shard(h::hstrlen)),
    cmd("hexists", 3, R | F, ONE, Exec::Shard(h::hexists)),
    cmd("hkeys", 2, R, ONE, Exec::Shard(h::hkeys)),
    cmd("hvals", 2, R, ONE, Exec::Shard(h::hvals)),
    cmd("hgetall", 2, R, ONE, Exec::Shard(h::hgetall)),
    cmd("hincrby", 4, W | D | F, ONE, Exec::Shard(h::hincrby)),
    cmd(
        "hincrbyfloat",
        4,
        W | D | F,
        ONE,
        Exec::Shard(h::hincrbyfloat),
    ),
    cmd("hrandfield", -2, R, ONE, Exec::Shard(h::hrandfield)),
    cmd("hscan", -3, R, ONE, Exec::Shard(h::hscan)),
    // run by `exec` as one transaction over the keys' shards
    cmd("msetnx", -3, W | D, (1, -1, 2), Exec::Server),
    // lists (LMOVE, RPOPLPUSH and LMPOP over several shards run as transactions:
    // `lists::run_server`)
    cmd("lpush", -3, W | D | F, ONE, Exec::Shard(l::lpush)),
    cmd("rpush", -3, W | D | F, ONE, Exec::Shard(l::rpush)),
    cmd("lpushx", -3, W | D | F, ONE, Exec::Shard(l::lpushx)),
    cmd("rpushx", -3, W | D | F, ONE, Exec::Shard(l::rpushx)),
    cmd("lpop", -2, W | F, ONE, Exec::Shard(l::lpop)),
    cmd("rpop", -2, W | F, ONE, Exec::Shard(l::rpop)),
    cmd("llen", 2, R | F, ONE, Exec::Shard(l::llen)),
    cmd("lrange", 4, R, ONE, Exec::Shard(l::lrange)),
    cmd("lindex", 3, R, ONE, Exec::Shard(l::lindex)),
    cmd("lset", 4, W | D, ONE, Exec::Shard(l::lset)),
    cmd("linsert", 5, W | D, ONE, Exec::Shard(l::linsert)),
    cmd("lrem", 4, W, ONE, Exec::Shard(l::lrem)),
    cmd("ltrim", 4, W, ONE, Exec::Shard(l::ltrim)),
    cmd("lpos", -3, R, ONE, Exec::Shard(l::lpos)),
    cmd("lmpop", -4, W, NONE, Exec::Server),
    cmd("lmove", 5, W | D, (1, 2, 1), Exec::Server),
    cmd("rpoplpush", 3, W | D, (1, 2, 1), Exec::Server),
    // bitmaps (BITOP over several shards runs as a transaction: `across.rs`)
    cmd("setbit", 4, W | D, ONE, Exec::Shard(b::setbit)),
    cmd("getbit", 3, R | F, ONE, Exec::Shard(b::getbit)),
    cmd("bitcount", -2, R, ONE, Exec::Shard(b::bitcount)),
    cmd("bitpos", -3, R, ONE, Exec::Shard(b::bitpos)),
    cmd("bitfield", -2, W | D, ONE, Exec::Shard(b::bitfield)),
    cmd("bitfield_ro", -2, R | F, ONE, Exec::Shard(b::bitfield_ro)),
    cmd("bitop", -4, W | D, (2, -1, 1), Exec::Server),
    // strings and keys of every type over several shards or databases (`across.rs`;
    // RENAME, COPY, DUMP and RESTORE move a value as its full-state records:
    // `transfer.rs`)
    cmd("lcs", -3, R, (1, 2, 1), Exec::Server),
    cmd("rename", 3, W, (1, 2, 1), Exec::Server),
    cmd("renamenx", 3, W | F, (1, 2, 1), Exec::Server),
    cmd("copy", -3, W | D, (1, 2, 1), Exec::Server),
    cmd("dump", 2, R, ONE, Exec::Shard(t::dump)),
    cmd("restore", -4, W | D, ONE, Exec::Shard(t::restore)),
    cmd("randomkey", 1, R, NONE, Exec::Server),
    // HyperLogLog (PFCOUNT and PFMERGE over several shards run as transactions:
    // `hll::run_server`)
    cmd("pfadd", -2, W | D | F, ONE, Exec::Shard(hll::pfadd)),
    cmd("pfcount", -2, R, ALL, Exec::Server),
    cmd("pfmerge", -2, W | D, ALL, Exec::Server),
    cmd(
        "pfdebug",
        3,
        W | D | A,
        (2, 2, 1),
        Exec::Shard(hll::pfdebug),
    ),
    cmd("pfselftest", 1, A, NONE, Exec::Server),
    // pub/sub (server/pubsub.rs)
    cmd("subscribe", -2, 0, NONE, Exec::Server),
    cmd("unsubscribe", -1, 0, NONE, Exec::Server),
    cmd("psubscribe", -2, 0, NONE, Exec::Server),
    cmd("punsubscribe", -1, 0, NONE, Exec::Server),
    cmd("ssubscribe", -2, 0, NONE, Exec::Server),
    cmd("sunsubscribe", -1, 0, NONE, Exec::Server),
    cmd("publish", 3, F, NONE, Exec::Server),
    cmd("spublish", 3, F, NONE, Exec::Server),
    container("pubsub", &PUBSUB_SUBS),
    // sets (SMOVE, the algebra and its STORE forms run as transactions over their
    // keys' shards: `sets::run_multi`)
    cmd("sadd", -3, W | D | F, ONE, Exec::Shard(st::sadd)),
    cmd("srem", -3, W | F, ONE, Exec::Shard(st::srem)),
    cmd("scard", 2, R | F, ONE, Exec::Shard(st::scard)),
    cmd("sismember", 3, R | F, ONE, Exec::Shard(st::sismember)),
    cmd("smismember", -3, R | F, ONE, Exec::Shard(st::smismember)),
    cmd("smembers", 2, R, ONE, Exec::Shard(st::smembers)),
    cmd("srandmember", -2, R, ONE, Exec::Shard(st::srandmember)),
    cmd("spop", -2, W | F, ONE, Exec::Shard(st::spop)),
    cmd("sscan", -3, R, ONE, Exec::Shard(st::sscan)),
    cmd("smove", 4, W | F, (1, 2, 1), Exec::Server),
    cmd("sinter", -2, R, ALL, Exec::Server),
    cmd("sintercard", -3, R, NONE, Exec::Server),
    cmd("sunion", -2, R, ALL, Exec::Server),
    cmd("sdiff", -2, R, ALL, Exec::Server),
    cmd("sinterstore", -3, W | D, ALL, Exec::Server),
    cmd("sunionstore", -3, W | D, ALL, Exec::Server),
    cmd("sdiffstore", -3, W | D, ALL, Exec::Server),
    // sorted sets (the commands over several keys run as transactions over their
    // keys' shards: `zsets_multi.rs`)
    cmd("zadd", -4, W | D | F, ONE, Exec::Shard(z::zadd)),
    cmd("zincrby", 4, W | D | F, ONE, Exec::Shard(z::zincrby)),
    cmd("zrem", -3, W | F, ONE, Exec::Shard(z::zrem)),
    cmd("zcard", 2, R | F, ONE, Exec::Shard(z::zcard)),
    cmd("zscore", 3, R | F, ONE, Exec::Shard(z::zscore)),
    cmd("zmscore", -3, R | F, ONE, Exec::Shard(z::zmscore)),
    cmd("zrank", 3, R | F, ONE, Exec::Shard(z::zrank)),
    cmd("zrevrank", 3, R | F, ONE, Exec::Shard(z::zrevrank)),
    cmd("zcount", 4, R | F, ONE, Exec::Shard(z::zcount)),
    cmd("zlexcount", 4, R | F, ONE, Exec::Shard(z::zlexcount)),
    cmd("zrange", -4, R, ONE, Exec::Shard(z::zrange)),
    cmd("zrangebyscore", -4, R, ONE, Exec::Shard(z::zrangebyscore)),
    cmd(
        "zrevrangebyscore",
        -4,
        R,
        ONE,
        Exec::Shard(z::zrevrangebyscore),
    ),
    cmd("zrangebylex", -4, R, ONE, Exec::Shard(z::zrangebylex)),
    cmd("zrevrangebylex", -4, R, ONE, Exec::Shard(z::zrevrangebylex)),
    cmd("zrevrange", -4, R, ONE, Exec::Shard(z::zrevrange)),
    cmd(
        "zremrangebyrank",
        4,
        W,
        ONE,
        Exec::Shard(z::zremrangebyrank),
    ),
    cmd(
        "zremrangebyscore",
        4,
        W,
        ONE,
        Exec::Shard(z::zremrangebyscore),
    ),
    cmd("zremrangebylex", 4, W, ONE, Exec::Shard(z::zremrangebylex)),
    cmd("zpopmin", -2, W | F, ONE, Exec::Shard(z::zpopmin)),
    cmd("zpopmax", -2, W | F, ONE, Exec::Shard(z::zpopmax)),
    cmd("zrandmember", -2, R, ONE, Exec::Shard(z::zrandmember)),
    cmd("zscan", -3, R, ONE, Exec::Shard(z::zscan)),
    cmd("zrangestore", -5, W | D, (1, 2, 1), Exec::Server),
    cmd("zunion", -3, R, NONE, Exec::Server),
    cmd("zinter", -3, R, NONE, Exec::Server),
    cmd("zdiff", -3, R, NONE, Exec::Server),
    cmd("zintercard", -3, R, NONE, Exec::Server),
    cmd("zunionstore", -4, W | D, ONE, Exec::Server),
    cmd("zinterstore", -4, W | D, ONE, Exec::Server),
    cmd("zdiffstore", -4, W | D, ONE, Exec::Server),
    cmd("zmpop", -4, W, NONE, Exec::Server),
    // geo sets: sorted sets of geohashes (`geo.rs`; the forms that may STORE run as
    // transactions over the source's and the destination's shards)
    cmd("geoadd", -5, W | D, ONE, Exec::Shard(geo::geoadd)),
    cmd("geodist", -4, R, ONE, Exec::Shard(geo::geodist)),
    cmd("geohash", -2, R, ONE, Exec::Shard(geo::geohash)),
    cmd("geopos", -2, R, ONE, Exec::Shard(geo::geopos)),
    cmd("geosearch", -7, R, ONE, Exec::Shard(geo::geosearch)),
    cmd("georadius_ro", -6, R, ONE, Exec::Shard(geo::georadius_ro)),
    cmd(
        "georadiusbymember_ro",
        -5,
        R,
        ONE,
        Exec::Shard(geo::georadiusbymember_ro),
    ),
    cmd("georadius", -6, W | D, ONE, Exec::Server),
    cmd("georadiusbymember", -5, W | D, ONE, Exec::Server),
    cmd("geosearchstore", -8, W | D, (1, 2, 1), Exec::Server),
    // blocking pops (`server/blocking.rs`: the server runs them; inside MULTI they
    // do not block)
    cmd("blpop", -3, W | B, (1, -2, 1), Exec::Server),
    cmd("brpop", -3, W | B, (1, -2, 1), Exec::Server),
    cmd("brpoplpush", 4, W | D | B, (1, 2, 1), Exec::Server),
    cmd("blmove", 6, W | D | B, (1, 2, 1), Exec::Server),
    cmd("blmpop", -5, W | B, NONE, Exec::Server),
    cmd("bzpopmin", -3, W | B | F, (1, -2, 1), Exec::Server),
    cmd("bzpopmax", -3, W | B | F, (1, -2, 1), Exec::Server),
    cmd("bzmpop", -5, W | B, NONE, Exec::Server),
    // transactions (`server/multi.rs`)
    cmd("multi", 1, F, NONE, Exec::Server),
    cmd("exec", 1, 0, NONE, Exec::Server),
    cmd("discard", 1, F, NONE, Exec::Server),
    cmd("watch", -2, F, ALL, Exec::Server),
    cmd("unwatch", 1, F, NONE, Exec::Server),
    // SORT over the shards its patterns and destination name (`sort.rs`); its key
    // is argument 1 and STORE's destination another (COMMAND GETKEYS finds it)
    cmd("sort", -2, W | D, ONE, Exec::Server),
    cmd("sort_ro", -2, R, ONE, Exec::Server),
    // diagnostics (`server/slowlog.rs`, `server/memory.rs`)
    container("slowlog", &SLOWLOG_SUBS),
    container("latency", &LATENCY_SUBS),
    container("memory", &MEMORY_SUBS),
    cmd("lolwut", -1, R | F, NONE, Exec::Server),
    // DEBUG (`debug.rs`)
    cmd("debug", -2, A, NONE, Exec::Server),
    // streams (`streams.rs`; XREAD and XREADGROUP over several shards as transactions)
    cmd("xadd", -5, W | D | F, ONE, Exec::Shard(xs::xadd)),
    cmd("xlen", 2, R | F, ONE, Exec::Shard(xs::xlen)),
    cmd("xrange", -4, R, ONE, Exec::Shard(xs::xrange)),
    cmd("xrevrange", -4, R, ONE, Exec::Shard(xs::xrevrange)),
    cmd("xdel", -3, W | F, ONE, Exec::Shard(xs::xdel)),
    cmd("xtrim", -4, W, ONE, Exec::Shard(xs::xtrim)),
    cmd("xsetid", -3, W | D | F, ONE, Exec::Shard(xs::xsetid)),
    cmd("xread", -4, R | B, NONE, Exec::Server),
    cmd("xreadgroup", -7, W | B, NONE, Exec::Server),
    cmd("xack", -4, W | F, ONE, Exec::Shard(xs::xack)),
    cmd("xpending", -3, R, ONE, Exec::Shard(xs::xpending)),
    cmd("xclaim", -6, W | F, ONE, Exec::Shard(xs::xclaim)),
    cmd("xautoclaim", -6, W | F, ONE, Exec::Shard(xs::xautoclaim)),
    cmd("xgroup", -2, W | D, (2, 2, 1), Exec::Shard(xs::xgroup)).with_subs(&XGROUP_SUBS),
    cmd("xinfo", -2, R, (2, 2, 1), Exec::Shard(xs::xinfo)).with_subs(&XINFO_SUBS),
];

/// XGROUP's subcommands (each names its key second).
static XGROUP_SUBS: [Sub; 6] = [
    sub("xgroup|create", -5, W | D),
    sub("xgroup|createconsumer", 5, W | D),
    sub("xgroup|delconsumer", 5, W),
    sub("xgroup|destroy", 4, W),
    sub("xgroup|help", 2, 0),
    sub("xgroup|setid", -5, W),
];

/// XINFO's subcommands (each names its key second).
static XINFO_SUBS: [Sub; 4] = [
    sub("xinfo|consumers", 4, R),
    sub("xinfo|groups", 3, R),
    sub("xinfo|help", 2, 0),
    sub("xinfo|stream", -3, R),
];

/// Whether two names are equal (in a constant).
const fn same(a: &[u8], b: &[u8]) -> bool {
    match (a, b) {
        ([x, a @ ..], [y, b @ ..]) => *x == *y && same(a, b),
        ([], []) => true,
        _ => false,
    }
}

/// The place in [`TABLE`] of the command `name`, worked out when compiling (a name
/// that is not there fails the build).
const fn at(name: &str) -> usize {
    let mut i = 0;
    while i < TABLE.len() {
        if same(TABLE[i].name.as_bytes(), name.as_bytes()) {
            return i;
        }
        i += 1;
    }
    panic!("a command of the table")
}

/// The index in [`TABLE`] of a command whose name is given in lower case.
fn index(lower: &[u8]) -> Option<usize> {
    // `match` on byte strings compiles to a length switch and short comparisons; each
    // place is found by name when compiled, so it does not depend on the table's order.
    Some(match lower {
        b"get" => const { at("get") },
        b"set" => const { at("set") },
        b"setnx" => const { at("setnx") },
        b"setex" => const { at("setex") },
        b"psetex" => const { at("psetex") },
        b"getset" => const { at("getset") },
        b"getdel" => const { at("getdel") },
        b"getex" => const { at("getex") },
        b"mget" => const { at("mget") },
        b"mset" => const { at("mset") },
        b"incr" => const { at("incr") },
        b"decr" => const { at("decr") },
        b"incrby" => const { at("incrby") },
        b"decrby" => const { at("decrby") },
        b"incrbyfloat" => const { at("incrbyfloat") },
        b"append" => const { at("append") },
        b"strlen" => const { at("strlen") },
        b"getrange" => const { at("getrange") },
        b"substr" => const { at("substr") },
        b"setrange" => const { at("setrange") },
        b"del" => const { at("del") },
        b"unlink" => const { at("unlink") },
        b"exists" => const { at("exists") },
        b"touch" => const { at("touch") },
        b"expire" => const { at("expire") },
        b"pexpire" => const { at("pexpire") },
        b"expireat" => const { at("expireat") },
        b"pexpireat" => const { at("pexpireat") },
        b"ttl" => const { at("ttl") },
        b"pttl" => const { at("pttl") },
        b"expiretime" => const { at("expiretime") },
        b"pexpiretime" => const { at("pexpiretime") },
        b"persist" => const { at("persist") },
        b"type" => const { at("type") },
        b"ping" => const { at("ping") },
        b"echo" => const { at("echo") },
        b"hello" => const { at("hello") },
        b"auth" => const { at("auth") },
        b"select" => const { at("select") },
        b"quit" => const { at("quit") },
        b"reset" => const { at("reset") },
        b"client" => const { at("client") },
        b"info" => const { at("info") },
        b"config" => const { at("config") },
        b"command" => const { at("command") },
        b"dbsize" => const { at("dbsize") },
        b"keys" => const { at("keys") },
        b"scan" => const { at("scan") },
        b"flushdb" => const { at("flushdb") },
        b"flushall" => const { at("flushall") },
        b"save" => const { at("save") },
        b"bgsave" => const { at("bgsave") },
        b"bgrewriteaof" => const { at("bgrewriteaof") },
        b"lastsave" => const { at("lastsave") },
        b"shutdown" => const { at("shutdown") },
        b"time" => const { at("time") },
        b"wait" => const { at("wait") },
        b"function" => const { at("function") },
        b"script" => const { at("script") },
        b"eval" => const { at("eval") },
        b"evalsha" => const { at("evalsha") },
        b"eval_ro" => const { at("eval_ro") },
        b"evalsha_ro" => const { at("evalsha_ro") },
        b"fcall" => const { at("fcall") },
        b"fcall_ro" => const { at("fcall_ro") },
        b"role" => const { at("role") },
        b"object" => const { at("object") },
        b"move" => const { at("move") },
        b"swapdb" => const { at("swapdb") },
        b"hset" => const { at("hset") },
        b"hsetnx" => const { at("hsetnx") },
        b"hmset" => const { at("hmset") },
        b"hget" => const { at("hget") },
        b"hmget" => const { at("hmget") },
        b"hdel" => const { at("hdel") },
        b"hlen" => const { at("hlen") },
        b"hstrlen" => const { at("hstrlen") },
        b"hexists" => const { at("hexists") },
        b"hkeys" => const { at("hkeys") },
        b"hvals" => const { at("hvals") },
        b"hgetall" => const { at("hgetall") },
        b"hincrby" => const { at("hincrby") },
        b"hincrbyfloat" => const { at("hincrbyfloat") },
        b"hrandfield" => const { at("hrandfield") },
        b"hscan" => const { at("hscan") },
        b"msetnx" => const { at("msetnx") },
        b"lpush" => const { at("lpush") },
        b"rpush" => const { at("rpush") },
        b"lpushx" => const { at("lpushx") },
        b"rpushx" => const { at("rpushx") },
        b"lpop" => const { at("lpop") },
        b"rpop" => const { at("rpop") },
        b"llen" => const { at("llen") },
        b"lrange" => const { at("lrange") },
        b"lindex" => const { at("lindex") },
        b"lset" => const { at("lset") },
        b"linsert" => const { at("linsert") },
        b"lrem" => const { at("lrem") },
        b"ltrim" => const { at("ltrim") },
        b"lpos" => const { at("lpos") },
        b"lmpop" => const { at("lmpop") },
        b"lmove" => const { at("lmove") },
        b"rpoplpush" => const { at("rpoplpush") },
        b"setbit" => const { at("setbit") },
        b"getbit" => const { at("getbit") },
        b"bitcount" => const { at("bitcount") },
        b"bitpos" => const { at("bitpos") },
        b"bitfield" => const { at("bitfield") },
        b"bitfield_ro" => const { at("bitfield_ro") },
        b"bitop" => const { at("bitop") },
        b"lcs" => const { at("lcs") },
        b"rename" => const { at("rename") },
        b"renamenx" => const { at("renamenx") },
        b"copy" => const { at("copy") },
        b"dump" => const { at("dump") },
        b"restore" => const { at("restore") },
        b"randomkey" => const { at("randomkey") },
        b"pfadd" => const { at("pfadd") },
        b"pfcount" => const { at("pfcount") },
        b"pfmerge" => const { at("pfmerge") },
        b"pfdebug" => const { at("pfdebug") },
        b"pfselftest" => const { at("pfselftest") },
        b"subscribe" => const { at("subscribe") },
        b"unsubscribe" => const { at("unsubscribe") },
        b"psubscribe" => const { at("psubscribe") },
        b"punsubscribe" => const { at("punsubscribe") },
        b"ssubscribe" => const { at("ssubscribe") },
        b"sunsubscribe" => const { at("sunsubscribe") },
        b"publish" => const { at("publish") },
        b"spublish" => const { at("spublish") },
        b"pubsub" => const { at("pubsub") },
        b"sadd" => const { at("sadd") },
        b"srem" => const { at("srem") },
        b"scard" => const { at("scard") },
        b"sismember" => const { at("sismember") },
        b"smismember" => const { at("smismember") },
        b"smembers" => const { at("smembers") },
        b"srandmember" => const { at("srandmember") },
        b"spop" => const { at("spop") },
        b"sscan" => const { at("sscan") },
        b"smove" => const { at("smove") },
        b"sinter" => const { at("sinter") },
        b"sintercard" => const { at("sintercard") },
        b"sunion" => const { at("sunion") },
        b"sdiff" => const { at("sdiff") },
        b"sinterstore" => const { at("sinterstore") },
        b"sunionstore" => const { at("sunionstore") },
        b"sdiffstore" => const { at("sdiffstore") },
        b"zadd" => const { at("zadd") },
        b"zincrby" => const { at("zincrby") },
        b"zrem" => const { at("zrem") },
        b"zcard" => const { at("zcard") },
        b"zscore" => const { at("zscore") },
        b"zmscore" => const { at("zmscore") },
        b"zrank" => const { at("zrank") },
        b"zrevrank" => const { at("zrevrank") },
        b"zcount" => const { at("zcount") },
        b"zlexcount" => const { at("zlexcount") },
        b"zrange" => const { at("zrange") },
        b"zrangebyscore" => const { at("zrangebyscore") },
        b"zrevrangebyscore" => const { at("zrevrangebyscore") },
        b"zrangebylex" => const { at("zrangebylex") },
        b"zrevrangebylex" => const { at("zrevrangebylex") },
        b"zrevrange" => const { at("zrevrange") },
        b"zremrangebyrank" => const { at("zremrangebyrank") },
        b"zremrangebyscore" => const { at("zremrangebyscore") },
        b"zremrangebylex" => const { at("zremrangebylex") },
        b"zpopmin" => const { at("zpopmin") },
        b"zpopmax" => const { at("zpopmax") },
        b"zrandmember" => const { at("zrandmember") },
        b"zscan" => const { at("zscan") },
        b"zrangestore" => const { at("zrangestore") },
        b"zunion" => const { at("zunion") },
        b"zinter" => const { at("zinter") },
        b"zdiff" => const { at("zdiff") },
        b"zintercard" => const { at("zintercard") },
        b"zunionstore" => const { at("zunionstore") },
        b"zinterstore" => const { at("zinterstore") },
        b"zdiffstore" => const { at("zdiffstore") },
        b"zmpop" => const { at("zmpop") },
        b"geoadd" => const { at("geoadd") },
        b"geodist" => const { at("geodist") },
        b"geohash" => const { at("geohash") },
        b"geopos" => const { at("geopos") },
        b"geosearch" => const { at("geosearch") },
        b"georadius_ro" => const { at("georadius_ro") },
        b"georadiusbymember_ro" => const { at("georadiusbymember_ro") },
        b"georadius" => const { at("georadius") },
        b"georadiusbymember" => const { at("georadiusbymember") },
        b"geosearchstore" => const { at("geosearchstore") },
        b"blpop" => const { at("blpop") },
        b"brpop" => const { at("brpop") },
        b"brpoplpush" => const { at("brpoplpush") },
        b"blmove" => const { at("blmove") },
        b"blmpop" => const { at("blmpop") },
        b"bzpopmin" => const { at("bzpopmin") },
        b"bzpopmax" => const { at("bzpopmax") },
        b"bzmpop" => const { at("bzmpop") },
        b"multi" => const { at("multi") },
        b"exec" => const { at("exec") },
        b"discard" => const { at("discard") },
        b"watch" => const { at("watch") },
        b"unwatch" => const { at("unwatch") },
        b"sort" => const { at("sort") },
        b"sort_ro" => const { at("sort_ro") },
        b"slowlog" => const { at("slowlog") },
        b"latency" => const { at("latency") },
        b"memory" => const { at("memory") },
        b"lolwut" => const { at("lolwut") },
        b"debug" => const { at("debug") },
        b"xadd" => const { at("xadd") },
        b"xlen" => const { at("xlen") },
        b"xrange" => const { at("xrange") },
        b"xrevrange" => const { at("xrevrange") },
        b"xdel" => const { at("xdel") },
        b"xtrim" => const { at("xtrim") },
        b"xsetid" => const { at("xsetid") },
        b"xread" => const { at("xread") },
        b"xreadgroup" => const { at("xreadgroup") },
        b"xack" => const { at("xack") },
        b"xpending" => const { at("xpending") },
        b"xclaim" => const { at("xclaim") },
        b"xautoclaim" => const { at("xautoclaim") },
        b"xgroup" => const { at("xgroup") },
        b"xinfo" => const { at("xinfo") },
        _ => return None,
    })
}

/// The command named `name` (any case), if there is one.
pub fn lookup(name: &[u8]) -> Option<&'static Command> {
    let mut buf = [0u8; 24];
    let lower = buf.get_mut(..name.len())?;
    for (d, s) in lower.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    index(lower).map(|i| &TABLE[i])
}

/// Every command, in table order (for COMMAND and COMMAND COUNT).
pub fn table() -> &'static [Command] {
    &TABLE
}

impl Command {
    const fn with_subs(mut self, subs: &'static [Sub]) -> Command {
        self.subs = subs;
        self
    }

    /// This command's position in [`table`], its number in statistics.
    pub fn id(&self) -> usize {
        let at = (self as *const Command as usize - TABLE.as_ptr() as usize)
            / std::mem::size_of::<Command>();
        debug_assert!(std::ptr::eq(&TABLE[at], self), "a command of the table");
        at
    }

    /// The subcommand `args[1]` names (any case), if this is a container and it has it.
    pub fn sub<A: AsRef<[u8]>>(&self, args: &[A]) -> Option<&'static Sub> {
        let name = args.get(1)?.as_ref();
        self.subs
            .iter()
            .find(|s| s.short().as_bytes().eq_ignore_ascii_case(name))
    }
}

/// How many numbers [`stat_id`] gives: one per command, one per subcommand.
pub fn stat_ids() -> usize {
    TABLE.len() + TABLE.iter().map(|c| c.subs.len()).sum::<usize>()
}

/// The number under which statistics count `cmd` run with `args`: its subcommand's,
/// for a container given one (`None` when it does not have the one named), else its
/// own.
pub fn stat_id<A: AsRef<[u8]>>(cmd: &Command, args: &[A]) -> Option<usize> {
    if cmd.subs.is_empty() || args.len() < 2 {
        return Some(cmd.id());
    }
    let sub = cmd.sub(args)?;
    let before: usize = TABLE[..cmd.id()].iter().map(|c| c.subs.len()).sum();
    let at = (sub as *const Sub as usize - cmd.subs.as_ptr() as usize) / std::mem::size_of::<Sub>();
    Some(TABLE.len() + before + at)
}

/// The name statistics show for a [`stat_id`]: `get`, `client|list`.
pub fn stat_name(id: usize) -> &'static str {
    if let Some(c) = TABLE.get(id) {
        return c.name;
    }
    let mut at = id - TABLE.len();
    for c in &TABLE {
        if at < c.subs.len() {
            return c.subs[at].name;
        }
        at -= c.subs.len();
    }
    panic!("no command has statistics number {id}")
}

/// The longest key or value weft-kv keeps: the log's [`crate::log::MAX_VALUE`] (1 GiB),
/// so every value accepted is one recovery reads back. The server never sees a longer
/// argument (`--max-bulk` is capped at it, and APPEND/SETRANGE stop at `--max-bulk`:
/// [`strings::max_string`]); the embedded store checks with [`check_lengths`].
pub const MAX_ARG: usize = crate::log::MAX_VALUE;
const _: () = assert!(MAX_STRING <= MAX_ARG as u64);

/// `ERR string exceeds maximum allowed size ...` for an argument longer than
/// [`MAX_ARG`], naming its length and the limit.
pub fn check_lengths<A: AsRef<[u8]>>(args: &[A]) -> Result<(), Reply> {
    match args.iter().map(|a| a.as_ref().len()).find(|&n| n > MAX_ARG) {
        Some(n) => Err(Reply::error(format!(
            "ERR string exceeds maximum allowed size: an argument of {n} bytes, and a \
             key or value of weft-kv holds at most {MAX_ARG} bytes"
        ))),
        None => Ok(()),
    }
}

/// Checks `args` against `cmd`'s arity, and a container's subcommand against its
/// own: the standard `ERR wrong number of arguments for 'get' command` (or
/// `'client|kill'`) otherwise, and Redis's `ERR unknown subcommand 'x'. Try CLIENT
/// HELP.` for a subcommand the container does not have.
pub fn check_arity<A: AsRef<[u8]>>(cmd: &Command, args: &[A]) -> Result<(), Reply> {
    let fits = |arity: i32| {
        let (n, a) = (args.len() as i64, arity as i64);
        !((a > 0 && n != a) || (a < 0 && n < -a))
    };
    let wrong = |name: &str| {
        Err(Reply::error(format!(
            "ERR wrong number of arguments for '{name}' command"
        )))
    };
    if !fits(cmd.arity) {
        return wrong(cmd.name);
    }
    if cmd.subs.is_empty() || args.len() < 2 {
        return Ok(());
    }
    match cmd.sub(args) {
        Some(sub) if fits(sub.arity) => Ok(()),
        Some(sub) => wrong(sub.name),
        None => {
            let name = args[1].as_ref();
            Err(Reply::error(format!(
                "ERR unknown subcommand '{}'. Try {} HELP.",
                String::from_utf8_lossy(&name[..name.len().min(128)]),
                String::from_utf8_lossy(args[0].as_ref()).to_ascii_uppercase()
            )))
        }
    }
}

/// Redis's reply to a subcommand given the wrong arguments: `ERR unknown subcommand
/// or wrong number of arguments for 'pause'. Try CLIENT HELP.` (as typed).
pub fn sub_syntax_error<A: AsRef<[u8]>>(args: &[A]) -> Reply {
    let word = |i: usize| String::from_utf8_lossy(args.get(i).map_or(&b""[..], |a| a.as_ref()));
    let sub = word(1);
    let mut cut = sub.len().min(128);
    while !sub.is_char_boundary(cut) {
        cut -= 1;
    }
    Reply::error(format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
        &sub[..cut],
        word(0).to_ascii_uppercase()
    ))
}

/// The reply to a command that is not in the table (Redis's words:
/// `ERR unknown command 'foo', with args beginning with: 'a' 'b' `).
///
/// As Redis does, the name and arguments are cut to 128 bytes each, at most as many
/// arguments are quoted as fit in 128 bytes, and CR/LF (which cannot appear in an
/// error line) become spaces.
pub fn unknown<A: AsRef<[u8]>>(args: &[A]) -> Reply {
    fn show(b: &[u8]) -> String {
        let b = &b[..b.len().min(128)];
        String::from_utf8_lossy(b).replace(['\r', '\n'], " ")
    }
    let name = args.first().map_or(String::new(), |a| show(a.as_ref()));
    let mut rest = String::new();
    for a in args.iter().skip(1) {
        let a = a.as_ref();
        if rest.len() >= 128 {
            break;
        }
        rest.push('\'');
        rest.push_str(&show(&a[..a.len().min(128 - rest.len())]));
        rest.push_str("' ");
    }
    Reply::error(format!(
        "ERR unknown command '{name}', with args beginning with: {rest}"
    ))
}
