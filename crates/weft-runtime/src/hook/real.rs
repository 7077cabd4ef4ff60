//! The C library's own functions, which the layer calls instead of the symbols it
//! overrides.
//!
//! A program that links the layer has its `read`, `write`, ... resolve to the layer's
//! (the definitions in the executable or in a library loaded before the C library win);
//! so does the runtime's own code in the same program. Everything the layer itself
//! needs from the kernel therefore goes through the pointers here, looked up by name in
//! the C library (`libc.so.6`, already loaded: `RTLD_NOLOAD`) the first time one is
//! needed. Looking them up in the C library itself, rather than in "the next object"
//! (`RTLD_NEXT`), gives the same answer whatever the order in which the program's
//! libraries were loaded.

use core::ffi::{c_char, c_int, c_uint, c_ulong, c_void};
use core::sync::atomic::{AtomicPtr, Ordering::*};
use libc::{
    addrinfo, epoll_event, fd_set, iovec, msghdr, nfds_t, off_t, pid_t, pollfd, sigset_t, size_t,
    sockaddr, socklen_t, ssize_t, timespec, timeval, FILE,
};

/// Looks every function up (the first call of any of them does, through its stub).
#[cold]
#[inline(never)]
fn resolve_all() {
    // SAFETY: dlopen with RTLD_NOLOAD only returns a handle of an object already loaded
    // (the C library a dynamically linked program always has); dlsym reads its symbol
    // table. Both are safe to call from any thread, also before `main`; racing callers
    // store the same addresses.
    unsafe {
        let mut h = libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        if h.is_null() {
            h = libc::RTLD_NEXT;
        }
        for (j, name) in NAMES.iter().enumerate() {
            let p = libc::dlsym(h, name.as_ptr());
            PTRS[j].store(
                if p.is_null() {
                    missing as *mut c_void
                } else {
                    p
                },
                Release,
            );
        }
    }
}

/// What a function the C library lacks points to.
extern "C" fn missing() -> ! {
    let msg = b"weft-hook: a C library function the layer needs is missing\n";
    // SAFETY: write(2) of a static message; abort.
    unsafe {
        libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len());
        libc::abort()
    }
}

/// The first value of a variadic function's pointer (looked up by its accessor).
macro_rules! null_for {
    ($name:ident) => {
        AtomicPtr::new(core::ptr::null_mut())
    };
}

/// The type of a looked-up function.
macro_rules! fnty {
    (fn ($($a:ty),*) -> $r:ty) => { unsafe extern "C" fn($($a),*) -> $r };
    (vfn ($($a:ty),*) -> $r:ty) => { unsafe extern "C" fn($($a),*, ...) -> $r };
}

/// The functions with a fixed list of arguments start out pointing to a stub that looks
/// them all up and then calls the one asked for (lazy binding, as the dynamic linker's
/// own): their accessor is a load, with no test and no call on the way, so a function
/// of the layer that only passes a call on needs no frame. The variadic ones (which a
/// stub cannot be written for) start null and are looked up by their accessor.
macro_rules! real {
    (
        variadic { $( $vname:ident : vfn($($va:ty),*) -> $vr:ty; )* }
        fixed { $( $name:ident : fn($($arg:ident : $a:ty),*) -> $r:ty; )* }
    ) => {
        #[allow(non_camel_case_types, dead_code)]
        #[repr(usize)]
        enum Idx { $($name,)* $($vname,)* Count }
        const N: usize = Idx::Count as usize;
        /// The names looked up, NUL-terminated.
        static NAMES: [&core::ffi::CStr; N] = [$(
            match core::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                Ok(c) => c,
                Err(_) => panic!("a name without NUL"),
            },
        )* $(
            match core::ffi::CStr::from_bytes_with_nul(concat!(stringify!($vname), "\0").as_bytes()) {
                Ok(c) => c,
                Err(_) => panic!("a name without NUL"),
            },
        )*];
        /// One function per name, in the order of [`NAMES`]: a stub, then the C library's.
        static PTRS: [AtomicPtr<c_void>; N] = [
            $( AtomicPtr::new(stub::$name as *mut c_void), )*
            $( null_for!($vname), )*
        ];
        /// The stubs: look everything up, then call the C library's function.
        mod stub {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[allow(clippy::too_many_arguments)]
                pub(super) unsafe extern "C" fn $name($($arg: $a),*) -> $r {
                    resolve_all();
                    // SAFETY: the C library's function now, called with the caller's
                    // arguments.
                    unsafe { super::$name()($($arg),*) }
                }
            )*
        }
        $(
            /// The C library's function of this name.
            #[inline(always)]
            #[allow(dead_code)]
            pub(crate) fn $name() -> fnty!(fn ($($a),*) -> $r) {
                let p = PTRS[Idx::$name as usize].load(Acquire);
                // SAFETY: the C library's function of this name, or the stub that looks it
                // up, has this type (the prototypes of its headers, which the libc
                // crate's follow).
                unsafe { core::mem::transmute::<*mut c_void, fnty!(fn ($($a),*) -> $r)>(p) }
            }
        )*
        $(
            /// The C library's function of this name.
            #[inline(always)]
            #[allow(dead_code)]
            pub(crate) fn $vname() -> fnty!(vfn ($($va),*) -> $vr) {
                let mut p = PTRS[Idx::$vname as usize].load(Acquire);
                if p.is_null() {
                    resolve_all();
                    p = PTRS[Idx::$vname as usize].load(Acquire);
                }
                // SAFETY: as above.
                unsafe { core::mem::transmute::<*mut c_void, fnty!(vfn ($($va),*) -> $vr)>(p) }
            }
        )*
    };
}

real! {
    variadic {
        open: vfn(*const c_char, c_int) -> c_int;
        open64: vfn(*const c_char, c_int) -> c_int;
        openat: vfn(c_int, *const c_char, c_int) -> c_int;
        openat64: vfn(c_int, *const c_char, c_int) -> c_int;
        fcntl: vfn(c_int, c_int) -> c_int;
        fcntl64: vfn(c_int, c_int) -> c_int;
        ioctl: vfn(c_int, c_ulong) -> c_int;
    }
    fixed {
        read: fn(a0: c_int, a1: *mut c_void, a2: size_t) -> ssize_t;
        readv: fn(a0: c_int, a1: *const iovec, a2: c_int) -> ssize_t;
        write: fn(a0: c_int, a1: *const c_void, a2: size_t) -> ssize_t;
        writev: fn(a0: c_int, a1: *const iovec, a2: c_int) -> ssize_t;
        pread64: fn(a0: c_int, a1: *mut c_void, a2: size_t, a3: off_t) -> ssize_t;
        pwrite64: fn(a0: c_int, a1: *const c_void, a2: size_t, a3: off_t) -> ssize_t;
        preadv: fn(a0: c_int, a1: *const iovec, a2: c_int, a3: off_t) -> ssize_t;
        pwritev: fn(a0: c_int, a1: *const iovec, a2: c_int, a3: off_t) -> ssize_t;
        recv: fn(a0: c_int, a1: *mut c_void, a2: size_t, a3: c_int) -> ssize_t;
        recvfrom: fn(a0: c_int, a1: *mut c_void, a2: size_t, a3: c_int, a4: *mut sockaddr, a5: *mut socklen_t) -> ssize_t;
        recvmsg: fn(a0: c_int, a1: *mut msghdr, a2: c_int) -> ssize_t;
        send: fn(a0: c_int, a1: *const c_void, a2: size_t, a3: c_int) -> ssize_t;
        sendto: fn(a0: c_int, a1: *const c_void, a2: size_t, a3: c_int, a4: *const sockaddr, a5: socklen_t) -> ssize_t;
        sendmsg: fn(a0: c_int, a1: *const msghdr, a2: c_int) -> ssize_t;
        accept: fn(a0: c_int, a1: *mut sockaddr, a2: *mut socklen_t) -> c_int;
        accept4: fn(a0: c_int, a1: *mut sockaddr, a2: *mut socklen_t, a3: c_int) -> c_int;
        connect: fn(a0: c_int, a1: *const sockaddr, a2: socklen_t) -> c_int;
        poll: fn(a0: *mut pollfd, a1: nfds_t, a2: c_int) -> c_int;
        ppoll: fn(a0: *mut pollfd, a1: nfds_t, a2: *const timespec, a3: *const sigset_t) -> c_int;
        select: fn(a0: c_int, a1: *mut fd_set, a2: *mut fd_set, a3: *mut fd_set, a4: *mut timeval) -> c_int;
        pselect: fn(a0: c_int, a1: *mut fd_set, a2: *mut fd_set, a3: *mut fd_set, a4: *const timespec, a5: *const sigset_t) -> c_int;
        epoll_wait: fn(a0: c_int, a1: *mut epoll_event, a2: c_int, a3: c_int) -> c_int;
        epoll_pwait: fn(a0: c_int, a1: *mut epoll_event, a2: c_int, a3: c_int, a4: *const sigset_t) -> c_int;
        epoll_create1: fn(a0: c_int) -> c_int;
        epoll_create: fn(a0: c_int) -> c_int;
        nanosleep: fn(a0: *const timespec, a1: *mut timespec) -> c_int;
        clock_nanosleep: fn(a0: libc::clockid_t, a1: c_int, a2: *const timespec, a3: *mut timespec) -> c_int;
        usleep: fn(a0: c_uint) -> c_int;
        sleep: fn(a0: c_uint) -> c_uint;
        fsync: fn(a0: c_int) -> c_int;
        fdatasync: fn(a0: c_int) -> c_int;
        creat: fn(a0: *const c_char, a1: libc::mode_t) -> c_int;
        creat64: fn(a0: *const c_char, a1: libc::mode_t) -> c_int;
        close: fn(a0: c_int) -> c_int;
        getaddrinfo: fn(a0: *const c_char, a1: *const c_char, a2: *const addrinfo, a3: *mut *mut addrinfo) -> c_int;
        waitpid: fn(a0: pid_t, a1: *mut c_int, a2: c_int) -> pid_t;
        wait: fn(a0: *mut c_int) -> pid_t;
        waitid: fn(a0: libc::idtype_t, a1: libc::id_t, a2: *mut libc::siginfo_t, a3: c_int) -> c_int;
        fork: fn() -> pid_t;
        setsockopt: fn(a0: c_int, a1: c_int, a2: c_int, a3: *const c_void, a4: socklen_t) -> c_int;
        dup: fn(a0: c_int) -> c_int;
        dup2: fn(a0: c_int, a1: c_int) -> c_int;
        dup3: fn(a0: c_int, a1: c_int, a2: c_int) -> c_int;
        socket: fn(a0: c_int, a1: c_int, a2: c_int) -> c_int;
        socketpair: fn(a0: c_int, a1: c_int, a2: c_int, a3: *mut c_int) -> c_int;
        pipe: fn(a0: *mut c_int) -> c_int;
        pipe2: fn(a0: *mut c_int, a1: c_int) -> c_int;
        eventfd: fn(a0: c_uint, a1: c_int) -> c_int;
        fclose: fn(a0: *mut FILE) -> c_int;
        pclose: fn(a0: *mut FILE) -> c_int;
        close_range: fn(a0: c_uint, a1: c_uint, a2: c_int) -> c_int;
        sigaction: fn(a0: c_int, a1: *const libc::sigaction, a2: *mut libc::sigaction) -> c_int;
        signal: fn(a0: c_int, a1: libc::sighandler_t) -> libc::sighandler_t;
        // Not covered: overridden to be counted (`uncovered.rs`).
        fread: fn(a0: *mut c_void, a1: size_t, a2: size_t, a3: *mut FILE) -> size_t;
        fwrite: fn(a0: *const c_void, a1: size_t, a2: size_t, a3: *mut FILE) -> size_t;
        fgets: fn(a0: *mut c_char, a1: c_int, a2: *mut FILE) -> *mut c_char;
        getline: fn(a0: *mut *mut c_char, a1: *mut size_t, a2: *mut FILE) -> ssize_t;
        getdelim: fn(a0: *mut *mut c_char, a1: *mut size_t, a2: c_int, a3: *mut FILE) -> ssize_t;
        fflush: fn(a0: *mut FILE) -> c_int;
        system: fn(a0: *const c_char) -> c_int;
        popen: fn(a0: *const c_char, a1: *const c_char) -> *mut FILE;
        wait3: fn(a0: *mut c_int, a1: c_int, a2: *mut libc::rusage) -> pid_t;
        wait4: fn(a0: pid_t, a1: *mut c_int, a2: c_int, a3: *mut libc::rusage) -> pid_t;
        sigwait: fn(a0: *const sigset_t, a1: *mut c_int) -> c_int;
        sigwaitinfo: fn(a0: *const sigset_t, a1: *mut libc::siginfo_t) -> c_int;
        sigtimedwait: fn(a0: *const sigset_t, a1: *mut libc::siginfo_t, a2: *const timespec) -> c_int;
        sigsuspend: fn(a0: *const sigset_t) -> c_int;
        pause: fn() -> c_int;
        flock: fn(a0: c_int, a1: c_int) -> c_int;
        lockf: fn(a0: c_int, a1: c_int, a2: off_t) -> c_int;
        recvmmsg: fn(a0: c_int, a1: *mut libc::mmsghdr, a2: c_uint, a3: c_int, a4: *mut timespec) -> c_int;
        sendmmsg: fn(a0: c_int, a1: *mut libc::mmsghdr, a2: c_uint, a3: c_int) -> c_int;
        sendfile: fn(a0: c_int, a1: c_int, a2: *mut off_t, a3: size_t) -> ssize_t;
        splice: fn(a0: c_int, a1: *mut libc::loff_t, a2: c_int, a3: *mut libc::loff_t, a4: size_t, a5: c_uint) -> ssize_t;
        copy_file_range: fn(a0: c_int, a1: *mut libc::off64_t, a2: c_int, a3: *mut libc::off64_t, a4: size_t, a5: c_uint) -> ssize_t;
        gethostbyname: fn(a0: *const c_char) -> *mut libc::hostent;
        getnameinfo: fn(a0: *const sockaddr, a1: socklen_t, a2: *mut c_char, a3: socklen_t, a4: *mut c_char, a5: socklen_t, a6: c_int) -> c_int;
        pthread_join: fn(a0: libc::pthread_t, a1: *mut *mut c_void) -> c_int;
        sem_wait: fn(a0: *mut libc::sem_t) -> c_int;
        sem_timedwait: fn(a0: *mut libc::sem_t, a1: *const timespec) -> c_int;
        msgrcv: fn(a0: c_int, a1: *mut c_void, a2: size_t, a3: core::ffi::c_long, a4: c_int) -> ssize_t;
        msgsnd: fn(a0: c_int, a1: *const c_void, a2: size_t, a3: c_int) -> c_int;
    }
}
