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

/// One looked-up function per name, in the order of [`NAMES`].
static PTRS: [AtomicPtr<c_void>; N] = [const { AtomicPtr::new(core::ptr::null_mut()) }; N];

/// Looks every function up (once; racing callers find the same addresses).
#[cold]
#[inline(never)]
fn resolve(i: usize) -> *mut c_void {
    // SAFETY: dlopen with RTLD_NOLOAD only returns a handle of an object already loaded
    // (the C library a dynamically linked program always has); dlsym reads its symbol
    // table. Both are safe to call from any thread, also before `main`.
    unsafe {
        let mut h = libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY);
        if h.is_null() {
            h = libc::RTLD_NEXT;
        }
        for (j, name) in NAMES.iter().enumerate() {
            if PTRS[j].load(Relaxed).is_null() {
                let p = libc::dlsym(h, name.as_ptr());
                PTRS[j].store(p, Relaxed);
            }
        }
        let p = PTRS[i].load(Relaxed);
        if p.is_null() {
            let msg = b"weft-hook: a C library function the layer needs is missing\n";
            libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len());
            libc::abort();
        }
        p
    }
}

/// The type of a looked-up function: `fn` fixed arguments, `vfn` variadic.
macro_rules! fnty {
    (fn ($($a:ty),*) -> $r:ty) => { unsafe extern "C" fn($($a),*) -> $r };
    (vfn ($($a:ty),*) -> $r:ty) => { unsafe extern "C" fn($($a),*, ...) -> $r };
}

macro_rules! real {
    ($( $name:ident : $k:ident ($($a:ty),*) -> $r:ty; )*) => {
        #[allow(non_camel_case_types, dead_code)]
        #[repr(usize)]
        enum Idx { $($name,)* Count }
        const N: usize = Idx::Count as usize;
        /// The names looked up, NUL-terminated.
        static NAMES: [&core::ffi::CStr; N] = [$(
            match core::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                Ok(c) => c,
                Err(_) => panic!("a name without NUL"),
            },
        )*];
        $(
            /// The C library's function of this name.
            #[inline(always)]
            #[allow(dead_code)]
            pub(crate) fn $name() -> fnty!($k ($($a),*) -> $r) {
                let mut p = PTRS[Idx::$name as usize].load(Relaxed);
                if p.is_null() {
                    p = resolve(Idx::$name as usize);
                }
                // SAFETY: the C library's function of this name has this type (the
                // prototypes of its headers, which the libc crate's follow).
                unsafe { core::mem::transmute::<*mut c_void, fnty!($k ($($a),*) -> $r)>(p) }
            }
        )*
    };
}

real! {
    read: fn(c_int, *mut c_void, size_t) -> ssize_t;
    readv: fn(c_int, *const iovec, c_int) -> ssize_t;
    write: fn(c_int, *const c_void, size_t) -> ssize_t;
    writev: fn(c_int, *const iovec, c_int) -> ssize_t;
    pread64: fn(c_int, *mut c_void, size_t, off_t) -> ssize_t;
    pwrite64: fn(c_int, *const c_void, size_t, off_t) -> ssize_t;
    preadv: fn(c_int, *const iovec, c_int, off_t) -> ssize_t;
    pwritev: fn(c_int, *const iovec, c_int, off_t) -> ssize_t;
    recv: fn(c_int, *mut c_void, size_t, c_int) -> ssize_t;
    recvfrom: fn(c_int, *mut c_void, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t;
    recvmsg: fn(c_int, *mut msghdr, c_int) -> ssize_t;
    send: fn(c_int, *const c_void, size_t, c_int) -> ssize_t;
    sendto: fn(c_int, *const c_void, size_t, c_int, *const sockaddr, socklen_t) -> ssize_t;
    sendmsg: fn(c_int, *const msghdr, c_int) -> ssize_t;
    accept: fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    accept4: fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int;
    connect: fn(c_int, *const sockaddr, socklen_t) -> c_int;
    poll: fn(*mut pollfd, nfds_t, c_int) -> c_int;
    ppoll: fn(*mut pollfd, nfds_t, *const timespec, *const sigset_t) -> c_int;
    select: fn(c_int, *mut fd_set, *mut fd_set, *mut fd_set, *mut timeval) -> c_int;
    pselect: fn(c_int, *mut fd_set, *mut fd_set, *mut fd_set, *const timespec, *const sigset_t) -> c_int;
    epoll_wait: fn(c_int, *mut epoll_event, c_int, c_int) -> c_int;
    epoll_pwait: fn(c_int, *mut epoll_event, c_int, c_int, *const sigset_t) -> c_int;
    epoll_create1: fn(c_int) -> c_int;
    epoll_create: fn(c_int) -> c_int;
    nanosleep: fn(*const timespec, *mut timespec) -> c_int;
    clock_nanosleep: fn(libc::clockid_t, c_int, *const timespec, *mut timespec) -> c_int;
    usleep: fn(c_uint) -> c_int;
    sleep: fn(c_uint) -> c_uint;
    fsync: fn(c_int) -> c_int;
    fdatasync: fn(c_int) -> c_int;
    open: vfn(*const c_char, c_int) -> c_int;
    open64: vfn(*const c_char, c_int) -> c_int;
    openat: vfn(c_int, *const c_char, c_int) -> c_int;
    openat64: vfn(c_int, *const c_char, c_int) -> c_int;
    creat: fn(*const c_char, libc::mode_t) -> c_int;
    creat64: fn(*const c_char, libc::mode_t) -> c_int;
    close: fn(c_int) -> c_int;
    getaddrinfo: fn(*const c_char, *const c_char, *const addrinfo, *mut *mut addrinfo) -> c_int;
    waitpid: fn(pid_t, *mut c_int, c_int) -> pid_t;
    wait: fn(*mut c_int) -> pid_t;
    waitid: fn(libc::idtype_t, libc::id_t, *mut libc::siginfo_t, c_int) -> c_int;
    fork: fn() -> pid_t;
    fcntl: vfn(c_int, c_int) -> c_int;
    fcntl64: vfn(c_int, c_int) -> c_int;
    ioctl: vfn(c_int, c_ulong) -> c_int;
    setsockopt: fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int;
    dup: fn(c_int) -> c_int;
    dup2: fn(c_int, c_int) -> c_int;
    dup3: fn(c_int, c_int, c_int) -> c_int;
    socket: fn(c_int, c_int, c_int) -> c_int;
    socketpair: fn(c_int, c_int, c_int, *mut c_int) -> c_int;
    pipe: fn(*mut c_int) -> c_int;
    pipe2: fn(*mut c_int, c_int) -> c_int;
    eventfd: fn(c_uint, c_int) -> c_int;
    fclose: fn(*mut FILE) -> c_int;
    pclose: fn(*mut FILE) -> c_int;
    close_range: fn(c_uint, c_uint, c_int) -> c_int;
    sigaction: fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
    signal: fn(c_int, libc::sighandler_t) -> libc::sighandler_t;
    // Not covered: overridden to be counted (`uncovered.rs`).
    fread: fn(*mut c_void, size_t, size_t, *mut FILE) -> size_t;
    fwrite: fn(*const c_void, size_t, size_t, *mut FILE) -> size_t;
    fgets: fn(*mut c_char, c_int, *mut FILE) -> *mut c_char;
    getline: fn(*mut *mut c_char, *mut size_t, *mut FILE) -> ssize_t;
    getdelim: fn(*mut *mut c_char, *mut size_t, c_int, *mut FILE) -> ssize_t;
    fflush: fn(*mut FILE) -> c_int;
    system: fn(*const c_char) -> c_int;
    popen: fn(*const c_char, *const c_char) -> *mut FILE;
    wait3: fn(*mut c_int, c_int, *mut libc::rusage) -> pid_t;
    wait4: fn(pid_t, *mut c_int, c_int, *mut libc::rusage) -> pid_t;
    sigwait: fn(*const sigset_t, *mut c_int) -> c_int;
    sigwaitinfo: fn(*const sigset_t, *mut libc::siginfo_t) -> c_int;
    sigtimedwait: fn(*const sigset_t, *mut libc::siginfo_t, *const timespec) -> c_int;
    sigsuspend: fn(*const sigset_t) -> c_int;
    pause: fn() -> c_int;
    flock: fn(c_int, c_int) -> c_int;
    lockf: fn(c_int, c_int, off_t) -> c_int;
    recvmmsg: fn(c_int, *mut libc::mmsghdr, c_uint, c_int, *mut timespec) -> c_int;
    sendmmsg: fn(c_int, *mut libc::mmsghdr, c_uint, c_int) -> c_int;
    sendfile: fn(c_int, c_int, *mut off_t, size_t) -> ssize_t;
    splice: fn(c_int, *mut libc::loff_t, c_int, *mut libc::loff_t, size_t, c_uint) -> ssize_t;
    copy_file_range: fn(c_int, *mut libc::off64_t, c_int, *mut libc::off64_t, size_t, c_uint) -> ssize_t;
    gethostbyname: fn(*const c_char) -> *mut libc::hostent;
    getnameinfo: fn(*const sockaddr, socklen_t, *mut c_char, socklen_t, *mut c_char, socklen_t, c_int) -> c_int;
    pthread_join: fn(libc::pthread_t, *mut *mut c_void) -> c_int;
    sem_wait: fn(*mut libc::sem_t) -> c_int;
    sem_timedwait: fn(*mut libc::sem_t, *const timespec) -> c_int;
    msgrcv: fn(c_int, *mut c_void, size_t, core::ffi::c_long, c_int) -> ssize_t;
    msgsnd: fn(c_int, *const c_void, size_t, c_int) -> c_int;
}
