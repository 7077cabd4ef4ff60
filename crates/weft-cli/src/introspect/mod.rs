//! What `weft ps`, `weft top` and `weft fs` show about another process's fibers, on top
//! of `weft_fiber::introspect` (which reads the registry):
//!
//! * [`symbols`]: entry-point addresses resolved to symbol names from the target's ELF
//!   files;
//! * [`stackmem`]: stack high-water marks from `/proc/PID/smaps`;
//! * here: the process's command and user, and how numbers are printed.
//!
//! [`Details::gather`] does the per-process work once (maps, ELF files, smaps) so a
//! caller listing 100,000 fibers pays no system call per fiber and resolves each
//! distinct entry point once.

// Shared with the `fs` command: not every helper is used by every command.
#![allow(dead_code)]

pub mod stackmem;
pub mod symbols;

use std::collections::HashMap;
use std::time::Duration;

use weft_fiber::introspect::FiberInfo;
use weft_fiber::FiberState;

pub use stackmem::Smaps;
pub use symbols::{Resolver, Symbol};

/// `/proc/PID/comm` without its newline, or `None` if the process is gone.
pub fn command(pid: i32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(s.trim_end_matches('\n').to_string())
}

/// The login name of `uid`, or the number if it has none.
pub fn user_name(uid: u32) -> String {
    let mut buf = vec![0u8; 1024];
    loop {
        // SAFETY: getpwuid_r writes into `pw` and `buf` (of the length passed) only.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut out: *mut libc::passwd = std::ptr::null_mut();
        let rc =
            unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr().cast(), buf.len(), &mut out) };
        if rc == libc::ERANGE && buf.len() < (1 << 20) {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if rc != 0 || out.is_null() || pw.pw_name.is_null() {
            return uid.to_string();
        }
        // SAFETY: getpwuid_r succeeded, so pw_name is a C string inside `buf`.
        let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
        return name.to_string_lossy().into_owned();
    }
}

/// "ready", "running" or "finished".
pub fn state_name(state: FiberState) -> &'static str {
    match state {
        FiberState::Ready => "ready",
        FiberState::Running => "running",
        FiberState::Finished => "finished",
    }
}

/// A fiber's state as a table shows it: with `?` when its statistics were not copied
/// as one (the fiber kept its slot busy for the whole read, see
/// `FiberInfo::consistent`), so the state may be a switch off.
pub fn state_label(f: &FiberInfo) -> String {
    let name = state_name(f.state);
    if f.consistent {
        name.to_string()
    } else {
        format!("{name}?")
    }
}

/// A duration for people: `812 ns`, `3.250 us`, `1.234 ms`, `2.500 s`.
pub fn human_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.3} us", ns as f64 / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.3} ms", ns as f64 / 1e6)
    } else {
        format!("{:.3} s", ns as f64 / 1e9)
    }
}

/// A byte count for people: `512 B`, `16 KiB`, `1 MiB`, `1.5 MiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 || v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A fiber's name as a column shows it: `-` when it has none.
pub fn name_label(f: &FiberInfo) -> &str {
    f.name.as_deref().unwrap_or("-")
}

/// Where a fiber was spawned as a column shows it: `file:line`, `-` when unknown.
pub fn site_label(f: &FiberInfo) -> String {
    f.spawned_at
        .as_ref()
        .map_or_else(|| "-".to_string(), ToString::to_string)
}

/// What the registry does not say about a fiber and [`Details`] works out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extra {
    /// The entry point's symbol (`None` for converted threads and unresolved addresses).
    pub entry_symbol: Option<Symbol>,
    /// Stack bytes touched so far (`None` for converted threads or if unknown).
    pub stack_high_water: Option<u64>,
}

/// Symbol names and stack use for the fibers of one process, gathered once.
pub struct Details {
    resolver: Option<Resolver>,
    smaps: Option<Smaps>,
    by_entry: HashMap<u64, Option<Symbol>>,
}

impl Details {
    /// Reads the process's maps and smaps. Never fails: what cannot be read (the
    /// process exited meanwhile, a file is unreadable) is left unknown.
    pub fn gather(pid: i32) -> Details {
        let maps = std::fs::read(format!("/proc/{pid}/maps")).ok();
        Details {
            resolver: maps.as_deref().map(|m| Resolver::with_maps(pid, m)),
            smaps: maps
                .as_deref()
                .and_then(|m| Smaps::load_with_maps(pid, m).ok()),
            by_entry: HashMap::new(),
        }
    }

    /// Like [`Details::gather`] without reading smaps (no high-water marks).
    pub fn symbols_only(pid: i32) -> Details {
        Details {
            resolver: Resolver::new(pid).ok(),
            smaps: None,
            by_entry: HashMap::new(),
        }
    }

    /// The entry symbol of an address (each address is resolved once).
    pub fn entry_symbol(&mut self, entry: u64) -> Option<Symbol> {
        if entry == 0 {
            return None;
        }
        if let Some(s) = self.by_entry.get(&entry) {
            return s.clone();
        }
        let s = self.resolver.as_mut().and_then(|r| r.resolve(entry));
        self.by_entry.insert(entry, s.clone());
        s
    }

    /// Stack bytes touched of a fiber's stack.
    pub fn stack_high_water(&self, f: &FiberInfo) -> Option<u64> {
        if f.is_thread_fiber || f.stack_size == 0 {
            return None;
        }
        self.smaps.as_ref()?.rss_of(f.stack_base, f.stack_size)
    }

    /// Both, for one fiber.
    pub fn extra(&mut self, f: &FiberInfo) -> Extra {
        Extra {
            entry_symbol: if f.is_thread_fiber {
                None
            } else {
                self.entry_symbol(f.entry)
            },
            stack_high_water: self.stack_high_water(f),
        }
    }

    /// How the entry point is shown: the function a Rust fiber or green thread runs
    /// (its closure's type name, from the registry), else the entry point's symbol,
    /// `(thread)` for a converted thread, else the address in hex.
    pub fn entry_label(&mut self, f: &FiberInfo) -> String {
        if f.is_thread_fiber {
            return "(thread)".to_string();
        }
        if let Some(function) = &f.function {
            return function.clone();
        }
        match self.entry_symbol(f.entry) {
            Some(s) => s.to_string(),
            None => format!("{:#x}", f.entry),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_formats() {
        assert_eq!(human_duration(Duration::from_nanos(812)), "812 ns");
        assert_eq!(human_duration(Duration::from_nanos(3_250)), "3.250 us");
        assert_eq!(human_duration(Duration::from_micros(1_234)), "1.234 ms");
        assert_eq!(human_duration(Duration::from_millis(2_500)), "2.500 s");
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(16 * 1024), "16 KiB");
        assert_eq!(human_bytes(1 << 20), "1 MiB");
        assert_eq!(human_bytes(3 << 19), "1.5 MiB");
    }

    #[test]
    fn root_is_root() {
        assert_eq!(user_name(0), "root");
    }
}
