//! INFO: the sections and fields of Redis 7's INFO, so that tools written for Redis
//! (client test suites, monitoring) find what they look for.
//!
//! Fields have weft-kv's real values where it has them (clients, memory, the logs,
//! command and error counts, processor time); where weft-kv has no such thing
//! (replication, forks, Lua, modules) they have the value Redis shows when it is not
//! in use. weft-kv's own fields (`weft_kv_version`, `shards`, `workers`, `appendfsync`,
//! `aof_fsynced_size`: how much of the logs a finished fsync covers, `aof_fsyncs`: the
//! logs' fsyncs finished, `aof_fsyncs_on_worker`: those a worker ran itself) come after
//! Redis's in their sections.

use super::Server;
use crate::commands;
use crate::exec::ShardSet;
use crate::resp::Reply;
use crate::shard::now_ms;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// What INFO remembers between calls.
pub struct InfoState {
    /// This run's random id (40 hex digits), and the replication id Redis would show.
    run_id: String,
    replid: String,
    /// SAVE and BGSAVE calls (rdb_saves), and compactions started (aof_rewrites).
    pub saves: AtomicU64,
    pub rewrites: AtomicU64,
    /// The running compaction was started by BGSAVE (rdb_bgsave_in_progress).
    pub bgsave: AtomicBool,
    /// The most memory seen in use.
    peak: AtomicU64,
    /// (Unix ms, commands processed) at the last rate sample, and the rate then.
    ops: Mutex<(u64, u64, u64)>,
}

/// 40 random hexadecimal digits.
fn random_hex() -> String {
    let mut bytes = [0u8; 20];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into the local array.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n != bytes.len() as isize {
        // No randomness: the time and process id still tell runs apart.
        let seed = now_ms() ^ ((std::process::id() as u64) << 32);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (seed >> ((i % 8) * 8)) as u8 ^ i as u8;
        }
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl InfoState {
    /// A new run's state.
    pub fn new() -> InfoState {
        InfoState {
            run_id: random_hex(),
            replid: random_hex(),
            saves: AtomicU64::new(0),
            rewrites: AtomicU64::new(0),
            bgsave: AtomicBool::new(false),
            peak: AtomicU64::new(0),
            ops: Mutex::new((now_ms(), 0, 0)),
        }
    }
}

impl Default for InfoState {
    fn default() -> Self {
        Self::new()
    }
}

/// A size as Redis's `_human` fields write it (`1.50M`).
fn human(bytes: u64) -> String {
    let units = ["B", "K", "M", "G", "T", "P"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes}B")
    } else {
        format!("{v:.2}{}", units[u])
    }
}

/// The resident memory of the process, from /proc/self/statm.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(0) as u64;
    pages * page
}

/// The machine's memory, from /proc/meminfo.
fn total_memory() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// (system, user) processor seconds of `who` (RUSAGE_SELF, _CHILDREN, _THREAD).
fn cpu(who: libc::c_int) -> (f64, f64) {
    // SAFETY: getrusage fills the zeroed struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `ru` is a valid, writable rusage.
    if unsafe { libc::getrusage(who, &mut ru) } != 0 {
        return (0.0, 0.0);
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_stime), secs(ru.ru_utime))
}

/// The kernel's name, release and machine, as `uname -srm`.
fn os() -> String {
    // SAFETY: uname fills the zeroed struct it is given.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "Linux".into();
    }
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    format!(
        "{} {} {}",
        field(&u.sysname),
        field(&u.release),
        field(&u.machine)
    )
}

/// The sections INFO shows: name, and whether INFO without arguments (or `default`)
/// shows it.
const SECTIONS: [(&str, bool); 12] = [
    ("server", true),
    ("clients", true),
    ("memory", true),
    ("persistence", true),
    ("stats", true),
    ("replication", true),
    ("cpu", true),
    ("modules", true),
    ("commandstats", false),
    ("errorstats", true),
    ("cluster", true),
    ("keyspace", true),
];

/// INFO [section ...]: the sections asked for (any case; `default`, `all`,
/// `everything`), in Redis's order; an unknown section adds nothing.
pub fn info(server: &Server, args: &[Vec<u8>]) -> Reply {
    let asked = |name: &str, default: bool| {
        if args.len() == 1 {
            return default;
        }
        args[1..].iter().any(|a| {
            let a = a.to_ascii_lowercase();
            a == name.as_bytes()
                || a == b"all"
                || a == b"everything"
                || (default && a == b"default")
        })
    };
    let mut out = Vec::new();
    for (name, default) in SECTIONS {
        if asked(name, default) {
            out.push(section(server, name));
        }
    }
    Reply::Verbatim("txt", out.join("\r\n").into_bytes())
}

/// One section's text: its `# Title` line and its fields, each line ending `\r\n`.
fn section(server: &Server, name: &str) -> String {
    let mut s = String::new();
    let title = match name {
        "cpu" => "CPU".to_string(),
        _ => {
            let mut t = name.to_string();
            t[..1].make_ascii_uppercase();
            t
        }
    };
    let _ = write!(s, "# {title}\r\n");
    let mut field = |k: &str, v: &dyn std::fmt::Display| {
        let _ = write!(s, "{k}:{v}\r\n");
    };
    let shards = server.shards.list();
    let st = &server.info;
    match name {
        "server" => {
            let uptime = server.started.elapsed().as_secs();
            let now_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros());
            let exe = std::env::current_exe().map_or(String::new(), |p| p.display().to_string());
            field("redis_version", &super::admin::REDIS_VERSION);
            field("redis_git_sha1", &"00000000");
            field("redis_git_dirty", &0);
            field("redis_build_id", &"0");
            field("redis_mode", &"standalone");
            field("os", &os());
            field("arch_bits", &usize::BITS);
            field("monotonic_clock", &"POSIX clock_gettime");
            field("multiplexing_api", &"weft-runtime");
            field("atomicvar_api", &"rust");
            field("gcc_version", &"0.0.0");
            field("process_id", &std::process::id());
            field("process_supervised", &"no");
            field("run_id", &st.run_id);
            field("tcp_port", &server.config.port);
            field("server_time_usec", &now_us);
            field("uptime_in_seconds", &uptime);
            field("uptime_in_days", &(uptime / 86400));
            field("hz", &10);
            field("configured_hz", &10);
            field("lru_clock", &((now_ms() / 1000) & ((1 << 24) - 1)));
            field("executable", &exe);
            field("config_file", &"");
            field("io_threads_active", &0);
            field("weft_kv_version", &env!("CARGO_PKG_VERSION"));
            field("shards", &shards.len());
            field("workers", &server.workers);
        }
        "clients" => {
            let all = server.registry.all();
            let max_in = all.iter().map(|c| c.input_bytes()).max().unwrap_or(0);
            let max_out = all
                .iter()
                .map(|c| c.output_bytes() + c.pubsub.get().map_or(0, |s| s.queued()))
                .max()
                .unwrap_or(0);
            field("connected_clients", &server.clients.load(Relaxed));
            field("cluster_connections", &0);
            field("maxclients", &server.settings.maxclients());
            field("client_recent_max_input_buffer", &max_in);
            field("client_recent_max_output_buffer", &max_out);
            field("blocked_clients", &server.registry.blocked());
            field("tracking_clients", &crate::pubsub::tracking::info().0);
            field("clients_in_timeout_table", &server.registry.in_timeout());
        }
        "memory" => {
            let used: u64 = shards.iter().map(|s| s.memory.load(Relaxed)).sum();
            let peak = st.peak.fetch_max(used, Relaxed).max(used);
            let rss = rss();
            let max = server.settings.maxmemory();
            let total = total_memory();
            let clients =
                (server.client_memory.load(Relaxed) + crate::pubsub::queued_bytes()) as u64;
            let pct = |a: u64, b: u64| {
                if b == 0 {
                    0.0
                } else {
                    a as f64 * 100.0 / b as f64
                }
            };
            field("used_memory", &used);
            field("used_memory_human", &human(used));
            field("used_memory_rss", &rss);
            field("used_memory_rss_human", &human(rss));
            field("used_memory_peak", &peak);
            field("used_memory_peak_human", &human(peak));
            field("used_memory_peak_perc", &format!("{:.2}%", pct(used, peak)));
            field("used_memory_overhead", &clients);
            field("used_memory_startup", &0);
            field("used_memory_dataset", &used);
            field(
                "used_memory_dataset_perc",
                &format!("{:.2}%", pct(used, used + clients)),
            );
            field("allocator_allocated", &used);
            field("allocator_active", &rss);
            field("allocator_resident", &rss);
            field("total_system_memory", &total);
            field("total_system_memory_human", &human(total));
            // No scripting: no memory for it.
            for k in [
                "used_memory_lua",
                "used_memory_vm_eval",
                "used_memory_lua_human",
                "used_memory_scripts_eval",
                "number_of_cached_scripts",
                "number_of_functions",
                "number_of_libraries",
                "used_memory_vm_functions",
                "used_memory_vm_total",
                "used_memory_vm_total_human",
                "used_memory_functions",
                "used_memory_scripts",
                "used_memory_scripts_human",
            ] {
                field(k, &if k.ends_with("_human") { "0B" } else { "0" });
            }
            field("maxmemory", &max);
            field("maxmemory_human", &human(max));
            let policy = crate::keyspace::access::policy();
            field("maxmemory_policy", &policy.name());
            // The allocator (libc malloc) does not say how it uses the memory it holds:
            // all of it is counted as fragmentation below.
            for k in ["allocator_frag", "allocator_rss", "rss_overhead"] {
                field(&format!("{k}_ratio"), &"1.00");
                field(&format!("{k}_bytes"), &0);
            }
            let frag = if used == 0 {
                1.0
            } else {
                rss as f64 / used as f64
            };
            field("mem_fragmentation_ratio", &format!("{frag:.2}"));
            field("mem_fragmentation_bytes", &(rss as i64 - used as i64));
            field("mem_not_counted_for_evict", &0);
            field("mem_replication_backlog", &0);
            field("mem_total_replication_buffers", &0);
            field("mem_clients_slaves", &0);
            field("mem_clients_normal", &clients);
            field("mem_cluster_links", &0);
            field("mem_aof_buffer", &0);
            field("mem_allocator", &"libc");
            field("active_defrag_running", &0);
            field("lazyfree_pending_objects", &0);
            field("lazyfreed_objects", &0);
        }
        "persistence" => {
            let log: u64 = shards.iter().map(|s| s.log_len.load(Relaxed)).sum();
            let base: u64 = shards.iter().map(|s| s.log_base.load(Relaxed)).sum();
            let failing = (0..shards.len()).any(|s| server.shards.refuses_writes(s).is_some());
            let rewriting = server.shards.rewriting();
            let bgsave = rewriting && st.bgsave.load(Relaxed);
            for k in [
                "loading",
                "async_loading",
                "current_cow_peak",
                "current_cow_size",
                "current_cow_size_age",
            ] {
                field(k, &0);
            }
            field("current_fork_perc", &"0.00");
            field("current_save_keys_processed", &0);
            field("current_save_keys_total", &0);
            // Redis's `dirty`: the keys changed since the last SAVE or compaction.
            field(
                "rdb_changes_since_last_save",
                &server.shards.changes_since_save(),
            );
            field("rdb_bgsave_in_progress", &(bgsave as u8));
            field("rdb_last_save_time", &server.last_save.load(Relaxed));
            field("rdb_last_bgsave_status", &"ok");
            field("rdb_last_bgsave_time_sec", &-1);
            field("rdb_current_bgsave_time_sec", &-1);
            field("rdb_saves", &st.saves.load(Relaxed));
            field("rdb_last_cow_size", &0);
            field("rdb_last_load_keys_expired", &0);
            field("rdb_last_load_keys_loaded", &0);
            field("aof_enabled", &1);
            field("aof_rewrite_in_progress", &(rewriting as u8));
            field("aof_rewrite_scheduled", &0);
            field("aof_last_rewrite_time_sec", &-1);
            field("aof_current_rewrite_time_sec", &-1);
            field("aof_last_bgrewrite_status", &"ok");
            field("aof_rewrites", &st.rewrites.load(Relaxed));
            field("aof_rewrites_consecutive_failures", &0);
            field("aof_last_write_status", &if failing { "err" } else { "ok" });
            field("aof_last_cow_size", &0);
            field("module_fork_in_progress", &0);
            field("module_fork_last_cow_size", &0);
            field("aof_current_size", &log);
            field("aof_base_size", &base);
            field("aof_pending_rewrite", &0);
            field("aof_buffer_length", &0);
            field("aof_pending_bio_fsync", &0);
            field("aof_delayed_fsync", &0);
            field("appendfsync", &server.settings.fsync().name());
            let synced: u64 = shards.iter().map(|s| s.synced_len.load(Relaxed)).sum();
            field("aof_fsynced_size", &synced);
            let fsyncs: u64 = shards.iter().map(|s| s.fsyncs.load(Relaxed)).sum();
            field("aof_fsyncs", &fsyncs);
            let here: u64 = shards
                .iter()
                .map(|s| s.fsyncs_on_worker.load(Relaxed))
                .sum();
            field("aof_fsyncs_on_worker", &here);
        }
        "stats" => {
            let (net_in, net_out, reads, writes) = server.stats.net();
            let commands = server.commands.load(Relaxed);
            let errors: u64 = server.stats.errors().values().sum();
            let ops = {
                let mut o = st.ops.lock().unwrap_or_else(|p| p.into_inner());
                let now = now_ms();
                if now >= o.0 + 1000 {
                    o.2 = commands.saturating_sub(o.1) * 1000 / (now - o.0);
                    *o = (now, commands, o.2);
                }
                o.2
            };
            field(
                "total_connections_received",
                &server.connections.load(Relaxed),
            );
            field("total_commands_processed", &commands);
            field("instantaneous_ops_per_sec", &ops);
            field("total_net_input_bytes", &net_in);
            field("total_net_output_bytes", &net_out);
            field("total_net_repl_input_bytes", &0);
            field("total_net_repl_output_bytes", &0);
            for k in [
                "instantaneous_input_kbps",
                "instantaneous_output_kbps",
                "instantaneous_input_repl_kbps",
                "instantaneous_output_repl_kbps",
            ] {
                field(k, &"0.00");
            }
            field("rejected_connections", &0);
            field("sync_full", &0);
            field("sync_partial_ok", &0);
            field("sync_partial_err", &0);
            field(
                "expired_keys",
                &shards.iter().map(|s| s.expired.load(Relaxed)).sum::<u64>(),
            );
            field("expired_stale_perc", &"0.00");
            field(
                "expired_time_cap_reached_count",
                &server.shards.expire_capped.load(Relaxed),
            );
            field(
                "expire_cycle_cpu_milliseconds",
                &(server.shards.expire_us.load(Relaxed) / 1000),
            );
            field("evicted_keys", &crate::evict::evicted_count());
            for k in [
                "evicted_clients",
                "total_eviction_exceeded_time",
                "current_eviction_exceeded_time",
                "keyspace_hits",
                "keyspace_misses",
                "latest_fork_usec",
                "total_forks",
                "migrate_cached_sockets",
                "slave_expires_tracked_keys",
                "active_defrag_hits",
                "active_defrag_misses",
                "active_defrag_key_hits",
                "active_defrag_key_misses",
                "total_active_defrag_time",
                "current_active_defrag_time",
            ] {
                field(k, &0);
            }
            let (_, keys, items, prefixes) = crate::pubsub::tracking::info();
            field("tracking_total_keys", &keys);
            field("tracking_total_items", &items);
            field("tracking_total_prefixes", &prefixes);
            field("unexpected_error_replies", &0);
            let (channels, patterns, shard) = crate::pubsub::info_counts();
            field("pubsub_channels", &channels);
            field("pubsub_patterns", &patterns);
            field("pubsubshard_channels", &shard);
            field(
                "client_output_buffer_limit_disconnections",
                &crate::pubsub::limit_disconnections(),
            );
            field("total_error_replies", &errors);
            field("dump_payload_sanitizations", &0);
            field("total_reads_processed", &reads);
            field("total_writes_processed", &writes);
            field("io_threaded_reads_processed", &0);
            field("io_threaded_writes_processed", &0);
            field("reply_buffer_shrinks", &0);
            field("reply_buffer_expands", &0);
        }
        "replication" => {
            field("role", &"master");
            field("connected_slaves", &0);
            field("master_failover_state", &"no-failover");
            field("master_replid", &st.replid);
            field("master_replid2", &"0".repeat(40));
            field("master_repl_offset", &0);
            field("second_repl_offset", &-1);
            field("repl_backlog_active", &0);
            field("repl_backlog_size", &1048576);
            field("repl_backlog_first_byte_offset", &0);
            field("repl_backlog_histlen", &0);
        }
        "cpu" => {
            let (sys, user) = cpu(libc::RUSAGE_SELF);
            let (csys, cuser) = cpu(libc::RUSAGE_CHILDREN);
            // The thread answering: a worker, where the connections run.
            let (tsys, tuser) = cpu(libc::RUSAGE_THREAD);
            field("used_cpu_sys", &format!("{sys:.6}"));
            field("used_cpu_user", &format!("{user:.6}"));
            field("used_cpu_sys_children", &format!("{csys:.6}"));
            field("used_cpu_user_children", &format!("{cuser:.6}"));
            field("used_cpu_sys_main_thread", &format!("{tsys:.6}"));
            field("used_cpu_user_main_thread", &format!("{tuser:.6}"));
        }
        "modules" => {}
        "commandstats" => {
            for (id, t) in server.stats.commands().iter().enumerate() {
                if t.calls + t.rejected + t.failed == 0 {
                    continue;
                }
                let per_call = if t.calls == 0 {
                    0.0
                } else {
                    t.usec as f64 / t.calls as f64
                };
                field(
                    &format!("cmdstat_{}", commands::stat_name(id)),
                    &format!(
                        "calls={},usec={},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}",
                        t.calls, t.usec, t.rejected, t.failed
                    ),
                );
            }
        }
        "errorstats" => {
            for (word, n) in server.stats.errors() {
                field(&format!("errorstat_{word}"), &format!("count={n}"));
            }
        }
        "cluster" => field("cluster_enabled", &0),
        "keyspace" => {
            for db in 0..crate::log::DATABASES as usize {
                let keys: u64 = shards.iter().map(|s| s.keys[db].load(Relaxed)).sum();
                let expires: u64 = shards.iter().map(|s| s.expires[db].load(Relaxed)).sum();
                if keys > 0 {
                    field(
                        &format!("db{db}"),
                        &format!("keys={keys},expires={expires},avg_ttl=0"),
                    );
                }
            }
        }
        _ => unreachable!("a section of SECTIONS"),
    }
    s
}
