//! The weft-kv daemon (to be written).

pub mod config;

pub use config::{Config, Fsync};

/// Runs the server until SHUTDOWN or a fatal error: creates the data directory if
/// needed, recovers every shard's log, binds the sockets and serves.
pub fn serve(config: Config) -> std::io::Result<()> {
    todo!("{config:?}")
}
