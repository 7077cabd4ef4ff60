//! The server's configuration, with its defaults (it starts with none given).

use std::path::PathBuf;

/// weft-kv's documented TCP port: Redis's 6379 with its first digit raised, so that a
/// redis-server and weft-kv run side by side.
pub const DEFAULT_PORT: u16 = 7379;

/// When the log is flushed to the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fsync {
    /// A write is acknowledged once it is on the disk (group commit: one fsync
    /// covers every write that arrived while the previous one ran).
    Always,
    /// A write is acknowledged once it is written to the file (in the page cache:
    /// it survives the server's crash); the file is fsynced every second, so a
    /// crash of the machine loses at most about a second. Redis's default.
    EverySec,
    /// Written before acknowledged, never fsynced by weft-kv (the kernel flushes).
    No,
}

impl std::str::FromStr for Fsync {
    type Err = String;
    fn from_str(s: &str) -> Result<Fsync, String> {
        match s.to_ascii_lowercase().as_str() {
            "always" => Ok(Fsync::Always),
            "everysec" => Ok(Fsync::EverySec),
            "no" => Ok(Fsync::No),
            _ => Err(format!(
                "unknown fsync policy '{s}': use always, everysec or no"
            )),
        }
    }
}

impl Fsync {
    /// The policy's name, as CONFIG GET appendfsync answers it.
    pub fn name(self) -> &'static str {
        match self {
            Fsync::Always => "always",
            Fsync::EverySec => "everysec",
            Fsync::No => "no",
        }
    }
}

/// Who may run DEBUG (Redis's `enable-debug-command`): its subcommands are for tools
/// and test suites, and some (DEBUG SLEEP, DEBUG RELOAD) hold a connection or the
/// whole store for a while.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebugCommand {
    /// Nobody.
    No,
    /// Every client.
    Yes,
    /// Clients on this machine only: the Unix socket and loopback addresses.
    Local,
}

impl std::str::FromStr for DebugCommand {
    type Err = String;
    fn from_str(s: &str) -> Result<DebugCommand, String> {
        match s.to_ascii_lowercase().as_str() {
            "no" => Ok(DebugCommand::No),
            "yes" => Ok(DebugCommand::Yes),
            "local" => Ok(DebugCommand::Local),
            _ => Err(format!("unknown value '{s}': use yes, no or local")),
        }
    }
}

impl DebugCommand {
    /// The value's name, as CONFIG GET enable-debug-command answers it.
    pub fn name(self) -> &'static str {
        match self {
            DebugCommand::No => "no",
            DebugCommand::Yes => "yes",
            DebugCommand::Local => "local",
        }
    }

    /// Whether a client (`local`: on this machine) may run DEBUG.
    pub fn allows(self, local: bool) -> bool {
        match self {
            DebugCommand::No => false,
            DebugCommand::Yes => true,
            DebugCommand::Local => local,
        }
    }
}

/// Everything `weft kv serve` can be told.
#[derive(Clone, Debug)]
pub struct Config {
    /// The data directory (logs, lock file; created 0700).
    pub dir: PathBuf,
    /// The Unix socket's path (created 0600); `None`: no Unix socket.
    pub unix_socket: Option<PathBuf>,
    /// The TCP address to bind (loopback unless told otherwise).
    pub bind: String,
    /// The TCP port; 0: no TCP.
    pub port: u16,
    /// When the log is fsynced.
    pub fsync: Fsync,
    /// The memory limit in bytes (0: none); over it, keys are evicted by
    /// `maxmemory_policy`, or commands that grow memory fail.
    pub maxmemory: u64,
    /// What happens over the memory limit (`maxmemory-policy`; docs/kv.md).
    pub maxmemory_policy: crate::keyspace::access::Policy,
    /// The password AUTH must give (`None`: no password).
    pub password: Option<String>,
    /// The most connections at once; one more is told `ERR max number of clients
    /// reached` and closed.
    pub max_clients: usize,
    /// The largest bulk string a request may carry (Redis's proto-max-bulk-len).
    pub max_bulk: usize,
    /// The most bytes of replies a connection holds unsent: past it, the connection
    /// runs no more of its commands until the client has read them (nothing is
    /// dropped). A single larger reply is still sent, whole.
    pub client_output_limit: usize,
    /// While no password is set, refuse TCP clients that do not connect from this
    /// machine (Redis's protected mode).
    pub protected_mode: bool,
    /// Worker threads (0: half the CPUs, at least one: the clients of a local store
    /// run on the same machine; see `serve`).
    pub workers: usize,
    /// The keyspace notifications published, as Redis's `notify-keyspace-events`
    /// letters (empty: none).
    pub notify_keyspace_events: String,
    /// Who may run DEBUG.
    pub enable_debug_command: DebugCommand,
    /// Serve clients of this machine over shared memory too, on the Unix socket's
    /// path with `.shm` after it (`server/shm.rs`).
    pub shm: bool,
}

impl Config {
    /// The per-user default data directory: `$XDG_DATA_HOME/weft-kv`, else
    /// `$HOME/.local/share/weft-kv`, else `./weft-kv`.
    pub fn default_dir() -> PathBuf {
        if let Some(x) = std::env::var_os("XDG_DATA_HOME").filter(|x| !x.is_empty()) {
            return PathBuf::from(x).join("weft-kv");
        }
        if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            return PathBuf::from(h).join(".local/share/weft-kv");
        }
        PathBuf::from("weft-kv")
    }

    /// The defaults for data directory `dir`: the Unix socket `dir/weft-kv.sock`,
    /// TCP on 127.0.0.1:7379, fsync every second, no memory limit, no password,
    /// replies held per connection up to 32 MiB, protected mode on, DEBUG from this
    /// machine only.
    pub fn with_dir(dir: PathBuf) -> Config {
        Config {
            unix_socket: Some(dir.join("weft-kv.sock")),
            dir,
            bind: "127.0.0.1".into(),
            port: DEFAULT_PORT,
            fsync: Fsync::EverySec,
            maxmemory: 0,
            maxmemory_policy: crate::keyspace::access::Policy::NoEviction,
            password: None,
            max_clients: 10_000,
            max_bulk: 512 << 20,
            client_output_limit: 32 << 20,
            protected_mode: true,
            workers: 0,
            notify_keyspace_events: String::new(),
            enable_debug_command: DebugCommand::Local,
            shm: true,
        }
    }
}

impl Default for Config {
    fn default() -> Config {
        Config::with_dir(Config::default_dir())
    }
}
