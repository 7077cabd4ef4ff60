//! WATCH on a shard: the keys its connections watch, per database, each with its
//! watchers, and what marks them dirty (docs/kv-types.md, "How are commands over
//! several shards atomic?").
//!
//! A watcher is a connection's flag ([`Watcher::dirty`]), shared by every key it
//! watches. What dirties it:
//! - any write to a watched key, by any connection: a command that changes a key logs
//!   the change (invariant 5), so the shard looks at the keys of the records a command
//!   logged ([`Shard::touch_logged`]), only while it has watchers (one load otherwise);
//! - FLUSHDB, FLUSHALL and SWAPDB, for the watched keys they change: those that exist
//!   in the emptied database, or (SWAPDB) in the one swapped in;
//! - a watched key that was live when watched and is gone (expired) or expired by
//!   EXEC: EXEC looks ([`Shard::unwatch_expired`]). A key already expired when watched
//!   (a stale key) does not dirty the watcher when it is removed, as in Redis.
//!
//! The memory of watched keys is the connection's: it counts it in its client memory.

use crate::shard::Shard;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Arc;

/// A connection watching keys.
#[derive(Clone, Debug)]
pub struct Watcher {
    /// The connection's id.
    pub conn: u64,
    /// Set when a key it watches changes.
    pub dirty: Arc<AtomicBool>,
}

/// The keys a shard's connections watch: per database, key to watchers.
#[derive(Default, Debug)]
pub struct Watches {
    dbs: Vec<HashMap<Box<[u8]>, Vec<Watcher>>>,
    /// (key, watcher) pairs in all.
    count: usize,
}

impl Watches {
    fn db(&mut self, db: u8) -> &mut HashMap<Box<[u8]>, Vec<Watcher>> {
        if self.dbs.len() <= db as usize {
            self.dbs.resize_with(db as usize + 1, HashMap::new);
        }
        &mut self.dbs[db as usize]
    }

    /// Marks the watchers of `key` in `db` dirty.
    fn touch(&self, db: u8, key: &[u8]) {
        if let Some(ws) = self.dbs.get(db as usize).and_then(|m| m.get(key)) {
            for w in ws {
                w.dirty.store(true, SeqCst);
            }
        }
    }

    /// The keys watched in `db`.
    fn keys(&self, db: u8) -> Vec<Box<[u8]>> {
        self.dbs
            .get(db as usize)
            .map_or_else(Vec::new, |m| m.keys().cloned().collect())
    }
}

impl Shard {
    /// `w` watches `keys` of database `db`; for each, whether it was live (not
    /// missing, not expired) at `now_ms`.
    pub fn watch(&mut self, db: u8, keys: &[&[u8]], w: &Watcher, now_ms: u64) -> Vec<bool> {
        let ws = self.watches.get_or_insert_with(Default::default);
        let mut live = Vec::with_capacity(keys.len());
        for &key in keys {
            live.push(self.dbs[db as usize].peek(key, now_ms).is_some());
            let list = ws.db(db).entry(key.into()).or_default();
            if !list.iter().any(|x| x.conn == w.conn) {
                list.push(w.clone());
                ws.count += 1;
            }
        }
        live
    }

    /// Connection `conn` no longer watches `keys` (database, key).
    pub fn unwatch(&mut self, conn: u64, keys: &[(u8, &[u8])]) {
        let Some(ws) = self.watches.as_mut() else {
            return;
        };
        for &(db, key) in keys {
            let Some(m) = ws.dbs.get_mut(db as usize) else {
                continue;
            };
            if let Some(list) = m.get_mut(key) {
                let before = list.len();
                list.retain(|x| x.conn != conn);
                ws.count -= before - list.len();
                if list.is_empty() {
                    m.remove(key);
                }
            }
        }
        if ws.count == 0 {
            self.watches = None;
        }
    }

    /// EXEC's look at its watched keys here (under its gates): whether one that was
    /// live when watched (`live` true) is missing or expired now; then connection
    /// `conn` watches none of them any more.
    pub fn unwatch_expired(&mut self, conn: u64, keys: &[(u8, &[u8], bool)], now_ms: u64) -> bool {
        let gone = keys
            .iter()
            .any(|&(db, key, live)| live && self.dbs[db as usize].peek(key, now_ms).is_none());
        let pairs: Vec<(u8, &[u8])> = keys.iter().map(|&(db, key, _)| (db, key)).collect();
        self.unwatch(conn, &pairs);
        gone
    }

    /// Marks dirty the watchers of the keys of the records logged since `before` (a
    /// command's records; a transaction's own `Tx` frame and the records about whole
    /// databases are seen elsewhere).
    pub(crate) fn touch_logged(&self, before: usize) {
        let Some(ws) = self.watches.as_deref() else {
            return;
        };
        let mut at = before;
        while at < self.log.len() {
            let (db, rec, n) =
                crate::log::decode_frame(&self.log[at..]).expect("a command logs whole records");
            if let Some(key) = rec.key().filter(|_| !rec.only_encoding()) {
                ws.touch(db, key);
            }
            at += n;
        }
    }

    /// Before database `db` is emptied (FLUSHDB, FLUSHALL) or swapped with `with`
    /// (SWAPDB): marks dirty the watchers of the keys of `db` that exist in it, or in
    /// `with`, at `now_ms` (live: a stale key changes nothing).
    pub(crate) fn touch_db(&self, db: u8, with: Option<u8>, now_ms: u64) {
        let Some(ws) = self.watches.as_deref() else {
            return;
        };
        for key in ws.keys(db) {
            let exists = |d: u8| self.dbs[d as usize].peek(&key, now_ms).is_some();
            if exists(db) || with.is_some_and(exists) {
                ws.touch(db, &key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watcher(conn: u64) -> Watcher {
        Watcher {
            conn,
            dirty: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Watching and unwatching keeps the count of (key, watcher) pairs; the last
    /// unwatch leaves the shard without watches (one load for every command).
    #[test]
    fn watches_come_and_go() {
        let mut sh = Shard::new(vec![]);
        let (a, b) = (watcher(1), watcher(2));
        assert_eq!(sh.watch(0, &[b"x", b"y"], &a, 0), [false, false]);
        sh.watch(0, &[b"x"], &a, 0);
        sh.watch(0, &[b"x"], &b, 0);
        sh.watch(3, &[b"x"], &b, 0);
        assert_eq!(sh.watches.as_ref().unwrap().count, 4);
        sh.touch_db(3, None, 0);
        assert!(!b.dirty.load(SeqCst), "no key exists in database 3");
        sh.unwatch(1, &[(0, b"x"), (0, b"y")]);
        assert_eq!(sh.watches.as_ref().unwrap().count, 2);
        sh.unwatch(2, &[(0, b"x"), (3, b"x")]);
        assert!(sh.watches.is_none());
        assert!(!a.dirty.load(SeqCst));
    }
}
