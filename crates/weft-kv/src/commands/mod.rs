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

pub mod keys;
pub mod strings;

/// What a shard command is given besides its arguments.
pub struct Ctx<'a> {
    /// The time, in Unix milliseconds, that expiry is judged against.
    pub now_ms: u64,
    /// The shard's log buffer: a mutating command appends its effect here
    /// (`crate::log::encode`), as full-state records.
    pub log: &'a mut Vec<u8>,
    /// The shard is over its memory limit: commands that may grow memory answer
    /// [`OOM`] instead of running (deletions still run).
    pub over_memory: bool,
}

/// The reply to a command that may grow memory when the store is over its limit.
pub const OOM: Reply = Reply::err("OOM command not allowed when used memory > 'maxmemory'.");

/// A shard command: runs on `ks` with the full argument list (`args[0]` is the name).
pub type ShardFn = fn(&mut Keyspace, &[Vec<u8>], &mut Ctx<'_>) -> Reply;

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

/// The command named `name` (any case), if there is one.
pub fn lookup(name: &[u8]) -> Option<&'static Command> {
    todo!("{name:?}")
}

/// Every command, in table order (for COMMAND and COMMAND COUNT).
pub fn table() -> &'static [Command] {
    todo!()
}

/// Checks `args` against `cmd`'s arity: the standard
/// `ERR wrong number of arguments for 'get' command` otherwise.
pub fn check_arity(cmd: &Command, args: &[Vec<u8>]) -> Result<(), Reply> {
    todo!("{} {}", cmd.name, args.len())
}

/// The reply to a command that is not in the table (Redis's words:
/// `ERR unknown command 'foo', with args beginning with: 'a' 'b' `).
pub fn unknown(args: &[Vec<u8>]) -> Reply {
    todo!("{}", args.len())
}
