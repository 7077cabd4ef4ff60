//! Telling valgrind about fiber stacks, so that memcheck follows a context switch.
//!
//! Fiber stacks are separate mappings, often adjacent. When the stack pointer moves
//! from one to another by less than valgrind's `--max-stackframe` (2 MB by default),
//! memcheck takes the switch for a huge stack frame and marks memory between the two
//! stack pointers as unaddressable: later accesses to other fibers' stacks (a fiber
//! record at the top of its stack, a frame still suspended there) are then reported as
//! invalid. Registering each stack (`VALGRIND_STACK_REGISTER`, as Boost.Context and
//! glibc's `makecontext` users do) tells valgrind where stacks are, and a move between
//! two registered stacks is a switch.
//!
//! A client request is a few rotate instructions that do nothing on a real CPU (and an
//! `xchg rbx, rbx`), recognised only by valgrind's JIT: outside valgrind it costs a few
//! cycles per stack mapping and unmapping, never per switch. x86_64 only; on other
//! architectures the functions do nothing.

use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// valgrind.h's `VG_USERREQ__RUNNING_ON_VALGRIND`, `VG_USERREQ__STACK_REGISTER` and
/// `VG_USERREQ__STACK_DEREGISTER`.
const RUNNING_ON_VALGRIND: usize = 0x1001;
const STACK_REGISTER: usize = 0x1501;
const STACK_DEREGISTER: usize = 0x1502;
/// memcheck.h's `VG_USERREQ__MAKE_MEM_UNDEFINED` (tool base `'M' << 24 | 'C' << 16`).
const MAKE_MEM_UNDEFINED: usize = 0x4D43_0001;

/// valgrind.h's `VALGRIND_DO_CLIENT_REQUEST_EXPR`: request `args[0]` with arguments
/// `args[1..]`; returns valgrind's answer, or `default` when not running under it.
#[cfg(target_arch = "x86_64")]
#[inline]
fn client_request(default: usize, args: &[usize; 6]) -> usize {
    let result: usize;
    // SAFETY: the rotations of rdi by 3+13+61+51 = 128 bits leave it unchanged, and
    // `xchg rbx, rbx` changes nothing: on a CPU this is a no-op. Under valgrind the
    // sequence is the documented client-request trap, which reads `args` (rax) and
    // writes its answer in rdx.
    unsafe {
        core::arch::asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            inout("rdx") default => result,
            in("rax") args.as_ptr(),
            inout("rdi") 0usize => _,
            options(nostack),
        );
    }
    result
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn client_request(default: usize, _args: &[usize; 6]) -> usize {
    default
}

/// Whether the process runs under valgrind (asked once).
#[inline]
pub(crate) fn running() -> bool {
    // 0: not asked yet, 1: no, 2: yes.
    static RUNNING: AtomicU8 = AtomicU8::new(0);
    match RUNNING.load(Relaxed) {
        0 => {
            let yes = client_request(0, &[RUNNING_ON_VALGRIND, 0, 0, 0, 0, 0]) != 0;
            RUNNING.store(if yes { 2 } else { 1 }, Relaxed);
            yes
        }
        v => v == 2,
    }
}

/// Tells memcheck that `lo..hi`, a whole stack taken from the cache for a new fiber, is
/// addressable again. When the stack's previous fiber returned up it, memcheck marked
/// what lay below its stack pointer as unaddressable (a stack that shrinks), and the
/// new fiber's record and first frame are written there from another stack.
pub(crate) fn reuse_stack(lo: usize, hi: usize) {
    if running() {
        client_request(0, &[MAKE_MEM_UNDEFINED, lo, hi - lo, 0, 0, 0]);
    }
}

/// Registers `lo..hi` as a stack; returns valgrind's id for it (0 outside valgrind).
pub(crate) fn register_stack(lo: usize, hi: usize) -> usize {
    client_request(0, &[STACK_REGISTER, lo, hi, 0, 0, 0])
}

/// Forgets a stack registered as `id` (before it is unmapped).
pub(crate) fn deregister_stack(id: usize) {
    client_request(0, &[STACK_DEREGISTER, id, 0, 0, 0, 0]);
}
