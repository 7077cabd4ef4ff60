//! The syslet ABI: the atom as the kernel syslets defined it, and its flags.
//!
//! ```c
//! struct syslet_uatom {
//!     unsigned long flags;
//!     unsigned long nr;                 /* system call number (or SYS_UMEM_ADD) */
//!     long *ret_ptr;                    /* where the result goes (may be NULL) */
//!     struct syslet_uatom *next;        /* the atom after this one (NULL: the end) */
//!     unsigned long *arg_ptr[6];        /* pointers to the arguments, NULL-terminated */
//!     void *private;                    /* the caller's, never touched */
//! };
//! ```
//!
//! Arguments are pointers to values, read when the atom runs: one atom's `ret_ptr`
//! and a later atom's `arg_ptr[i]` can point to the same variable, so a result feeds
//! a later argument (an `open`'s descriptor into a `read`). Arguments after the first
//! NULL pointer are 0, as in the kernel syslets' `copy_uatom`.
//!
//! ## How a syslet runs (the kernel syslets' rules)
//!
//! After an atom runs, its result is stored at `ret_ptr` (if not NULL) and checked
//! against the atom's stop conditions. If one holds, the syslet **stops** there and that
//! atom is its completion, unless the atom has `SYSLET_SKIP_TO_NEXT_ON_STOP`: then
//! execution goes on with the *linearly next* atom in memory (`atom + 1`), which is how
//! a syslet branches ("else"). Otherwise execution follows `next`; a NULL `next` ends
//! the syslet. A `next` pointing back makes a loop (with a stop condition to leave it,
//! typically on an `umem_add` counter).

use core::ffi::c_void;

/// One system call of a syslet (the kernel syslets' `struct syslet_uatom`, same layout).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SysletUatom {
    /// `SYSLET_*` flags.
    pub flags: u64,
    /// The system call number (`libc::SYS_*`), or [`SYS_UMEM_ADD`](super::SYS_UMEM_ADD).
    pub nr: u64,
    /// Where the result is stored (NULL: nowhere).
    pub ret_ptr: *mut i64,
    /// The next atom (NULL: the syslet ends after this one).
    pub next: *mut SysletUatom,
    /// Pointers to the arguments; the first NULL ends them.
    pub arg_ptr: [*const u64; 6],
    /// The caller's; never touched.
    pub private: *mut c_void,
}

// SAFETY: an atom is plain data (pointers into the submitter's memory, which the
// submitter keeps valid while the syslet runs: the executor's contract).
unsafe impl Send for SysletUatom {}

impl Default for SysletUatom {
    fn default() -> Self {
        SysletUatom {
            flags: 0,
            nr: 0,
            ret_ptr: core::ptr::null_mut(),
            next: core::ptr::null_mut(),
            arg_ptr: [core::ptr::null(); 6],
            private: core::ptr::null_mut(),
        }
    }
}

/// Run this atom (and the rest of its syslet) on a cachemiss thread at once, without
/// trying it inline first (for calls known to block, or to take long).
pub const SYSLET_ASYNC: u64 = 0x0000_0001;
/// Never go asynchronous: run inline even if the call blocks (the submitter waits).
pub const SYSLET_SYNC: u64 = 0x0000_0002;
/// If the syslet ends at this atom, put no completion in the ring.
pub const SYSLET_NO_COMPLETE: u64 = 0x0000_0004;
/// Stop if the result is not 0.
pub const SYSLET_STOP_ON_NONZERO: u64 = 0x0000_0008;
/// Stop if the result is 0.
pub const SYSLET_STOP_ON_ZERO: u64 = 0x0000_0010;
/// Stop if the result is negative (a failed system call: `-errno`).
pub const SYSLET_STOP_ON_NEGATIVE: u64 = 0x0000_0020;
/// Stop if the result is 0 or negative.
pub const SYSLET_STOP_ON_NON_POSITIVE: u64 = 0x0000_0040;
/// On a stop condition, go on with the linearly next atom instead of stopping.
pub const SYSLET_SKIP_TO_NEXT_ON_STOP: u64 = 0x0000_0080;

/// Every stop condition.
pub const SYSLET_STOP_MASK: u64 = SYSLET_STOP_ON_NONZERO
    | SYSLET_STOP_ON_ZERO
    | SYSLET_STOP_ON_NEGATIVE
    | SYSLET_STOP_ON_NON_POSITIVE;

/// Every defined flag.
pub const SYSLET_FLAGS: u64 = SYSLET_ASYNC
    | SYSLET_SYNC
    | SYSLET_NO_COMPLETE
    | SYSLET_STOP_MASK
    | SYSLET_SKIP_TO_NEXT_ON_STOP;

/// Whether a stop condition of `flags` holds for `ret`.
#[inline]
pub fn stops(flags: u64, ret: i64) -> bool {
    (flags & SYSLET_STOP_ON_NONZERO != 0 && ret != 0)
        || (flags & SYSLET_STOP_ON_ZERO != 0 && ret == 0)
        || (flags & SYSLET_STOP_ON_NEGATIVE != 0 && ret < 0)
        || (flags & SYSLET_STOP_ON_NON_POSITIVE != 0 && ret <= 0)
}

/// Where execution goes after `atom` (at `at`) returned `ret`: `Some(next)` or the end
/// (`None`: `atom` is the syslet's final atom).
#[inline]
pub fn successor(at: *mut SysletUatom, atom: &SysletUatom, ret: i64) -> Option<*mut SysletUatom> {
    if stops(atom.flags, ret) {
        if atom.flags & SYSLET_SKIP_TO_NEXT_ON_STOP != 0 {
            // SAFETY: only an address computation; the next atom is read (checked) when
            // it runs.
            return Some(at.wrapping_add(1));
        }
        return None;
    }
    (!atom.next.is_null()).then_some(atom.next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_the_kernel_syslets() {
        assert_eq!(core::mem::size_of::<SysletUatom>(), 8 * 11);
        assert_eq!(core::mem::offset_of!(SysletUatom, arg_ptr), 32);
        assert_eq!(core::mem::offset_of!(SysletUatom, private), 80);
    }

    #[test]
    fn stop_conditions() {
        assert!(stops(SYSLET_STOP_ON_NEGATIVE, -2));
        assert!(!stops(SYSLET_STOP_ON_NEGATIVE, 0));
        assert!(stops(SYSLET_STOP_ON_NON_POSITIVE, 0));
        assert!(!stops(SYSLET_STOP_ON_NON_POSITIVE, 1));
        assert!(stops(SYSLET_STOP_ON_ZERO, 0));
        assert!(stops(SYSLET_STOP_ON_NONZERO, 5));
        assert!(!stops(0, -1));
    }
}
