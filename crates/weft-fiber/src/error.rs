//! Errors: the Windows error codes that `GetLastError` returns, and the Rust [`Error`]
//! that the idiomatic API returns. Every error says what went wrong and what to do.

use core::ffi::CStr;
use std::any::Any;
use std::fmt;

/// No error: the last operation succeeded.
pub const ERROR_SUCCESS: u32 = 0;
/// The operation is not valid here. The Rust API reports a fiber that panicked with this
/// code ([`Error::Panicked`]).
pub const ERROR_INVALID_FUNCTION: u32 = 1;
/// The fiber handle is no longer valid: the fiber has finished or was deleted.
pub const ERROR_INVALID_HANDLE: u32 = 6;
/// No memory or address space for a fiber's stack or record, or no free FLS index.
pub const ERROR_NOT_ENOUGH_MEMORY: u32 = 8;
/// A parameter is invalid: a bad fiber handle, FLS index or flags, or a conversion back
/// to a thread from a fiber that a Rust `Fiber` handle or a runtime owns.
pub const ERROR_INVALID_PARAMETER: u32 = 87;
/// The fiber is running on another thread (or a signal handler tried to switch in the
/// middle of a switch); try again once it has switched away.
pub const ERROR_BUSY: u32 = 170;
/// The thread is already a fiber (`ConvertThreadToFiber` called twice).
pub const ERROR_ALREADY_FIBER: u32 = 1280;
/// The thread is not a fiber: call `ConvertThreadToFiber` first.
pub const ERROR_ALREADY_THREAD: u32 = 1281;

/// What went wrong in a fiber operation.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The thread is already a fiber (`ConvertThreadToFiber` twice).
    AlreadyFiber,
    /// The thread is not a fiber: convert it first.
    NotAFiber,
    /// `ConvertFiberToThread` was called in a fiber that a Rust `Fiber` handle or a
    /// runtime (a green thread) owns; the thread's own fiber, or one made with
    /// `CreateFiber`, may convert back.
    NotThreadFiber,
    /// A parameter was out of range; the text names it.
    InvalidParameter(&'static str),
    /// The fiber is running on another thread (a fiber runs on one thread at a time).
    Busy {
        /// The id of the busy fiber (as [`Fiber::id`](crate::Fiber::id) reports it).
        fiber: u64,
    },
    /// The fiber has finished and cannot be switched to.
    Finished {
        /// The id of the finished fiber.
        fiber: u64,
    },
    /// A signal handler tried to switch while this thread was in the middle of a switch.
    Interrupted,
    /// No memory (or address space) for a stack or a record.
    OutOfMemory(std::io::Error),
    /// The handle named a fiber that has been deleted (or a thread's fiber that
    /// converted back to a thread): it is no longer valid.
    StaleHandle,
    /// The process has as many fibers as weft can keep records for.
    TooManyFibers,
    /// Every FLS index is allocated (`FlsAlloc`).
    NoFlsIndex,
    /// The fiber switched to panicked; this is its payload (see `Fiber::switch_to`).
    Panicked(Box<dyn Any + Send + 'static>),
}

impl Error {
    /// The Windows error code for this error, as `GetLastError` reports it.
    pub fn code(&self) -> u32 {
        match self {
            Error::AlreadyFiber => ERROR_ALREADY_FIBER,
            Error::NotAFiber => ERROR_ALREADY_THREAD,
            Error::NotThreadFiber | Error::InvalidParameter(_) => ERROR_INVALID_PARAMETER,
            Error::Busy { .. } | Error::Interrupted => ERROR_BUSY,
            Error::Finished { .. } | Error::StaleHandle => ERROR_INVALID_HANDLE,
            Error::OutOfMemory(_) | Error::TooManyFibers | Error::NoFlsIndex => {
                ERROR_NOT_ENOUGH_MEMORY
            }
            Error::Panicked(_) => ERROR_INVALID_FUNCTION,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::AlreadyFiber => write!(f, "this thread is already a fiber; convert it once"),
            Error::NotAFiber => write!(
                f,
                "this thread is not a fiber; call ConvertThreadToFiber (convert_thread) first"
            ),
            Error::NotThreadFiber => write!(
                f,
                "ConvertFiberToThread cannot run in a fiber that a Fiber handle or a runtime \
                 owns; switch back to the thread's own fiber first"
            ),
            Error::InvalidParameter(what) => write!(f, "invalid parameter: {what}"),
            Error::Busy { fiber } => write!(
                f,
                "fiber {fiber} is running on another thread; a fiber runs on one thread at a \
                 time, so switch to it after it has switched away"
            ),
            Error::Finished { fiber } => {
                write!(
                    f,
                    "fiber {fiber} has finished; create a new fiber to run more work"
                )
            }
            Error::Interrupted => write!(
                f,
                "a signal handler tried to switch while this thread was switching; try again \
                 at the next signal"
            ),
            Error::OutOfMemory(e) => write!(f, "cannot map a fiber stack: {e}"),
            Error::StaleHandle => write!(
                f,
                "the fiber handle is no longer valid: its fiber was deleted (or its thread \
                 converted back); use a handle of a live fiber"
            ),
            Error::TooManyFibers => write!(
                f,
                "the process has as many fibers as weft can keep records for; delete fibers \
                 that are done"
            ),
            Error::NoFlsIndex => write!(
                f,
                "FLS: all {} indexes are in use; free some with FlsFree",
                crate::fls::FLS_MAXIMUM_AVAILABLE - 1
            ),
            Error::Panicked(_) => write!(f, "the fiber panicked"),
        }
    }
}

impl std::error::Error for Error {}

/// A static description of a Windows error code: what went wrong and what to do.
pub fn message(code: u32) -> &'static CStr {
    match code {
        ERROR_SUCCESS => c"success",
        ERROR_INVALID_FUNCTION => c"the operation is not valid here",
        ERROR_INVALID_HANDLE => c"the fiber handle is not valid (finished or deleted); create a new fiber",
        ERROR_NOT_ENOUGH_MEMORY => c"out of memory: no memory or address space for a fiber stack (each stack takes two memory mappings; raise vm.max_map_count), use smaller stacks or fewer fibers; or, from FlsAlloc, every FLS index is in use: free some with FlsFree",
        ERROR_INVALID_PARAMETER => c"a parameter is invalid: check the fiber handle, the FLS index (1..=4079; FlsFree needs an allocated one) or flags; in a fiber that has stored no FLS value yet, FlsGetValue fails with this code",
        ERROR_BUSY => c"the fiber is running on another thread; switch to it after it has switched away",
        ERROR_ALREADY_FIBER => c"the thread is already a fiber; convert it once",
        ERROR_ALREADY_THREAD => c"the thread is not a fiber; call ConvertThreadToFiber first",
        _ => c"unknown error code",
    }
}
