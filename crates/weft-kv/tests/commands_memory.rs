//! The memory limit as each write command sees it (`Ctx::room`, the bytes it may still
//! add): every command that may grow memory works out its growth before it changes
//! anything, is refused with Redis's OOM error when that is more than the room (the
//! keyspace, its memory count and the log unchanged), and runs when it fits, growing
//! the count by exactly what it said. Expired keys are reclaimed before a refusal.

mod common;
use common::*;

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// A keyspace holding `k` = "12345" (no expiry): 1 + 5 + 64 bytes counted.
fn fresh() -> T {
    let mut t = T::new();
    assert_eq!(t.run(&["SET", "k", "12345"]), Reply::OK);
    assert_eq!(t.ks.used_memory(), Keyspace::entry_memory(1, 5, false));
    t
}

/// Runs `cmd` with one byte less room than `grow`: refused, nothing changed; then
/// with exactly `grow`: it runs and the memory count grows by `grow`.
fn refused_then_fits(cmd: &[&str], grow: u64) {
    needs_then_grows(cmd, grow, grow)
}

/// [`refused_then_fits`] for a command that needs room for `grow` bytes and then
/// grows memory by `grows` (MSET counts no shrinking key against another's growth).
fn needs_then_grows(cmd: &[&str], grow: u64, grows: u64) {
    let mut t = fresh();
    let (mem, keys) = (t.ks.used_memory(), dump(&t.ks, t.now));
    t.room = grow - 1;
    assert_eq!(
        t.run(cmd),
        Reply::Error(OOM.into()),
        "{cmd:?} with room for {} bytes",
        grow - 1
    );
    assert_eq!(t.ks.used_memory(), mem, "{cmd:?}: memory changed");
    assert_eq!(dump(&t.ks, t.now), keys, "{cmd:?}: keys changed");
    assert!(t.logged().is_empty(), "{cmd:?}: logged a change");

    let mut t = fresh();
    t.room = grow;
    let r = t.run(cmd);
    assert!(!r.is_error(), "{cmd:?} with room for {grow} bytes: {r:?}");
    assert_eq!(t.ks.used_memory(), mem + grows, "{cmd:?}: grew otherwise");
    t.check_replay();
}

#[test]
fn every_growing_write_is_refused_past_the_room_and_fits_at_it() {
    let new = |key: &str, len: usize, ttl: bool| Keyspace::entry_memory(key.len(), len, ttl);
    // SET: a longer value, a new key, an expiry added, with GET, with KEEPTTL.
    refused_then_fits(&["SET", "k", "1234567890"], 5);
    refused_then_fits(&["SET", "n", "1234567890"], new("n", 10, false));
    refused_then_fits(&["SET", "k", "54321", "EX", "100"], 32);
    refused_then_fits(&["SET", "k", "1234567", "GET"], 2);
    refused_then_fits(&["SET", "n", "v", "NX"], new("n", 1, false));
    refused_then_fits(&["SETNX", "n", "v"], new("n", 1, false));
    refused_then_fits(&["SETEX", "n", "100", "vvv"], new("n", 3, true));
    refused_then_fits(&["PSETEX", "n", "100000", "vvv"], new("n", 3, true));
    refused_then_fits(&["GETSET", "k", "1234567"], 2);
    refused_then_fits(&["GETSET", "n", "1234567"], new("n", 7, false));
    // MSET: every key counted; one that shrinks gives nothing back to the others.
    refused_then_fits(
        &["MSET", "n1", "a", "n2", "bb"],
        new("n1", 1, false) + new("n2", 2, false),
    );
    needs_then_grows(
        &["MSET", "k", "1", "n", "v"],
        new("n", 1, false),
        new("n", 1, false) - 4,
    );
    // The counters: a new key, and a value one digit longer.
    refused_then_fits(&["INCR", "c"], new("c", 1, false));
    refused_then_fits(&["DECR", "c"], new("c", 2, false));
    refused_then_fits(&["INCRBY", "k", "99999"], 1); // 12345 -> 112344
    refused_then_fits(&["DECRBY", "k", "99999"], 1); // 12345 -> -87654
    refused_then_fits(&["INCRBYFLOAT", "f", "1.5"], new("f", 3, false));
    refused_then_fits(&["INCRBYFLOAT", "k", "0.5"], 2); // 12345.5
                                                        // APPEND and SETRANGE: the bytes added, zero padding included.
    refused_then_fits(&["APPEND", "k", "abc"], 3);
    refused_then_fits(&["APPEND", "n", "abc"], new("n", 3, false));
    refused_then_fits(&["SETRANGE", "k", "100", "x"], 101 - 5);
    refused_then_fits(&["SETRANGE", "n", "10", "x"], new("n", 11, false));
}

/// A SETRANGE far out and a huge SET are refused from their arguments alone, before
/// anything is allocated (with room for a megabyte).
#[test]
fn large_growth_is_refused_from_the_arguments() {
    let mut t = fresh();
    t.room = 1 << 20;
    let err = Reply::Error(OOM.into());
    assert_eq!(t.run(&["SETRANGE", "k", "400000000", "x"]), err);
    assert_eq!(t.run(&["SETRANGE", "big", "400000000", "x"]), err);
    let two_mb = vec![b'v'; 2 << 20];
    let args = [b"SET".to_vec(), b"big".to_vec(), two_mb.clone()];
    assert_eq!(t.run_bytes(&args), err);
    let args = [b"APPEND".to_vec(), b"k".to_vec(), two_mb];
    assert_eq!(t.run_bytes(&args), err);
    assert_eq!(t.ks.used_memory(), Keyspace::entry_memory(1, 5, false));
    assert_eq!(t.ks.len(), 1);
}

/// Writes that do not grow memory run with no room at all: DEL, GETDEL, UNLINK,
/// PERSIST, EXPIRE, a SET of a shorter value.
#[test]
fn writes_that_do_not_grow_run_without_room() {
    let mut t = fresh();
    t.run(&["SET", "a", "1"]);
    t.run(&["SET", "b", "2"]);
    t.run(&["SET", "c", "3", "EX", "100"]);
    t.room = 0;
    assert_eq!(t.run(&["SET", "k", "123"]), Reply::OK);
    assert_eq!(t.run(&["PERSIST", "c"]), Reply::Int(1));
    assert_eq!(t.run(&["DEL", "a"]), Reply::Int(1));
    assert_eq!(t.run(&["UNLINK", "c"]), Reply::Int(1));
    assert_eq!(t.run(&["GETDEL", "b"]), Reply::Bulk(b"2".to_vec()));
    assert_eq!(t.ks.used_memory(), Keyspace::entry_memory(1, 3, false));
}

/// A write that does not fit first reclaims expired keys: as many as it needs (the
/// earliest first), and no live one; it is refused only if that is not enough.
#[test]
fn expired_keys_are_reclaimed_before_a_refusal() {
    let mut t = T::new();
    for i in 0..10 {
        let key = format!("old{i}");
        t.run(&["SET", &key, "0123456789", "PX", &format!("{}", 100 + i)]);
    }
    t.run(&["SET", "live", "x"]);
    let before = t.ks.used_memory();
    t.now += 1_000; // every "old" key has expired, none was touched
    assert_eq!(t.ks.len(), 11);
    assert_eq!(t.ks.expired_count(), 0);
    // Room for nothing: a new key of the size of three expired ones takes three.
    let one = Keyspace::entry_memory(4, 10, true);
    let value = "v".repeat((3 * one - Keyspace::entry_memory(1, 0, false)) as usize);
    t.room = 0;
    assert_eq!(t.run(&["SET", "n", &value]), Reply::OK);
    assert_eq!(t.ks.expired_count(), 3);
    assert_eq!(t.ks.len(), 11 - 3 + 1);
    assert_eq!(t.ks.used_memory(), before);
    // The earliest went first.
    for i in 0..3 {
        assert!(t.ks.peek(format!("old{i}").as_bytes(), 0).is_none());
    }
    assert!(t.ks.peek(b"old3", 0).is_some());
    // More than every expired key frees: refused, nothing changed but the reclaim.
    let value = "v".repeat((8 * one) as usize);
    assert_eq!(t.run(&["SET", "m", &value]), Reply::Error(OOM.into()));
    assert_eq!(t.ks.expired_count(), 10);
    assert_eq!(t.ks.len(), 2);
    assert!(t.ks.peek(b"m", t.now).is_none());
    assert_eq!(t.run(&["GET", "live"]), Reply::Bulk(b"x".to_vec()));
}
