//! Synchronous IPC between green threads for C: `include/weft/ipc.h`, over
//! [`weft_runtime::ipc`].
//!
//! Thread ids are the `u64` of [`Tid::id`], looked up with [`Tid::from_id`]
//! at each call. Messages cross the boundary as [`WeftIpcMsg`]: a sent
//! payload is copied into a `Vec<u8>` (the caller's buffer stays the
//! caller's, so a failed send loses nothing), and a received one is handed to
//! the receiver as the vector's own buffer (a boxed slice: no second copy),
//! which it gives back with `weft_ipc_payload_free`.
//!
//! Every operation runs under the internal `guard` of [`runtime`](crate::runtime): no panic and no runtime shutdown
//! unwind reaches C. Errors are returned, set as `GetLastError`, and their
//! stage is kept for `weft_ipc_error_stage` (per OS thread, like
//! `GetLastError`).

use crate::runtime::guard;
use crate::{
    set_error, DWORD, WEFT_ERR_CANCELLED, WEFT_ERR_INTERNAL, WEFT_ERR_INVALID_ARGUMENT,
    WEFT_ERR_INVALID_PARTNER, WEFT_ERR_NOT_GREEN_THREAD, WEFT_ERR_NO_SUCH_THREAD,
    WEFT_ERR_PARTNER_DEAD, WEFT_ERR_TIMED_OUT,
};
use core::cell::Cell;
use core::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;
use weft_runtime::ipc::{self, ErrorKind, IpcError, Message, Stage, Tid, Timeout};

/// `struct weft_ipc_msg` of `include/weft/ipc.h` (48 bytes).
#[repr(C)]
#[derive(Debug)]
pub struct WeftIpcMsg {
    /// The inline words.
    pub words: [u64; 4],
    /// NULL, or `payload_len` bytes (see the module comment for who owns them).
    pub payload: *mut c_void,
    /// 0 when `payload` is NULL.
    pub payload_len: usize,
}

/// `WEFT_IPC_STAGE_NONE`: nothing was attempted.
pub const WEFT_IPC_STAGE_NONE: c_int = 0;
/// `WEFT_IPC_STAGE_SEND`: the send failed; the message was not delivered.
pub const WEFT_IPC_STAGE_SEND: c_int = 1;
/// `WEFT_IPC_STAGE_RECEIVE`: the receive failed.
pub const WEFT_IPC_STAGE_RECEIVE: c_int = 2;

std::thread_local! {
    /// The stage of this OS thread's last failed IPC call.
    static STAGE: Cell<c_int> = const { Cell::new(WEFT_IPC_STAGE_NONE) };
}

/// A failed operation: its error code and stage.
struct Fail {
    code: DWORD,
    stage: c_int,
}

impl Fail {
    /// A failure before anything was attempted.
    fn none(code: DWORD) -> Fail {
        Fail {
            code,
            stage: WEFT_IPC_STAGE_NONE,
        }
    }

    fn at(code: DWORD, stage: Stage) -> Fail {
        Fail {
            code,
            stage: match stage {
                Stage::Send => WEFT_IPC_STAGE_SEND,
                Stage::Receive => WEFT_IPC_STAGE_RECEIVE,
            },
        }
    }
}

impl From<IpcError> for Fail {
    fn from(e: IpcError) -> Fail {
        let code = match e.kind() {
            ErrorKind::TimedOut => WEFT_ERR_TIMED_OUT,
            ErrorKind::Cancelled => WEFT_ERR_CANCELLED,
            ErrorKind::PartnerDead => WEFT_ERR_PARTNER_DEAD,
            ErrorKind::NotGreenThread => WEFT_ERR_NOT_GREEN_THREAD,
            ErrorKind::InvalidPartner => WEFT_ERR_INVALID_PARTNER,
            _ => WEFT_ERR_INTERNAL,
        };
        // The unsent message, if any, is dropped with `e`: it is our copy.
        Fail::at(code, e.stage())
    }
}

/// 0, or records the failure (last error and stage) and returns its code.
fn finish(r: Result<(), Fail>) -> DWORD {
    match r {
        Ok(()) => 0,
        Err(f) => {
            let _ = STAGE.try_with(|s| s.set(f.stage));
            set_error(f.code)
        }
    }
}

/// The Rust timeout of a C one (nanoseconds; 0 zero, -1 never).
fn timeout(ns: i64) -> Result<Timeout, Fail> {
    match ns {
        0 => Ok(Timeout::Zero),
        -1 => Ok(Timeout::Never),
        n if n > 0 => Ok(Timeout::After(Duration::from_nanos(n.unsigned_abs()))),
        _ => Err(Fail::none(WEFT_ERR_INVALID_ARGUMENT)),
    }
}

/// Fails unless the caller is a green thread (checked before ids are looked up,
/// so that a plain thread is told so whatever id it passes).
fn green() -> Result<(), Fail> {
    match weft_runtime::current_worker() {
        Some(_) => Ok(()),
        None => Err(Fail::none(WEFT_ERR_NOT_GREEN_THREAD)),
    }
}

/// The thread with id `id`, or `WEFT_ERR_NO_SUCH_THREAD` at `stage`.
fn lookup(id: u64, stage: Stage) -> Result<Tid, Fail> {
    Tid::from_id(id).ok_or(Fail::at(WEFT_ERR_NO_SUCH_THREAD, stage))
}

/// Checks a message from C: a NULL payload has length 0, and a length fits a
/// slice.
fn check(m: &WeftIpcMsg) -> Result<(), Fail> {
    let bad = (m.payload.is_null() && m.payload_len != 0) || m.payload_len > isize::MAX as usize;
    if bad {
        Err(Fail::none(WEFT_ERR_INVALID_ARGUMENT))
    } else {
        Ok(())
    }
}

/// Copies a (checked) message from C into a Rust one.
///
/// # Safety
/// A non-NULL `m.payload` is valid for reading `m.payload_len` bytes.
unsafe fn copy_in(m: &WeftIpcMsg) -> Message {
    let mut out = Message::new(m.words);
    if !m.payload.is_null() {
        // SAFETY: per the contract; the length was checked to fit a slice.
        let bytes = unsafe { core::slice::from_raw_parts(m.payload.cast::<u8>(), m.payload_len) };
        out.payload = Some(bytes.to_vec());
    }
    out
}

/// A received message for C: the payload's buffer is handed over (see
/// `weft_ipc_payload_free`); an empty payload becomes NULL.
fn hand_out(m: Message) -> WeftIpcMsg {
    let (payload, payload_len) = match m.payload {
        Some(v) if !v.is_empty() => {
            let b = v.into_boxed_slice();
            let len = b.len();
            (Box::into_raw(b).cast::<c_void>(), len)
        }
        _ => (core::ptr::null_mut(), 0),
    };
    WeftIpcMsg {
        words: m.words,
        payload,
        payload_len,
    }
}

/// Frees the payload of a message filled in by weft and clears the fields; NULL
/// `msg` or payload: nothing to do.
///
/// # Safety
/// `msg` is NULL or valid for reading and writing a `WeftIpcMsg` whose payload
/// is NULL or the pointer and length a receive or call stored there.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_ipc_payload_free(msg: *mut WeftIpcMsg) {
    // SAFETY: per the contract.
    let Some(m) = (unsafe { msg.as_mut() }) else {
        return;
    };
    if m.payload.is_null() {
        return;
    }
    let p = core::ptr::slice_from_raw_parts_mut(m.payload.cast::<u8>(), m.payload_len);
    // SAFETY: the boxed slice `hand_out` made, with its length (the contract).
    drop(unsafe { Box::from_raw(p) });
    m.payload = core::ptr::null_mut();
    m.payload_len = 0;
}

/// The calling green thread's id, or 0 with `WEFT_ERR_NOT_GREEN_THREAD` from a
/// plain OS thread.
#[unsafe(no_mangle)]
pub extern "C" fn weft_ipc_self() -> u64 {
    match catch_unwind(|| ipc::try_me().map(|t| t.id())) {
        Ok(Some(id)) => id,
        Ok(None) => {
            set_error(WEFT_ERR_NOT_GREEN_THREAD);
            0
        }
        Err(_) => {
            set_error(WEFT_ERR_INTERNAL);
            0
        }
    }
}

/// Sends `*msg` to `dest`, waiting at most `timeout_ns`. Returns 0 or an error
/// code (`ipc.h`).
///
/// # Safety
/// `msg` is NULL or valid for reading a `WeftIpcMsg` whose non-NULL payload is
/// valid for reading `payload_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_ipc_send(
    dest: u64,
    msg: *const WeftIpcMsg,
    timeout_ns: i64,
) -> DWORD {
    // SAFETY: per the contract.
    let Some(msg) = (unsafe { msg.as_ref() }) else {
        return finish(Err(Fail::none(WEFT_ERR_INVALID_ARGUMENT)));
    };
    finish(guard(
        || {
            check(msg)?;
            let t = timeout(timeout_ns)?;
            green()?;
            let to = lookup(dest, Stage::Send)?;
            // SAFETY: the payload is readable (the contract) and was checked.
            let m = unsafe { copy_in(msg) };
            Ok(ipc::send(&to, m, t)?)
        },
        Fail::none,
    ))
}

/// Receives a message from `from` (0: anyone) into `*msg`, and its sender's id
/// into `*sender` (if not NULL), waiting at most `timeout_ns`. Returns 0 or an
/// error code (`ipc.h`).
///
/// # Safety
/// `msg` is NULL or valid for writing a `WeftIpcMsg`; `sender` is NULL or valid
/// for writing a `u64`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_ipc_receive(
    from: u64,
    timeout_ns: i64,
    sender: *mut u64,
    msg: *mut WeftIpcMsg,
) -> DWORD {
    if msg.is_null() {
        return finish(Err(Fail::none(WEFT_ERR_INVALID_ARGUMENT)));
    }
    let got = guard(
        || {
            let t = timeout(timeout_ns)?;
            green()?;
            let from = match from {
                0 => None,
                id => Some(lookup(id, Stage::Receive)?),
            };
            Ok(ipc::receive(from.as_ref(), t)?)
        },
        Fail::none,
    );
    finish(got.map(|(s, m)| {
        // SAFETY: `msg` is not NULL, so valid for writing; `sender` is NULL or
        // valid for writing (the contract).
        unsafe { deliver(s, m, sender, msg) }
    }))
}

/// Writes a received message and its sender to the caller's out parameters.
///
/// # Safety
/// `msg` is valid for writing a `WeftIpcMsg`; `sender` is NULL or valid for
/// writing a `u64`.
unsafe fn deliver(s: Tid, m: Message, sender: *mut u64, msg: *mut WeftIpcMsg) {
    // SAFETY: per the contract.
    unsafe {
        if !sender.is_null() {
            sender.write(s.id());
        }
        msg.write(hand_out(m));
    }
}

/// Sends `*msg` to `dest` and waits for its reply, stored in `*reply`. Returns
/// 0 or an error code (`ipc.h`).
///
/// # Safety
/// `msg` as for `weft_ipc_send`; `reply` is NULL or valid for writing a
/// `WeftIpcMsg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_ipc_call(
    dest: u64,
    msg: *const WeftIpcMsg,
    reply: *mut WeftIpcMsg,
    timeout_ns: i64,
) -> DWORD {
    // SAFETY: per the contract.
    let Some(msg) = (unsafe { msg.as_ref() }) else {
        return finish(Err(Fail::none(WEFT_ERR_INVALID_ARGUMENT)));
    };
    if reply.is_null() {
        return finish(Err(Fail::none(WEFT_ERR_INVALID_ARGUMENT)));
    }
    let got = guard(
        || {
            check(msg)?;
            let t = timeout(timeout_ns)?;
            green()?;
            let to = lookup(dest, Stage::Send)?;
            // SAFETY: the payload is readable (the contract) and was checked.
            let m = unsafe { copy_in(msg) };
            Ok(ipc::call(&to, m, t)?)
        },
        Fail::none,
    );
    finish(got.map(|r| {
        // SAFETY: `reply` is not NULL, so valid for writing (the contract).
        unsafe { reply.write(hand_out(r)) }
    }))
}

/// Replies `*reply` to `client` (timeout zero), then receives the next message
/// from anyone into `*msg` and `*sender` (if not NULL), waiting at most
/// `timeout_ns`. Returns 0 or an error code (`ipc.h`).
///
/// # Safety
/// `reply` as `msg` of `weft_ipc_send`; `msg` and `sender` as for
/// `weft_ipc_receive`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn weft_ipc_reply_and_wait(
    client: u64,
    reply: *const WeftIpcMsg,
    timeout_ns: i64,
    sender: *mut u64,
    msg: *mut WeftIpcMsg,
) -> DWORD {
    // SAFETY: per the contract.
    let Some(reply) = (unsafe { reply.as_ref() }) else {
        return finish(Err(Fail::none(WEFT_ERR_INVALID_ARGUMENT)));
    };
    if msg.is_null() {
        return finish(Err(Fail::none(WEFT_ERR_INVALID_ARGUMENT)));
    }
    let got = guard(
        || {
            check(reply)?;
            let t = timeout(timeout_ns)?;
            green()?;
            let to = lookup(client, Stage::Send)?;
            // SAFETY: the payload is readable (the contract) and was checked.
            let r = unsafe { copy_in(reply) };
            Ok(ipc::reply_and_wait(&to, r, t)?)
        },
        Fail::none,
    );
    finish(got.map(|(s, m)| {
        // SAFETY: `msg` is not NULL, so valid for writing; `sender` is NULL or
        // valid for writing (the contract).
        unsafe { deliver(s, m, sender, msg) }
    }))
}

/// Cancels the IPC operation thread `tid` is blocked in, if any. Returns 0 or
/// `WEFT_ERR_NO_SUCH_THREAD`.
#[unsafe(no_mangle)]
pub extern "C" fn weft_ipc_cancel(tid: u64) -> DWORD {
    // Cancelling never parks: only a panic (a bug) could unwind.
    let r = catch_unwind(AssertUnwindSafe(|| {
        let t = lookup(tid, Stage::Send).map_err(|f| Fail::none(f.code))?;
        ipc::cancel(&t);
        Ok(())
    }));
    finish(r.unwrap_or_else(|_| Err(Fail::none(WEFT_ERR_INTERNAL))))
}

/// The stage (`WEFT_IPC_STAGE_*`) of the calling OS thread's last failed IPC
/// call.
#[unsafe(no_mangle)]
pub extern "C" fn weft_ipc_error_stage() -> c_int {
    STAGE.try_with(Cell::get).unwrap_or(WEFT_IPC_STAGE_NONE)
}
