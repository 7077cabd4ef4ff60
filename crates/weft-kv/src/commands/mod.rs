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

pub mod float80;
pub mod keys;
pub mod strings;

/// What a shard command is given besides its arguments.
pub struct Ctx<'a> {
    /// The time, in Unix milliseconds, that expiry is judged against.
    pub now_ms: u64,
    /// The shard's log buffer: a mutating command appends its effect here
    /// (`crate::log::encode`), as full-state records.
    pub log: &'a mut Vec<u8>,
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
            over_memory: false,
            room: u64::MAX,
            out: None,
        }
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
}

/// Redis's `ERR syntax error`.
pub const SYNTAX_ERR: Reply = Reply::err("ERR syntax error");
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
    }
}

const ONE: (i32, i32, i32) = (1, 1, 1);
const ALL: (i32, i32, i32) = (1, -1, 1);
const NONE: (i32, i32, i32) = (0, 0, 0);

use keys as k;
use strings as s;

/// The table: arities, flags and key positions as Redis 7.0's `COMMAND INFO` shows.
static TABLE: [Command; 57] = [
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
    cmd("client", -2, 0, NONE, Exec::Server),
    cmd("info", -1, 0, NONE, Exec::Server),
    cmd("config", -2, 0, NONE, Exec::Server),
    cmd("command", -1, 0, NONE, Exec::Server),
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
];

/// The index in [`TABLE`] of a command whose name is given in lower case.
fn index(lower: &[u8]) -> Option<usize> {
    // `match` on byte strings compiles to a length switch and short comparisons.
    Some(match lower {
        b"get" => 0,
        b"set" => 1,
        b"setnx" => 2,
        b"setex" => 3,
        b"psetex" => 4,
        b"getset" => 5,
        b"getdel" => 6,
        b"getex" => 7,
        b"mget" => 8,
        b"mset" => 9,
        b"incr" => 10,
        b"decr" => 11,
        b"incrby" => 12,
        b"decrby" => 13,
        b"incrbyfloat" => 14,
        b"append" => 15,
        b"strlen" => 16,
        b"getrange" => 17,
        b"substr" => 18,
        b"setrange" => 19,
        b"del" => 20,
        b"unlink" => 21,
        b"exists" => 22,
        b"touch" => 23,
        b"expire" => 24,
        b"pexpire" => 25,
        b"expireat" => 26,
        b"pexpireat" => 27,
        b"ttl" => 28,
        b"pttl" => 29,
        b"expiretime" => 30,
        b"pexpiretime" => 31,
        b"persist" => 32,
        b"type" => 33,
        b"ping" => 34,
        b"echo" => 35,
        b"hello" => 36,
        b"auth" => 37,
        b"select" => 38,
        b"quit" => 39,
        b"reset" => 40,
        b"client" => 41,
        b"info" => 42,
        b"config" => 43,
        b"command" => 44,
        b"dbsize" => 45,
        b"keys" => 46,
        b"scan" => 47,
        b"flushdb" => 48,
        b"flushall" => 49,
        b"save" => 50,
        b"bgsave" => 51,
        b"bgrewriteaof" => 52,
        b"lastsave" => 53,
        b"shutdown" => 54,
        b"time" => 55,
        b"wait" => 56,
        _ => return None,
    })
}

/// The command named `name` (any case), if there is one.
pub fn lookup(name: &[u8]) -> Option<&'static Command> {
    let mut buf = [0u8; 16];
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

/// The longest key or value weft-kv keeps: the log's [`crate::log::MAX_VALUE`] (1 GiB),
/// so every value accepted is one recovery reads back. The server never sees a longer
/// argument (`--max-bulk` is capped at it, and APPEND/SETRANGE stop at [`MAX_STRING`],
/// below it); the embedded store checks with [`check_lengths`].
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

/// Checks `args` against `cmd`'s arity: the standard
/// `ERR wrong number of arguments for 'get' command` otherwise.
pub fn check_arity<A>(cmd: &Command, args: &[A]) -> Result<(), Reply> {
    let n = args.len() as i64;
    let a = cmd.arity as i64;
    if (a > 0 && n != a) || (a < 0 && n < -a) {
        return Err(Reply::error(format!(
            "ERR wrong number of arguments for '{}' command",
            cmd.name
        )));
    }
    Ok(())
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
