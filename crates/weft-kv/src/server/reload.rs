//! DEBUG RELOAD (and DEBUG LOADAOF): every shard's keyspaces rebuilt from its log on
//! disk, so that what a client sees afterwards is what a restart would load.
//!
//! 1. Every shard's log is compacted (as BGREWRITEAOF does), and the command waits
//!    until no compaction runs: the file a restart would read is the compacted image
//!    and what was logged after it.
//! 2. It holds every shard's gate (a transaction over all of them), so no command
//!    runs anywhere until it is done; if a compaction started meanwhile (the automatic
//!    trigger), it leaves the gates, waits and tries again.
//! 3. For each shard: it waits until the log is written up to the shard's last
//!    record, reads the file (read only: nothing is cut or changed), replays it into
//!    fresh keyspaces exactly as start-up does (the last transaction part is whole:
//!    every transaction that logged here has written all its parts before leaving its
//!    gates), drops the keys whose time has passed, and puts the fresh keyspaces in
//!    place of the old ones, unless the shard logged something meanwhile (its
//!    background expiry does not wait for gates): then it reads again.
//!
//! The watched keys, blocked clients and counters of the shard stay: the keys are the
//! same ones. While it runs, the server holds the old and the new keyspaces of one
//! shard at a time.

use super::{ShardSet, Shards};
use crate::keyspace::{Keyspace, Replay};
use crate::log::recover::{scan, Scan};
use crate::log::{self, DATABASES};
use crate::resp::Reply;
use std::sync::Arc;
use std::time::Duration;

/// How long DEBUG RELOAD waits between two looks at a compaction under way.
const POLL: Duration = Duration::from_millis(2);

impl Shards {
    /// DEBUG RELOAD: `OK`, or the error that stopped it (every shard it had not
    /// reached keeps its keyspaces, which hold the same keys).
    pub(crate) fn reload(self: &Arc<Self>) -> Reply {
        // Inside EXEC the transaction's records are kept aside until it ends (so the
        // log does not have them yet), and a compaction would wait for its gates.
        if self.list.iter().any(|sh| sh.gate.mine().is_some()) {
            return Reply::err(
                "ERR DEBUG RELOAD cannot run inside a transaction (its changes are not in the log yet)",
            );
        }
        self.rewrite_all();
        let all: Vec<usize> = (0..self.list.len()).collect();
        loop {
            while self.rewriting() {
                weft_runtime::sleep(POLL);
            }
            let done = self.atomically(&all, |_| {
                if self.rewriting() {
                    return None;
                }
                Some(all.iter().try_for_each(|&s| self.reload_shard(s)))
            });
            match done {
                None => continue,
                Some(Ok(())) => return Reply::OK,
                Some(Err(e)) => {
                    return Reply::error(format!("ERR the log could not be reloaded: {e}"))
                }
            }
        }
    }

    /// Rebuilds shard `s`'s keyspaces from its log file (its gate held).
    fn reload_shard(&self, s: usize) -> Result<(), String> {
        let path = self.dir.log_path(s);
        loop {
            let lsn = self.with(s, |st| st.appended);
            self.wait_durable(s, lsn)?;
            let mut dbs: Vec<Keyspace> = (0..DATABASES).map(|_| Keyspace::new()).collect();
            let now = crate::shard::now_ms();
            {
                let mut replay = Replay::new(&mut dbs, now);
                let mut txs = log::tx::TxReplay::new(|db, r| replay.push(db, r));
                let file = std::fs::File::open(&path).map_err(|e| e.to_string())?;
                match scan(&file, &mut |db, r| txs.push(db, r)).map_err(|e| e.to_string())? {
                    Scan::Clean { .. } => {}
                    // A write under way at the end (background expiry): read again.
                    Scan::Bad { .. } => continue,
                    Scan::Header(_) => return Err(format!("{}: bad header", path.display())),
                }
                if let Some(held) = txs.finish().held.filter(|h| h.whole) {
                    held.apply(|db, r| replay.push(db, r));
                }
                replay.finish();
            }
            for (d, ks) in dbs.iter_mut().enumerate() {
                ks.set_db(d as u8);
            }
            let swapped = self.with(s, move |st| {
                if st.appended != lsn {
                    return false;
                }
                std::mem::swap(&mut st.dbs, &mut dbs);
                st.dirty_dbs = u16::MAX;
                drop(dbs);
                true
            });
            if swapped {
                return Ok(());
            }
        }
    }
}
