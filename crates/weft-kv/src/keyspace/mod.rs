//! One shard's keys: the values, their expiry times and the memory they take.
//!
//! (Design to be written by the implementer: see the task description.)

use crate::log::RecordRef;

/// One shard's keys.
pub struct Keyspace {}

impl Keyspace {
    /// An empty keyspace.
    pub fn new() -> Keyspace {
        todo!()
    }

    /// Replays one log record (recovery); `now_ms` drops keys already expired.
    pub fn apply(&mut self, rec: RecordRef<'_>, now_ms: u64) {
        todo!("{rec:?} {now_ms}")
    }

    /// The number of keys (expired keys not yet removed may be counted, as Redis's
    /// DBSIZE does).
    pub fn len(&self) -> usize {
        todo!()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Approximate bytes used by keys, values and their bookkeeping.
    pub fn used_memory(&self) -> u64 {
        todo!()
    }
}

impl Default for Keyspace {
    fn default() -> Self {
        Self::new()
    }
}
