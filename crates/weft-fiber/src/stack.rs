//! Fiber stacks: `mmap`'d, lazily committed, with a guard region below, and cached.
//!
//! A stack is one anonymous private mapping reserved with `MAP_NORESERVE`, so its pages
//! cost memory only once touched. The lowest [`GUARD_SIZE`] bytes are `PROT_NONE`: a
//! fiber that overflows faults there, and the overflow handler (`overflow.rs`) names the
//! fiber. Creating a mapping costs two system calls and some microseconds of page-table
//! work, so freed stacks go to a cache, as NPTL caches thread stacks: first a small
//! per-thread cache (no lock), then a bounded process-wide one, and only then `munmap`.

use std::io;
use std::ptr::NonNull;
use std::sync::Mutex;

/// The guard region below every stack.
pub const GUARD_SIZE: usize = 16 * 1024;
/// The stack a fiber gets when its creator asks for 0 bytes (Windows reserves 1 MiB).
pub const DEFAULT_STACK_SIZE: usize = 1024 * 1024;
/// The smallest usable stack weft hands out; smaller requests are rounded up.
pub const MIN_STACK_SIZE: usize = 16 * 1024;

const PAGE: usize = 4096;
/// How many stacks each thread keeps for reuse.
const THREAD_CACHE_STACKS: usize = 32;
/// How many stacks (and bytes of reservation) the process-wide cache keeps.
const GLOBAL_CACHE_STACKS: usize = 256;
const GLOBAL_CACHE_BYTES: usize = 1 << 30;

/// One fiber stack: a mapping whose lowest `GUARD_SIZE` bytes are inaccessible.
#[derive(Debug)]
pub struct Stack {
    base: NonNull<u8>,
    len: usize,
    /// valgrind's id for this stack (0 when not running under valgrind).
    vg_id: usize,
}

// SAFETY: a Stack is plain owned memory; nothing about it is tied to a thread.
unsafe impl Send for Stack {}

impl Stack {
    /// Rounds a requested usable size to what weft will map.
    pub fn round_size(usable: usize) -> usize {
        let usable = if usable == 0 {
            DEFAULT_STACK_SIZE
        } else {
            usable
        };
        usable.max(MIN_STACK_SIZE).div_ceil(PAGE) * PAGE
    }

    /// Maps a fresh stack with `usable` bytes (already rounded) above its guard.
    pub fn map(usable: usize) -> io::Result<Stack> {
        let len = usable
            .checked_add(GUARD_SIZE)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing
        // touches no existing memory.
        let base = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(explain(io::Error::last_os_error()));
        }
        // SAFETY: the guard lies inside the mapping just made.
        if unsafe { libc::mprotect(base, GUARD_SIZE, libc::PROT_NONE) } != 0 {
            let e = explain(io::Error::last_os_error());
            // SAFETY: unmaps what we mapped above.
            unsafe { libc::munmap(base, len) };
            return Err(e);
        }
        let vg_id =
            crate::valgrind::register_stack(base as usize + GUARD_SIZE, base as usize + len);
        Ok(Stack {
            base: NonNull::new(base.cast()).expect("mmap returned null"),
            len,
            vg_id,
        })
    }

    /// This stack, taken from a cache for a new fiber (see `valgrind::reuse_stack`).
    #[inline]
    fn reused(self) -> Stack {
        let (lo, hi) = (
            self.base.as_ptr() as usize + GUARD_SIZE,
            self.top() as usize,
        );
        crate::valgrind::reuse_stack(lo, hi);
        crate::sanitizer::unpoison_stack(lo, hi);
        self
    }

    /// The exclusive upper end of the stack (stacks grow down from here).
    pub fn top(&self) -> *mut u8 {
        // SAFETY: one past the end of the mapping.
        unsafe { self.base.as_ptr().add(self.len) }
    }

    /// Bytes usable above the guard.
    pub fn usable_size(&self) -> usize {
        self.len - GUARD_SIZE
    }

    /// The address range of the guard region.
    pub fn guard(&self) -> core::ops::Range<usize> {
        let b = self.base.as_ptr() as usize;
        b..b + GUARD_SIZE
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        crate::valgrind::deregister_stack(self.vg_id);
        crate::sanitizer::unpoison_stack(
            self.base.as_ptr() as usize + GUARD_SIZE,
            self.top() as usize,
        );
        // SAFETY: we own the mapping; nothing runs on a stack that is being dropped.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Says why a stack could not be mapped when the likely cause is the process's limit on
/// memory mappings (each stack is two: the stack and its guard) rather than memory.
fn explain(e: io::Error) -> io::Error {
    if e.raw_os_error() != Some(libc::ENOMEM) {
        return e;
    }
    let limit = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let used = std::fs::read_to_string("/proc/self/maps")
        .map(|s| s.lines().count())
        .ok();
    explain_with(e, used, limit)
}

/// `explain`'s decision, given the mappings in use and the limit.
fn explain_with(e: io::Error, used: Option<usize>, limit: Option<usize>) -> io::Error {
    match (used, limit) {
        (Some(used), Some(limit)) if used + 16 >= limit => io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!(
                "the process has {used} memory mappings, at the system's limit vm.max_map_count = \
                 {limit} (each fiber stack takes two); raise it, e.g. sysctl -w \
                 vm.max_map_count=262144"
            ),
        ),
        _ => e,
    }
}

/// A bounded set of free stacks.
#[derive(Debug, Default)]
pub struct StackCache {
    stacks: Vec<Stack>,
    bytes: usize,
}

impl StackCache {
    /// An empty cache (usable in a `static`).
    pub const fn new() -> Self {
        StackCache {
            stacks: Vec::new(),
            bytes: 0,
        }
    }

    /// Takes a cached stack of exactly `usable` bytes, if there is one.
    fn take(&mut self, usable: usize) -> Option<Stack> {
        let i = self
            .stacks
            .iter()
            .rposition(|s| s.usable_size() == usable)?;
        let s = self.stacks.swap_remove(i);
        self.bytes -= s.len;
        Some(s)
    }

    /// Keeps `s` if there is room under the limits; otherwise hands it back.
    fn put(&mut self, s: Stack, max_stacks: usize, max_bytes: usize) -> Result<(), Stack> {
        if self.stacks.len() >= max_stacks || self.bytes + s.len > max_bytes {
            return Err(s);
        }
        self.bytes += s.len;
        self.stacks.push(s);
        Ok(())
    }

    /// Moves every stack into the process-wide cache (or unmaps it): for a thread that exits.
    pub fn drain_to_global(&mut self) {
        for s in self.stacks.drain(..) {
            release_global(s);
        }
        self.bytes = 0;
    }
}

static GLOBAL: Mutex<StackCache> = Mutex::new(StackCache::new());

/// Gets a stack with `usable` bytes (as rounded by `round_size`): from `local`, then the
/// process-wide cache, then a fresh mapping.
pub fn acquire(local: Option<&mut StackCache>, usable: usize) -> io::Result<Stack> {
    if let Some(s) = local.and_then(|c| c.take(usable)) {
        return Ok(s.reused());
    }
    if let Some(s) = GLOBAL
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take(usable)
    {
        return Ok(s.reused());
    }
    Stack::map(usable)
}

/// Returns a stack for reuse: to `local` if it has room, else the process-wide cache,
/// else it is unmapped.
pub fn release(local: Option<&mut StackCache>, s: Stack) {
    let s = match local {
        Some(c) => match c.put(s, THREAD_CACHE_STACKS, usize::MAX) {
            Ok(()) => return,
            Err(s) => s,
        },
        None => s,
    };
    release_global(s);
}

fn release_global(s: Stack) {
    let mut g = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Err(s) = g.put(s, GLOBAL_CACHE_STACKS, GLOBAL_CACHE_BYTES) {
        drop(g);
        drop(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_up_to_pages_with_a_minimum_and_a_default() {
        assert_eq!(Stack::round_size(0), DEFAULT_STACK_SIZE);
        assert_eq!(Stack::round_size(1), MIN_STACK_SIZE);
        assert_eq!(Stack::round_size(65536 + 1), 65536 + PAGE);
    }

    #[test]
    fn enomem_at_the_mapping_limit_names_the_limit_and_the_fix() {
        let enomem = || io::Error::from_raw_os_error(libc::ENOMEM);
        let at_limit = explain_with(enomem(), Some(65_520), Some(65_530)).to_string();
        assert!(at_limit.contains("vm.max_map_count = 65530"), "{at_limit}");
        assert!(
            at_limit.contains("sysctl -w vm.max_map_count="),
            "{at_limit}"
        );
        let plenty = explain_with(enomem(), Some(1_000), Some(65_530));
        assert_eq!(
            plenty.raw_os_error(),
            Some(libc::ENOMEM),
            "plain ENOMEM stays as it is"
        );
        assert_eq!(
            explain(io::Error::from_raw_os_error(libc::EINVAL)).raw_os_error(),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn stacks_are_reused_from_the_local_cache() {
        let mut c = StackCache::new();
        let s = acquire(Some(&mut c), 64 * 1024).unwrap();
        let top = s.top();
        release(Some(&mut c), s);
        let s2 = acquire(Some(&mut c), 64 * 1024).unwrap();
        assert_eq!(s2.top(), top, "a freed stack of the same size is reused");
        assert_eq!(s2.usable_size(), 64 * 1024);
        let g = s2.guard();
        assert_eq!(g.end - g.start, GUARD_SIZE);
        assert_eq!(g.end + s2.usable_size(), s2.top() as usize);
    }
}
