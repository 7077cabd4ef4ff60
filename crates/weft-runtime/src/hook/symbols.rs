//! The C symbols of the layer, and the blocking calls it does not cover.
//!
//! [`weft_hook_symbols!`](crate::weft_hook_symbols) expands, in the crate that
//! invokes it, into one `#[no_mangle] extern "C"` function per C library function the
//! layer overrides, each calling its namesake in this module's parent. The crate
//! `weft-hook` invokes it once; nothing else should (two definitions of `read` in one
//! program do not link). The symbols are not defined in this crate itself, so that
//! enabling the `hook` feature (for `weft ps`, say) never overrides anything in a
//! program that did not ask for it.
//!
//! The uncovered calls (below) are overridden only to be counted (`stats.rs`): on a
//! green thread each still blocks the worker. Variadic C functions (`open`, `fcntl`,
//! `ioctl`) are defined with their one optional argument as a fixed one: on x86_64 and
//! aarch64 Linux a variadic argument of integer or pointer type travels as a fixed one
//! does, and the argument is passed on as it came.

/// The uncovered calls, for `callback!` (a macro of this crate): the wrappers below
/// and the symbols of [`weft_hook_symbols!`](crate::weft_hook_symbols) are made from
/// this one list.
#[doc(hidden)]
#[macro_export]
macro_rules! __weft_hook_uncovered {
    ($callback:ident) => {
        $crate::$callback! {
            fread(p: *mut c_void, size: size_t, n: size_t, f: *mut FILE) -> size_t;
            fwrite(p: *const c_void, size: size_t, n: size_t, f: *mut FILE) -> size_t;
            fgets(s: *mut c_char, n: c_int, f: *mut FILE) -> *mut c_char;
            getline(line: *mut *mut c_char, n: *mut size_t, f: *mut FILE) -> ssize_t;
            getdelim(line: *mut *mut c_char, n: *mut size_t, delim: c_int, f: *mut FILE) -> ssize_t;
            fflush(f: *mut FILE) -> c_int;
            system(cmd: *const c_char) -> c_int;
            popen(cmd: *const c_char, mode: *const c_char) -> *mut FILE;
            wait3(status: *mut c_int, options: c_int, usage: *mut rusage) -> pid_t;
            wait4(pid: pid_t, status: *mut c_int, options: c_int, usage: *mut rusage) -> pid_t;
            waitid(idtype: idtype_t, id: id_t, info: *mut siginfo_t, options: c_int) -> c_int;
            sigwait(set: *const sigset_t, sig: *mut c_int) -> c_int;
            sigwaitinfo(set: *const sigset_t, info: *mut siginfo_t) -> c_int;
            sigtimedwait(set: *const sigset_t, info: *mut siginfo_t, t: *const timespec) -> c_int;
            sigsuspend(set: *const sigset_t) -> c_int;
            pause() -> c_int;
            flock(fd: c_int, op: c_int) -> c_int;
            lockf(fd: c_int, cmd: c_int, len: off_t) -> c_int;
            recvmmsg(fd: c_int, v: *mut mmsghdr, n: c_uint, flags: c_int, t: *mut timespec) -> c_int;
            sendmmsg(fd: c_int, v: *mut mmsghdr, n: c_uint, flags: c_int) -> c_int;
            sendfile(out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t;
            splice(fin: c_int, oin: *mut loff_t, fout: c_int, oout: *mut loff_t, n: size_t, flags: c_uint) -> ssize_t;
            copy_file_range(fin: c_int, oin: *mut off64_t, fout: c_int, oout: *mut off64_t, n: size_t, flags: c_uint) -> ssize_t;
            preadv(fd: c_int, iov: *const iovec, n: c_int, off: off_t) -> ssize_t;
            pwritev(fd: c_int, iov: *const iovec, n: c_int, off: off_t) -> ssize_t;
            gethostbyname(name: *const c_char) -> *mut hostent;
            getnameinfo(sa: *const sockaddr, salen: socklen_t, host: *mut c_char, hostlen: socklen_t, serv: *mut c_char, servlen: socklen_t, flags: c_int) -> c_int;
            pthread_join(t: pthread_t, ret: *mut *mut c_void) -> c_int;
            sem_wait(s: *mut sem_t) -> c_int;
            sem_timedwait(s: *mut sem_t, t: *const timespec) -> c_int;
            msgrcv(id: c_int, p: *mut c_void, n: size_t, ty: c_long, flags: c_int) -> ssize_t;
            msgsnd(id: c_int, p: *const c_void, n: size_t, flags: c_int) -> c_int;
        }
    };
}

/// Defines the counting wrappers of the uncovered calls (`__weft_hook_uncovered`).
#[doc(hidden)]
#[macro_export]
macro_rules! __weft_hook_count_wrappers {
    ($($name:ident($($a:ident: $t:ty),*) -> $r:ty;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: not covered (it blocks the worker on a green thread); counted.")]
        ///
        /// # Safety
        /// As the C library's function.
        #[inline]
        pub unsafe fn $name($($a: $t),*) -> $r {
            if green() {
                stats::uncovered(Call::$name);
            }
            // SAFETY: passed on.
            unsafe { real::$name()($($a),*) }
        }
    )*};
}

mod wrappers {
    use super::ffi::*;
    use crate::hook::stats::{self, Call};
    use crate::hook::{green, real};
    crate::__weft_hook_uncovered!(__weft_hook_count_wrappers);
}
pub use wrappers::*;

/// The types the symbols' prototypes use, for the crate that expands
/// [`weft_hook_symbols!`](crate::weft_hook_symbols).
pub mod ffi {
    pub use core::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_void};
    pub use libc::clockid_t;
    pub use libc::{
        addrinfo, epoll_event, fd_set, hostent, id_t, idtype_t, iovec, loff_t, mmsghdr, mode_t,
        msghdr, nfds_t, off64_t, off_t, pid_t, pollfd, pthread_t, rusage, sem_t, sighandler_t,
        siginfo_t, sigset_t, size_t, sockaddr, socklen_t, ssize_t, timespec, timeval, FILE,
    };
    /// `struct sigaction`.
    #[allow(non_camel_case_types)]
    pub type sigaction_t = libc::sigaction;
}

/// Defines the layer's C symbols in the invoking crate (see the module comment):
/// `read`, `write`, `accept`, `poll`, `nanosleep`, ... each calling
/// `weft_runtime::hook::<name>`. Invoked once, by the crate `weft-hook`.
#[macro_export]
macro_rules! weft_hook_symbols {
    () => {
        /// The layer's C symbols (`weft_runtime::weft_hook_symbols!`).
        #[allow(clippy::missing_safety_doc)]
        pub mod symbols {
            #[allow(unused_imports)]
            use $crate::hook::ffi::*;
            $crate::__weft_hook_uncovered!(__weft_hook_define);
            $crate::__weft_hook_define! {
            read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t;
            readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t;
            pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t;
            pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t;
            write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t;
            writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t;
            pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t;
            pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t;
            recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t;
            recvfrom(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t;
            recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t;
            send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t;
            sendto(fd: c_int, buf: *const c_void, n: size_t, flags: c_int, addr: *const sockaddr, len: socklen_t) -> ssize_t;
            sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t;
            accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
            accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int;
            connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
            poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int;
            ppoll(fds: *mut pollfd, n: nfds_t, t: *const timespec, mask: *const sigset_t) -> c_int;
            select(n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, t: *mut timeval) -> c_int;
            pselect(n: c_int, r: *mut fd_set, w: *mut fd_set, e: *mut fd_set, t: *const timespec, mask: *const sigset_t) -> c_int;
            epoll_wait(ep: c_int, ev: *mut epoll_event, max: c_int, timeout: c_int) -> c_int;
            epoll_pwait(ep: c_int, ev: *mut epoll_event, max: c_int, timeout: c_int, mask: *const sigset_t) -> c_int;
            nanosleep(req: *const timespec, rem: *mut timespec) -> c_int;
            clock_nanosleep(clock: clockid_t, flags: c_int, req: *const timespec, rem: *mut timespec) -> c_int;
            usleep(us: c_uint) -> c_int;
            sleep(secs: c_uint) -> c_uint;
            fsync(fd: c_int) -> c_int;
            fdatasync(fd: c_int) -> c_int;
            open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
            open64(path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
            openat(dir: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
            openat64(dir: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int;
            creat(path: *const c_char, mode: mode_t) -> c_int;
            creat64(path: *const c_char, mode: mode_t) -> c_int;
            close(fd: c_int) -> c_int;
            getaddrinfo(node: *const c_char, service: *const c_char, hints: *const addrinfo, res: *mut *mut addrinfo) -> c_int;
            waitpid(pid: pid_t, status: *mut c_int, options: c_int) -> pid_t;
            wait(status: *mut c_int) -> pid_t;
            fork() -> pid_t;
            fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int;
            fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int;
            ioctl(fd: c_int, req: c_ulong, arg: usize) -> c_int;
            setsockopt(fd: c_int, level: c_int, opt: c_int, val: *const c_void, len: socklen_t) -> c_int;
            socket(domain: c_int, ty: c_int, proto: c_int) -> c_int;
            socketpair(domain: c_int, ty: c_int, proto: c_int, sv: *mut c_int) -> c_int;
            pipe(fds: *mut c_int) -> c_int;
            pipe2(fds: *mut c_int, flags: c_int) -> c_int;
            eventfd(init: c_uint, flags: c_int) -> c_int;
            epoll_create(size: c_int) -> c_int;
            epoll_create1(flags: c_int) -> c_int;
            dup(old: c_int) -> c_int;
            dup2(old: c_int, new: c_int) -> c_int;
            dup3(old: c_int, new: c_int, flags: c_int) -> c_int;
            fclose(f: *mut FILE) -> c_int;
            pclose(f: *mut FILE) -> c_int;
            close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int;
            sigaction(sig: c_int, act: *const sigaction_t, old: *mut sigaction_t) -> c_int;
            signal(sig: c_int, handler: sighandler_t) -> sighandler_t;
            }
        }
    };
}

/// The expansion of [`weft_hook_symbols!`](crate::weft_hook_symbols).
#[doc(hidden)]
#[macro_export]
macro_rules! __weft_hook_define {
    ($($name:ident($($a:ident: $t:ty),*) -> $r:ty;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: see `weft_runtime::hook::", stringify!($name), "`.")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $r {
            // SAFETY: the caller's arguments, under the C function's contract.
            unsafe { $crate::hook::$name($($a),*) }
        }
    )*};
}
