//! The layer keeps each call's meaning: one test per rule, each on both I/O backends.
//!
//! Non-blocking descriptors still say EAGAIN; socket and poll timeouts hold (not
//! before, and eventually); errno is the C library's; a signal interrupts as the
//! kernel would (EINTR, or a restart with SA_RESTART); a close wakes a green thread
//! waiting on the descriptor (EBADF); dup/dup2/fcntl keep the layer's view right; a
//! fork in a green thread leaves a working child.
//!
//! The tests of this file run one at a time (the call counters they read are the
//! process's).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use weft_hook as _;
use weft_runtime::hook::stats;
use weft_runtime::spawn;

mod common;
use common::*;

/// One test at a time (module comment).
fn serial() -> MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|e| e.into_inner())
}

/// Green threads parked in call `name` now.
fn waiting(name: &str) -> u64 {
    stats::snapshot().get(name).map_or(0, |c| c.waiting)
}

/// A connected pair of stream sockets (blocking, close-on-exec).
fn socketpair() -> (i32, i32) {
    let mut s = [0; 2];
    // SAFETY: socketpair into a local array.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            s.as_mut_ptr(),
        )
    };
    assert_eq!(r, 0);
    (s[0], s[1])
}

fn read1(fd: i32) -> (isize, i32) {
    let mut b = [0u8; 16];
    // SAFETY: into a local buffer.
    let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
    (n, if n < 0 { errno() } else { 0 })
}

fn write_all(fd: i32, b: &[u8]) {
    // SAFETY: from a local buffer.
    assert_eq!(
        // SAFETY: writes from a live buffer of that length to a descriptor this test owns.
        unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) },
        b.len() as isize
    );
}

fn close(fd: i32) {
    // SAFETY: a descriptor the test owns.
    unsafe { libc::close(fd) };
}

/// Counts the turns a ticker green thread on the same worker gets while `f` runs: a
/// call that blocked the worker would leave it none.
fn with_ticker<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let ticks = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicUsize::new(0));
    let (t2, s2) = (ticks.clone(), stop.clone());
    let ticker = weft_runtime::spawn(move || {
        while s2.load(SeqCst) == 0 {
            t2.fetch_add(1, SeqCst);
            weft_runtime::sleep(Duration::from_millis(1));
        }
    });
    let out = f();
    stop.store(1, SeqCst);
    ticker.join().unwrap();
    (out, ticks.load(SeqCst))
}

#[test]
fn a_non_blocking_descriptor_still_says_eagain() {
    let _s = serial();
    for b in backends() {
        rt(b, 1).block_on(move || {
            // fcntl(F_SETFL, O_NONBLOCK)
            let (a, z) = socketpair();
            // SAFETY: plain fcntl calls.
            unsafe {
                let fl = libc::fcntl(a, libc::F_GETFL);
                libc::fcntl(a, libc::F_SETFL, fl | libc::O_NONBLOCK);
            }
            assert_eq!(read1(a), (-1, libc::EAGAIN), "{b:?}: fcntl");
            // Made blocking again: the read waits (and gets what is written later).
            // SAFETY: as above.
            unsafe {
                let fl = libc::fcntl(a, libc::F_GETFL);
                libc::fcntl(a, libc::F_SETFL, fl & !libc::O_NONBLOCK);
            }
            let r = spawn(move || read1(a));
            weft_runtime::sleep(Duration::from_millis(20));
            write_all(z, b"x");
            assert_eq!(r.join().unwrap(), (1, 0), "{b:?}: blocking again");
            // ioctl(FIONBIO), through std's set_nonblocking
            // SAFETY: `a` is a socket of this test, owned by the stream from here.
            let s = unsafe { std::os::unix::net::UnixStream::from_raw_fd(a) };
            s.set_nonblocking(true).unwrap();
            let e = (&s).read(&mut [0u8; 4]).unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{b:?}: FIONBIO");
            drop(s);
            close(z);
            // SOCK_NONBLOCK at creation; accept4's SOCK_NONBLOCK; a non-blocking pipe.
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.set_nonblocking(true).unwrap();
            let e = l.accept().unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{b:?}: listener");
            let mut p = [0; 2];
            // SAFETY: pipe2 into a local array.
            unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
            assert_eq!(read1(p[0]), (-1, libc::EAGAIN), "{b:?}: pipe");
            close(p[0]);
            close(p[1]);
        });
    }
}

#[test]
fn socket_timeouts_hold() {
    let _s = serial();
    for b in backends() {
        rt(b, 1).block_on(move || {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (s, _) = l.accept().unwrap();
            let t = Duration::from_millis(100);
            c.set_read_timeout(Some(t)).unwrap();
            let t0 = Instant::now();
            let (e, ticks) = with_ticker(|| (&c).read(&mut [0u8; 8]).unwrap_err());
            let took = t0.elapsed();
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{b:?}: {e}");
            assert!(
                took >= t,
                "{b:?}: the read timed out after {took:?}, before {t:?}"
            );
            assert!(ticks > 0, "{b:?}: the read blocked its worker");
            // A send timeout: fill both buffers, then a write waits and times out
            // (with what it wrote, or EAGAIN when nothing went).
            c.set_write_timeout(Some(t)).unwrap();
            let big = vec![7u8; 1 << 20];
            let t0 = Instant::now();
            let mut sent = 0;
            let err = loop {
                match (&c).write(&big) {
                    Ok(n) => sent += n,
                    Err(e) => break e,
                }
            };
            assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "{b:?}: {err}");
            assert!(
                sent > 0 && t0.elapsed() >= t,
                "{b:?}: {sent} bytes, {:?}",
                t0.elapsed()
            );
            drop(s);
        });
    }
}

#[test]
fn poll_select_and_epoll_timeouts_hold() {
    let _s = serial();
    for b in backends() {
        rt(b, 1).block_on(move || {
            let (r, w) = pipe();
            let t = Duration::from_millis(100);
            // poll
            let t0 = Instant::now();
            let mut p = libc::pollfd {
                fd: r,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd on the stack.
            let (n, ticks) = with_ticker(|| unsafe { libc::poll(&mut p, 1, 100) });
            assert_eq!(n, 0, "{b:?}");
            assert!(
                t0.elapsed() >= t && ticks > 0,
                "{b:?}: poll {:?}",
                t0.elapsed()
            );
            // select, which writes the time left (none) into its timeout
            let mut tv = libc::timeval {
                tv_sec: 0,
                tv_usec: 100_000,
            };
            // SAFETY: a zeroed fd_set is empty; FD_SET adds one descriptor.
            let mut set: libc::fd_set = unsafe { core::mem::zeroed() };
            // SAFETY: adds a descriptor below FD_SETSIZE to a local set.
            unsafe { libc::FD_SET(r, &mut set) };
            let t0 = Instant::now();
            // SAFETY: a set and a timeval on the stack.
            let n = unsafe {
                libc::select(
                    r + 1,
                    &mut set,
                    core::ptr::null_mut(),
                    core::ptr::null_mut(),
                    &mut tv,
                )
            };
            assert_eq!((n, tv.tv_sec, tv.tv_usec), (0, 0, 0), "{b:?}");
            assert!(t0.elapsed() >= t, "{b:?}: select {:?}", t0.elapsed());
            // epoll_wait
            // SAFETY: a new epoll instance; one event registered and one read.
            let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: 5,
            };
            // SAFETY: registers a descriptor this test owns with an epoll instance it owns,
            // the event a local.
            unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, r, &mut ev) };
            let t0 = Instant::now();
            // SAFETY: one event into a local, on an epoll instance this test owns.
            let n = unsafe { libc::epoll_wait(ep, &mut ev, 1, 100) };
            assert_eq!(n, 0, "{b:?}");
            assert!(t0.elapsed() >= t, "{b:?}: epoll_wait {:?}", t0.elapsed());
            // And each returns when the descriptor becomes ready before the timeout.
            let writer = spawn(move || {
                weft_runtime::sleep(Duration::from_millis(10));
                write_all(w, b"x");
            });
            // SAFETY: as above.
            let n = unsafe { libc::epoll_wait(ep, &mut ev, 1, 60_000) };
            let token = ev.u64;
            assert_eq!((n, token), (1, 5), "{b:?}");
            // SAFETY: as above.
            let n = unsafe { libc::poll(&mut p, 1, 60_000) };
            assert_eq!((n, p.revents), (1, libc::POLLIN), "{b:?}");
            writer.join().unwrap();
            close(ep);
            close(r);
            close(w);
        });
    }
}

#[test]
fn errno_is_the_c_librarys() {
    let _s = serial();
    for b in backends() {
        rt(b, 1).block_on(move || {
            // SAFETY: calls on descriptors that are not open or not sockets, and
            // arguments the kernel refuses; nothing is written to memory.
            unsafe {
                let mut buf = [0u8; 4];
                assert_eq!(read1(-1), (-1, libc::EBADF), "{b:?}");
                assert_eq!(libc::write(9999, buf.as_ptr().cast(), 4), -1);
                assert_eq!(errno(), libc::EBADF, "{b:?}");
                let (r, w) = pipe();
                assert_eq!(libc::recv(r, buf.as_mut_ptr().cast(), 4, 0), -1);
                assert_eq!(errno(), libc::ENOTSOCK, "{b:?}");
                assert_eq!(
                    libc::accept(r, core::ptr::null_mut(), core::ptr::null_mut()),
                    -1
                );
                assert_eq!(errno(), libc::ENOTSOCK, "{b:?}");
                close(r);
                // EPIPE (std ignores SIGPIPE)
                assert_eq!(libc::write(w, buf.as_ptr().cast(), 4), -1);
                assert_eq!(errno(), libc::EPIPE, "{b:?}");
                close(w);
                let bad = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 2_000_000_000,
                };
                assert_eq!(libc::nanosleep(&bad, core::ptr::null_mut()), -1);
                assert_eq!(errno(), libc::EINVAL, "{b:?}");
                assert_eq!(libc::open(c"/nonexistent/x".as_ptr(), libc::O_RDONLY), -1);
                assert_eq!(errno(), libc::ENOENT, "{b:?}");
                assert_eq!(libc::fsync(-5), -1);
                assert_eq!(errno(), libc::EBADF, "{b:?}");
            }
            // A refused connection, and a reset seen by a parked read.
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            drop(l);
            let e = TcpStream::connect(addr).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ECONNREFUSED), "{b:?}");
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (s, _) = l.accept().unwrap();
            let reader = spawn(move || (&c).read(&mut [0u8; 8]).map_err(|e| e.raw_os_error()));
            weft_runtime::sleep(Duration::from_millis(20));
            // SO_LINGER 0: the close resets the connection.
            let lg = libc::linger {
                l_onoff: 1,
                l_linger: 0,
            };
            // SAFETY: a linger struct on the stack.
            unsafe {
                libc::setsockopt(
                    s.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_LINGER,
                    (&lg as *const libc::linger).cast(),
                    core::mem::size_of::<libc::linger>() as u32,
                )
            };
            drop(s);
            assert_eq!(reader.join().unwrap(), Err(Some(libc::ECONNRESET)), "{b:?}");
        });
    }
}

static HANDLED: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_usr1(_: i32) {
    HANDLED.fetch_add(1, SeqCst);
}

/// Installs `on_usr1` for SIGUSR1, with SA_RESTART or not.
fn handle_usr1(restart: bool) {
    // SAFETY: a handler that only counts; sigemptyset fills the mask.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = on_usr1 as *const () as usize;
        sa.sa_flags = if restart { libc::SA_RESTART } else { 0 };
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(
            libc::sigaction(libc::SIGUSR1, &sa, core::ptr::null_mut()),
            0
        );
        // The program sees its own handler.
        let mut old: libc::sigaction = core::mem::zeroed();
        libc::sigaction(libc::SIGUSR1, core::ptr::null(), &mut old);
        assert_eq!(old.sa_sigaction, on_usr1 as *const () as usize);
    }
}

/// Sends SIGUSR1 to OS thread `tid` of this process once a green thread is parked in
/// `call`; returns the handler's count before.
fn signal_when_parked(call: &str, tid: &AtomicI32) -> usize {
    wait_until(&format!("a green thread parked in {call}"), || {
        waiting(call) > 0 && tid.load(SeqCst) != 0
    });
    let before = HANDLED.load(SeqCst);
    // SAFETY: a signal with a handler installed, to a thread of this process.
    unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            std::process::id(),
            tid.load(SeqCst),
            libc::SIGUSR1,
        )
    };
    before
}

#[test]
fn a_signal_interrupts_as_the_kernel_would() {
    let _s = serial();
    for b in backends() {
        let rt = rt(b, 1);
        // Without SA_RESTART: the parked read fails with EINTR, after the handler ran.
        handle_usr1(false);
        let (r, w) = pipe();
        let tid = Arc::new(AtomicI32::new(0));
        let t2 = tid.clone();
        let h = rt.spawn(move || {
            // SAFETY: gettid has no arguments.
            t2.store(unsafe { libc::gettid() }, SeqCst);
            let r = read1(r);
            (r, HANDLED.load(SeqCst))
        });
        let before = signal_when_parked("read", &tid);
        let ((n, e), handled) = h.join().unwrap();
        assert_eq!((n, e), (-1, libc::EINTR), "{b:?}");
        assert!(
            handled > before,
            "{b:?}: the handler ran before the read returned"
        );
        // With SA_RESTART: it goes on waiting, and gets what comes after the signal.
        handle_usr1(true);
        tid.store(0, SeqCst);
        let t2 = tid.clone();
        let h = rt.spawn(move || {
            // SAFETY: as above.
            t2.store(unsafe { libc::gettid() }, SeqCst);
            read1(r)
        });
        let before = signal_when_parked("read", &tid);
        wait_until("the handler", || HANDLED.load(SeqCst) > before);
        // Still parked in the read after the handler ran.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(waiting("read"), 1, "{b:?}: the read did not go on waiting");
        write_all(w, b"abc");
        assert_eq!(h.join().unwrap(), (3, 0), "{b:?}");
        // A sleep and a poll are interrupted whatever the flags (the kernel never
        // restarts them); nanosleep says how long was left.
        tid.store(0, SeqCst);
        let t2 = tid.clone();
        let h = rt.spawn(move || {
            // SAFETY: as above; a timespec on the stack.
            unsafe {
                t2.store(libc::gettid(), SeqCst);
                let req = libc::timespec {
                    tv_sec: 30,
                    tv_nsec: 0,
                };
                let mut rem = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                let n = libc::nanosleep(&req, &mut rem);
                (n, errno(), rem.tv_sec)
            }
        });
        signal_when_parked("nanosleep", &tid);
        let (n, e, left) = h.join().unwrap();
        assert_eq!((n, e), (-1, libc::EINTR), "{b:?}");
        assert!(left > 0 && left <= 30, "{b:?}: {left} s left");
        tid.store(0, SeqCst);
        let t2 = tid.clone();
        let h = rt.spawn(move || {
            // SAFETY: as above.
            t2.store(unsafe { libc::gettid() }, SeqCst);
            let mut p = libc::pollfd {
                fd: r,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd on the stack.
            let n = unsafe { libc::poll(&mut p, 1, -1) };
            (n, errno())
        });
        signal_when_parked("poll", &tid);
        assert_eq!(h.join().unwrap(), (-1, libc::EINTR), "{b:?}");
        close(r);
        close(w);
        // SAFETY: back to the default action.
        unsafe { libc::signal(libc::SIGUSR1, libc::SIG_DFL) };
    }
}

#[test]
fn a_close_wakes_the_green_thread_waiting_on_the_descriptor() {
    let _s = serial();
    for b in backends() {
        rt(b, 2).block_on(move || {
            // A read, a poll and an accept, each parked on worker 1, closed from here.
            let (a, z) = socketpair();
            let reader = weft_runtime::spawn_on(1, move || read1(a));
            wait_until("the read parked", || waiting("read") > 0);
            close(a);
            assert_eq!(reader.join().unwrap(), (-1, libc::EBADF), "{b:?}: read");
            close(z);

            // Many rounds: the woken poll must ask the kernel only once the close is
            // made (it is woken before), so it sees POLLNVAL, never "nothing ready".
            for round in 0..50 {
                let (r, w) = pipe();
                let poller = weft_runtime::spawn_on(1, move || {
                    let mut p = libc::pollfd {
                        fd: r,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one pollfd on the stack.
                    let n = unsafe { libc::poll(&mut p, 1, -1) };
                    (n, p.revents)
                });
                wait_until("the poll parked", || waiting("poll") > 0);
                close(r);
                let got = poller.join().unwrap();
                assert_eq!(got, (1, libc::POLLNVAL), "{b:?}: poll, round {round}");
                close(w);
            }

            let l = TcpListener::bind("127.0.0.1:0").unwrap().into_raw_fd();
            let acceptor = weft_runtime::spawn_on(1, move || {
                // SAFETY: no address asked for.
                let n = unsafe { libc::accept(l, core::ptr::null_mut(), core::ptr::null_mut()) };
                (n, errno())
            });
            wait_until("the accept parked", || waiting("accept") > 0);
            close(l);
            assert_eq!(acceptor.join().unwrap(), (-1, libc::EBADF), "{b:?}: accept");
        });
    }
}

#[test]
fn dup_dup2_and_fcntl_keep_the_view_right() {
    let _s = serial();
    for b in backends() {
        rt(b, 2).block_on(move || {
            // O_NONBLOCK set through a duplicate (one open file): the original says
            // EAGAIN too, once the layer has learned it was blocking.
            let (a, z) = socketpair();
            let r = spawn(move || read1(a));
            weft_runtime::sleep(Duration::from_millis(10));
            write_all(z, b"1");
            assert_eq!(r.join().unwrap(), (1, 0));
            // SAFETY: plain descriptor calls.
            let d = unsafe { libc::dup(a) };
            // SAFETY: sets a flag on a descriptor this test owns.
            unsafe { libc::fcntl(d, libc::F_SETFL, libc::O_NONBLOCK) };
            assert_eq!(read1(a), (-1, libc::EAGAIN), "{b:?}: through dup");
            // SAFETY: as above.
            unsafe { libc::fcntl(d, libc::F_SETFL, 0) };
            // F_DUPFD: the copy waits as a blocking socket does.
            // SAFETY: as above.
            let d2 = unsafe { libc::fcntl(a, libc::F_DUPFD_CLOEXEC, 100) };
            assert!(d2 >= 100);
            let r = spawn(move || read1(d2));
            weft_runtime::sleep(Duration::from_millis(10));
            write_all(z, b"22");
            assert_eq!(r.join().unwrap(), (2, 0), "{b:?}: F_DUPFD");
            // dup2 onto a descriptor a green thread waits on: it is closed (EBADF),
            // and the number now names the new file (a non-blocking pipe: EAGAIN).
            let waiter = weft_runtime::spawn_on(1, move || read1(d));
            wait_until("the read parked", || waiting("read") > 0);
            let mut p = [0; 2];
            // SAFETY: pipe2 into a local array; dup2 of its read end onto `d`.
            unsafe {
                libc::pipe2(p.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC);
                assert_eq!(libc::dup2(p[0], d), d);
            }
            assert_eq!(waiter.join().unwrap(), (-1, libc::EBADF), "{b:?}: dup2");
            assert_eq!(read1(d), (-1, libc::EAGAIN), "{b:?}: the new meaning");
            for fd in [a, z, d, d2, p[0], p[1]] {
                close(fd);
            }
        });
    }
}

#[test]
fn a_fork_in_a_green_thread_leaves_a_working_child() {
    let _s = serial();
    for b in backends() {
        let out = rt(b, 2).block_on(move || {
            let (r, w) = pipe();
            let (r2, w2) = pipe();
            // SAFETY: the child only makes plain calls and leaves with _exit.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // The child: no runtime here; every call is a plain one.
                let mut b = [0u8; 5];
                let mut got = 0;
                while got < 5 {
                    // SAFETY: into a local buffer.
                    let n = unsafe { libc::read(r, b[got..].as_mut_ptr().cast(), 5 - got) };
                    if n <= 0 {
                        // SAFETY: ends the child.
                        unsafe { libc::_exit(2) };
                    }
                    got += n as usize;
                }
                std::thread::sleep(Duration::from_millis(5));
                b.reverse();
                // SAFETY: from a local buffer; ends the child.
                unsafe {
                    libc::write(w2, b.as_ptr().cast(), 5);
                    libc::_exit(7);
                }
            }
            assert!(pid > 0);
            write_all(w, b"hello");
            // SAFETY: the read end of a pipe of this test, owned by the file from here.
            let mut f = unsafe { std::fs::File::from_raw_fd(r2) };
            let mut back = [0u8; 5];
            f.read_exact(&mut back).unwrap();
            let mut status = 0;
            // SAFETY: the child's pid; status into a local.
            let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
            // std::process on a green thread: spawn, pipes read with poll, waitpid.
            let echo = std::process::Command::new("sh")
                .args(["-c", "echo child"])
                .output()
                .unwrap();
            close(r);
            close(w);
            close(w2);
            drop(f);
            (waited == pid, status, back, echo)
        });
        assert!(out.0, "{b:?}");
        assert!(
            libc::WIFEXITED(out.1) && libc::WEXITSTATUS(out.1) == 7,
            "{b:?}: {:#x}",
            out.1
        );
        assert_eq!(&out.2, b"olleh", "{b:?}");
        assert!(out.3.status.success(), "{b:?}");
        assert_eq!(out.3.stdout, b"child\n", "{b:?}");
    }
}

#[test]
fn calls_off_green_threads_are_the_c_librarys() {
    let _s = serial();
    let before = stats::snapshot().get("read").unwrap().calls;
    // Before any runtime of this test, on the test's own thread.
    let (r, w) = pipe();
    write_all(w, b"ab");
    assert_eq!(read1(r), (2, 0));
    // SAFETY: a zero-length sleep.
    assert_eq!(unsafe { libc::usleep(0) }, 0);
    assert_eq!(
        stats::snapshot().get("read").unwrap().calls,
        before,
        "a call off green threads was counted"
    );
    close(r);
    close(w);
}

/// A signal mask other than the thread's own, given to `ppoll`, `pselect` and
/// `epoll_pwait`: the thread's mask with SIGUSR2 blocked too.
fn another_mask() -> libc::sigset_t {
    // SAFETY: reads the thread's mask into a local and adds one signal to it.
    unsafe {
        let mut m: libc::sigset_t = core::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_SETMASK, core::ptr::null(), &mut m);
        let add = if libc::sigismember(&m, libc::SIGUSR2) == 1 {
            libc::SIGUSR1
        } else {
            libc::SIGUSR2
        };
        libc::sigaddset(&mut m, add);
        m
    }
}

#[test]
fn calls_given_a_signal_mask_park_only_their_green_thread() {
    let _s = serial();
    for b in backends() {
        rt(b, 1).block_on(move || {
            let mask = another_mask();
            let before = stats::snapshot();
            let calls = |s: &stats::Stats, n: &str| s.get(n).map_or(0, |c| c.calls);
            // On one worker, the writer runs only if the call parks its green thread
            // alone; a call that blocked the worker would return 0 after its 60 s.
            let wake_later = |w: i32| {
                spawn(move || {
                    weft_runtime::yield_now();
                    write_all(w, b"x")
                })
            };
            // ppoll
            let (r, w) = pipe();
            let mut p = libc::pollfd {
                fd: r,
                events: libc::POLLIN,
                revents: 0,
            };
            let t = libc::timespec {
                tv_sec: 60,
                tv_nsec: 0,
            };
            let writer = wake_later(w);
            // SAFETY: one pollfd, a timespec and a mask on the stack.
            let n = unsafe { libc::ppoll(&mut p, 1, &t, &mask) };
            assert_eq!((n, p.revents), (1, libc::POLLIN), "{b:?}: ppoll");
            writer.join().unwrap();
            close(r);
            close(w);
            // pselect, and its set says which descriptor is ready
            let (r, w) = pipe();
            // SAFETY: a zeroed fd_set is empty; FD_SET adds one descriptor.
            let mut set: libc::fd_set = unsafe { core::mem::zeroed() };
            // SAFETY: adds a descriptor below FD_SETSIZE to a local set.
            unsafe { libc::FD_SET(r, &mut set) };
            let writer = wake_later(w);
            // SAFETY: a set, a timespec and a mask on the stack.
            let n = unsafe {
                libc::pselect(
                    r + 1,
                    &mut set,
                    core::ptr::null_mut(),
                    core::ptr::null_mut(),
                    &t,
                    &mask,
                )
            };
            // SAFETY: reads the set the call filled in.
            assert_eq!((n, unsafe { libc::FD_ISSET(r, &set) }), (1, true), "{b:?}");
            writer.join().unwrap();
            // epoll_pwait, and the event's token comes back
            // SAFETY: a new epoll instance with one descriptor registered.
            let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            let (r2, w2) = pipe();
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: 7,
            };
            // SAFETY: registers a descriptor this test owns with an epoll instance it owns,
            // the event a local.
            unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, r2, &mut ev) };
            let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
            let writer = wake_later(w2);
            // SAFETY: an event buffer of 4 and a mask on the stack.
            let n = unsafe { libc::epoll_pwait(ep, out.as_mut_ptr(), 4, 60_000, &mask) };
            let token = out[0].u64;
            assert_eq!((n, token), (1, 7), "{b:?}: epoll_pwait");
            writer.join().unwrap();
            // Timeouts hold: not before.
            let t0 = Instant::now();
            let short = libc::timespec {
                tv_sec: 0,
                tv_nsec: 50_000_000,
            };
            let mut p = libc::pollfd {
                fd: r2,
                events: libc::POLLOUT | libc::POLLPRI,
                revents: 0,
            };
            // SAFETY: as above (a read end is never writable: nothing is ready).
            let n = unsafe { libc::ppoll(&mut p, 1, &short, &mask) };
            assert_eq!(n, 0, "{b:?}");
            assert!(t0.elapsed() >= Duration::from_millis(50), "{b:?}");
            // Each was counted as a covered call.
            let after = stats::snapshot();
            for name in ["ppoll(sigmask)", "pselect(sigmask)", "epoll_pwait(sigmask)"] {
                assert!(
                    calls(&after, name) > calls(&before, name),
                    "{b:?}: {name} counted"
                );
                assert!(stats::CALLS.contains(&(name, true)), "{name} is covered");
            }
            for fd in [ep, r, w, r2, w2] {
                close(fd);
            }
        });
    }
}
