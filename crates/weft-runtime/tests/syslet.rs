//! Syslets (`weft_runtime::syslet`): every flag and condition, branches, loops, results
//! feeding arguments, errors inside a chain, bad pointers, cancellation, many in
//! flight, ring overflow, validation, and use from green threads.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use weft_runtime::syslet::*;

mod common;

const ENOENT: i64 = -(libc::ENOENT as i64);

fn pipe() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into a local array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    (fds[0], fds[1])
}

fn write_all(fd: i32, data: &[u8]) {
    assert_eq!(
        // SAFETY: writes from a live buffer of that length to a descriptor this test owns.
        unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) },
        data.len() as isize
    );
}

/// open(path) -> read(fd, 4096) -> close(fd): the seed's async-test unit of work.
fn open_read_close(path: &str, open_flags: u64) -> (Program, Var, Var, Var) {
    let mut b = Builder::new();
    let (at, p, fl, mode) = (
        b.value(libc::AT_FDCWD as i64),
        b.cstr(path),
        b.value(libc::O_RDONLY as i64),
        b.value(0),
    );
    let fd = b.var();
    let open = b.atom(libc::SYS_openat, &[at, p, fl, mode]);
    b.ret(open, fd).flags(open, open_flags);
    let (buf, len, n) = (b.buffer(4096), b.value(4096), b.var());
    let read = b.atom(libc::SYS_read, &[fd, buf, len]);
    b.ret(read, n)
        .flags(read, SYSLET_STOP_ON_NEGATIVE | SYSLET_SKIP_TO_NEXT_ON_STOP);
    b.atom(libc::SYS_close, &[fd]);
    (b.build().unwrap(), fd, buf, n)
}

fn finish(ctx: &Context, o: Outcome) -> Done {
    match o {
        Outcome::Done(d) => d,
        Outcome::Async(h) => ctx.wait_for(h).expect("its completion"),
    }
}

#[test]
fn open_read_close_feeds_the_descriptor_along_and_runs_inline_when_cached() {
    let dir = tempdir();
    let path = dir.join("f");
    std::fs::write(&path, b"hello syslets").unwrap();
    let _ = std::fs::read(&path); // cached
    let ctx = Context::new(16);
    let (prog, fd, buf, n) = open_read_close(path.to_str().unwrap(), SYSLET_STOP_ON_NEGATIVE);
    let d = match ctx.exec(prog) {
        Outcome::Done(d) => d,
        Outcome::Async(_) => panic!("a cached open/read/close should finish inline"),
    };
    assert_eq!((d.atom, d.ret), (2, 0), "ends at close, which returned 0");
    assert!(d.program.get(fd) >= 0);
    assert_eq!(d.program.get(n), 13);
    assert_eq!(&d.program.buffer(buf)[..13], b"hello syslets");
    assert_eq!(ctx.ready(), 0, "an inline syslet posts nothing to the ring");
}

#[test]
fn a_failing_open_stops_the_chain_and_says_which_atom_and_why() {
    let ctx = Context::new(16);
    let (prog, _, _, n) = open_read_close("/nonexistent/weft", SYSLET_STOP_ON_NEGATIVE);
    let d = finish(&ctx, ctx.exec(prog));
    assert_eq!((d.atom, d.ret), (0, ENOENT));
    assert_eq!(d.program.get(n), 0, "read never ran");
}

#[test]
fn skip_to_next_on_stop_is_an_else_branch() {
    // atom 0: open (missing) STOP_ON_NEGATIVE | SKIP  -> on failure: atom 1 (else)
    //                                                  -> on success: next = atom 2
    // atom 1: umem_add(errors, 1), then end
    // atom 2: umem_add(oks, 1), then end
    for (path, want_err) in [("/nonexistent/weft", 1), ("/proc/self/stat", 0)] {
        let mut b = Builder::new();
        let (at, p, fl, mode) = (
            b.value(libc::AT_FDCWD as i64),
            b.cstr(path),
            b.value(0),
            b.value(0),
        );
        let (errors, oks, one) = (b.value(0), b.value(0), b.value(1));
        let open = b.atom(libc::SYS_openat, &[at, p, fl, mode]);
        let on_err = b.umem_add(errors, one);
        let on_ok = b.umem_add(oks, one);
        b.flags(open, SYSLET_STOP_ON_NEGATIVE | SYSLET_SKIP_TO_NEXT_ON_STOP);
        b.next(open, Some(on_ok))
            .next(on_err, None)
            .next(on_ok, None);
        let ctx = Context::new(4);
        let d = finish(&ctx, ctx.exec(b.build().unwrap()));
        assert_eq!(d.program.get(errors), want_err, "{path}");
        assert_eq!(d.program.get(oks), 1 - want_err, "{path}");
        assert_eq!(d.atom, if want_err == 1 { 1 } else { 2 });
        assert_eq!(d.ret, 1);
    }
}

#[test]
fn stop_conditions_each_stop_where_they_should() {
    for (flag, value, stops) in [
        (SYSLET_STOP_ON_ZERO, 0, true),
        (SYSLET_STOP_ON_ZERO, 5, false),
        (SYSLET_STOP_ON_NONZERO, 5, true),
        (SYSLET_STOP_ON_NONZERO, 0, false),
        (SYSLET_STOP_ON_NEGATIVE, -1, true),
        (SYSLET_STOP_ON_NEGATIVE, 0, false),
        (SYSLET_STOP_ON_NON_POSITIVE, 0, true),
        (SYSLET_STOP_ON_NON_POSITIVE, 1, false),
    ] {
        let mut b = Builder::new();
        let (x, v, zero, after) = (b.value(0), b.value(value), b.value(0), b.value(0));
        let one = b.value(1);
        let first = b.umem_add(x, v); // returns `value`
        b.flags(first, flag);
        b.umem_add(after, one);
        let _ = zero;
        let ctx = Context::new(4);
        let d = finish(&ctx, ctx.exec(b.build().unwrap()));
        assert_eq!(d.atom == 0, stops, "flag {flag:#x} value {value}");
        assert_eq!(d.program.get(after), if stops { 0 } else { 1 });
    }
}

#[test]
fn a_loop_counts_down_with_umem_add() {
    let mut b = Builder::new();
    let (counter, minus_one, laps, one) = (b.value(1000), b.value(-1), b.value(0), b.value(1));
    let lap = b.umem_add(laps, one);
    let step = b.umem_add(counter, minus_one);
    b.flags(step, SYSLET_STOP_ON_NON_POSITIVE);
    b.next(step, Some(lap));
    let ctx = Context::new(4);
    let d = finish(&ctx, ctx.exec(b.build().unwrap()));
    assert_eq!((d.atom, d.ret), (1, 0));
    assert_eq!(d.program.get(counter), 0);
    assert_eq!(d.program.get(laps), 1000);
}

#[test]
fn a_read_that_would_block_goes_async_and_completes_in_the_ring() {
    let (r, w) = pipe();
    let mut b = Builder::new();
    let (fd, buf, len, n) = (b.value(r as i64), b.buffer(64), b.value(64), b.var());
    let read = b.atom(libc::SYS_read, &[fd, buf, len]);
    b.ret(read, n);
    let ctx = Context::new(4);
    let h = match ctx.exec(b.build().unwrap()) {
        Outcome::Async(h) => h,
        Outcome::Done(_) => panic!("an empty pipe's read must not finish inline"),
    };
    assert_eq!(ctx.in_flight(), 1);
    assert_eq!(
        ctx.wait(1, Some(Duration::from_millis(20))),
        0,
        "nothing yet"
    );
    write_all(w, b"ping");
    assert_eq!(ctx.wait(1, Some(Duration::from_secs(60))), 1);
    let d = ctx.take().unwrap().ok().unwrap();
    assert_eq!((d.id, d.ret), (h.0, 4));
    assert_eq!(&d.program.buffer(buf)[..4], b"ping");
    assert_eq!(ctx.in_flight(), 0);
    // SAFETY: closes descriptors this test opened and uses no more.
    unsafe {
        libc::close(r);
        libc::close(w);
    }
}

#[test]
fn syslet_async_forces_a_cachemiss_thread_and_sync_stays_inline() {
    let ctx = Context::new(4);
    let mut b = Builder::new();
    let (x, one) = (b.value(0), b.value(1));
    let a = b.umem_add(x, one);
    b.flags(a, SYSLET_ASYNC);
    match ctx.exec(b.build().unwrap()) {
        Outcome::Async(h) => assert_eq!(ctx.wait_for(h).unwrap().ret, 1),
        Outcome::Done(_) => panic!("SYSLET_ASYNC must go to a cachemiss thread"),
    }
    // SYNC on a read that blocks: exec waits, inline, and the ring stays empty.
    let (r, w) = pipe();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        write_all(w, b"x");
        w
    });
    let mut b = Builder::new();
    let (fd, buf, len) = (b.value(r as i64), b.buffer(8), b.value(8));
    let a = b.atom(libc::SYS_read, &[fd, buf, len]);
    b.flags(a, SYSLET_SYNC);
    match ctx.exec(b.build().unwrap()) {
        Outcome::Done(d) => assert_eq!(d.ret, 1),
        Outcome::Async(_) => panic!("SYSLET_SYNC never goes asynchronous"),
    }
    let w = writer.join().unwrap();
    // SAFETY: closes descriptors this test opened and uses no more.
    unsafe {
        libc::close(r);
        libc::close(w);
    }
}

#[test]
fn no_complete_posts_nothing() {
    let (r, w) = pipe();
    let ctx = Context::new(4);
    let mut b = Builder::new();
    let (fd, buf, len) = (b.value(r as i64), b.buffer(8), b.value(8));
    let a = b.atom(libc::SYS_read, &[fd, buf, len]);
    b.flags(a, SYSLET_NO_COMPLETE);
    assert!(matches!(ctx.exec(b.build().unwrap()), Outcome::Async(_)));
    write_all(w, b"x");
    let t = Instant::now();
    while ctx.in_flight() > 0 && t.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(ctx.in_flight(), 0);
    assert_eq!(ctx.ready(), 0, "NO_COMPLETE: no completion");
    // SAFETY: closes descriptors this test opened and uses no more.
    unsafe {
        libc::close(r);
        libc::close(w);
    }
}

#[test]
fn cancel_stops_a_blocked_syslet() {
    let (r, w) = pipe();
    let ctx = Context::new(4);
    let mut b = Builder::new();
    let (fd, buf, len) = (b.value(r as i64), b.buffer(8), b.value(8));
    b.atom(libc::SYS_read, &[fd, buf, len]);
    let Outcome::Async(h) = ctx.exec(b.build().unwrap()) else {
        panic!("async")
    };
    std::thread::sleep(Duration::from_millis(20)); // blocked in read on its thread
    assert!(ctx.cancel(h));
    let d = ctx.wait_for(h).unwrap();
    assert!(
        d.ret == -(libc::ECANCELED as i64) || d.ret == -(libc::EINTR as i64),
        "{}",
        d.ret
    );
    assert!(!ctx.cancel(h), "no longer in flight");
    // SAFETY: closes descriptors this test opened and uses no more.
    unsafe {
        libc::close(r);
        libc::close(w);
    }
}

#[test]
fn bad_pointers_give_efault_never_a_crash() {
    let ctx = Context::new(4);
    let bad = 0x10 as *const u64;
    let mut val: u64 = 0;
    // A bad argument pointer.
    let mut a = SysletUatom {
        nr: libc::SYS_getpid as u64,
        ..Default::default()
    };
    a.arg_ptr[0] = bad;
    // SAFETY: exec_raw reads the atom through the pointers it holds and must check each
    // itself: the deliberately bad ones here must give EFAULT, and the others point at live
    // locals.
    let r = unsafe { ctx.exec_raw(&mut a) };
    assert_eq!(
        r,
        RawOutcome::Done(&mut a as *mut _, -(libc::EFAULT as i64))
    );
    // A bad result pointer.
    let mut a = SysletUatom {
        nr: libc::SYS_getpid as u64,
        ret_ptr: 0x18 as *mut i64,
        ..Default::default()
    };
    // SAFETY: exec_raw reads the atom through the pointers it holds and must check each
    // itself: the deliberately bad ones here must give EFAULT, and the others point at live
    // locals.
    let r = unsafe { ctx.exec_raw(&mut a) };
    assert_eq!(
        r,
        RawOutcome::Done(&mut a as *mut _, -(libc::EFAULT as i64))
    );
    // A bad next pointer: the completion names it.
    let mut a = SysletUatom {
        nr: libc::SYS_getpid as u64,
        next: 0x20 as *mut SysletUatom,
        ..Default::default()
    };
    // SAFETY: exec_raw reads the atom through the pointers it holds and must check each
    // itself: the deliberately bad ones here must give EFAULT, and the others point at live
    // locals.
    let r = unsafe { ctx.exec_raw(&mut a) };
    assert_eq!(r, RawOutcome::Done(0x20 as *mut _, -(libc::EFAULT as i64)));
    // umem_add on a bad counter pointer.
    let p: u64 = 0x28;
    let one: u64 = 1;
    let mut a = SysletUatom {
        nr: SYS_UMEM_ADD,
        ..Default::default()
    };
    a.arg_ptr[0] = &p;
    a.arg_ptr[1] = &one;
    // SAFETY: exec_raw reads the atom through the pointers it holds and must check each
    // itself: the deliberately bad ones here must give EFAULT, and the others point at live
    // locals.
    let r = unsafe { ctx.exec_raw(&mut a) };
    assert_eq!(
        r,
        RawOutcome::Done(&mut a as *mut _, -(libc::EFAULT as i64))
    );
    // An unknown system call number.
    let mut a = SysletUatom {
        nr: 99_999,
        ..Default::default()
    };
    a.arg_ptr[0] = &val;
    // SAFETY: exec_raw reads the atom through the pointers it holds and must check each
    // itself: the deliberately bad ones here must give EFAULT, and the others point at live
    // locals.
    let r = unsafe { ctx.exec_raw(&mut a) };
    assert_eq!(
        r,
        RawOutcome::Done(&mut a as *mut _, -(libc::ENOSYS as i64))
    );
    val += 1;
    assert_eq!(val, 1);
}

#[test]
fn thousands_in_flight_and_a_small_ring_loses_nothing() {
    const N: usize = 2000;
    let ctx = Context::new(8); // far fewer slots than completions: overflow
    let pipes: Vec<(i32, i32)> = (0..N).map(|_| pipe()).collect();
    let mut handles = Vec::new();
    for (i, &(r, _)) in pipes.iter().enumerate() {
        let mut b = Builder::new();
        let (fd, buf, len, tag) = (
            b.value(r as i64),
            b.buffer(8),
            b.value(8),
            b.value(i as i64),
        );
        let a = b.atom(libc::SYS_read, &[fd, buf, len]);
        let _ = tag;
        b.flags(a, SYSLET_ASYNC);
        match ctx.exec(b.build().unwrap()) {
            Outcome::Async(h) => handles.push(h.0),
            Outcome::Done(_) => panic!("forced async"),
        }
    }
    for &(_, w) in &pipes {
        write_all(w, b"12345");
    }
    let mut seen = std::collections::HashSet::new();
    let t = Instant::now();
    while seen.len() < N {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "only {} of {N}",
            seen.len()
        );
        ctx.wait(1, Some(Duration::from_millis(100)));
        while let Some(c) = ctx.take() {
            let d = c.ok().unwrap();
            assert_eq!(d.ret, 5);
            assert!(seen.insert(d.id), "completion {} twice", d.id);
        }
    }
    let mut want: Vec<u64> = handles;
    want.sort();
    let mut got: Vec<u64> = seen.into_iter().collect();
    got.sort();
    assert_eq!(got, want);
    assert!(
        ctx.overflowed() > 0,
        "the ring of 8 overflowed and nothing was lost"
    );
    for (r, w) in pipes {
        // SAFETY: closes descriptors this test opened and uses no more.
        unsafe {
            libc::close(r);
            libc::close(w);
        }
    }
}

#[test]
fn validation_names_the_problem() {
    let mut b = Builder::new();
    let x = b.value(0);
    b.atom(99_999, &[x]);
    assert_eq!(
        b.build().err(),
        Some(BuildError::UnknownSyscall {
            atom: 0,
            nr: 99_999
        })
    );
    let mut b = Builder::new();
    b.atom(libc::SYS_clone, &[]); // also on aarch64 (fork is x86_64-only)
    let e = b.build().err().unwrap();
    assert!(
        matches!(e, BuildError::ForbiddenSyscall { atom: 0, .. }),
        "{e}"
    );
    let mut b = Builder::new();
    let fd = b.value(0);
    b.atom(libc::SYS_read, &[fd]);
    let e = b.build().err().unwrap();
    assert!(
        matches!(
            e,
            BuildError::MissingArgument {
                atom: 0,
                takes: 3,
                given: 1,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("takes 3 arguments, 1 given"), "{e}");
    let mut b = Builder::new();
    let a = b.atom(libc::SYS_getpid, &[]);
    b.next(a, Some(AtomId(7)));
    assert_eq!(
        b.build().err(),
        Some(BuildError::BadJump {
            atom: 0,
            target: 7,
            atoms: 1
        })
    );
    let mut b = Builder::new();
    let a = b.atom(libc::SYS_getpid, &[]);
    b.flags(a, SYSLET_STOP_ON_ZERO | SYSLET_SKIP_TO_NEXT_ON_STOP);
    assert_eq!(b.build().err(), Some(BuildError::SkipPastEnd { atom: 0 }));
    let mut b = Builder::new();
    let a = b.atom(libc::SYS_getpid, &[]);
    b.flags(a, SYSLET_ASYNC | SYSLET_SYNC);
    assert!(matches!(b.build().err(), Some(BuildError::BadFlags { .. })));
    assert_eq!(Builder::new().build().err(), Some(BuildError::Empty));
}

#[test]
fn from_green_threads_wait_parks_only_the_green_thread() {
    let rt = weft_runtime::Runtime::builder().workers(1).build().unwrap();
    let (r, w) = pipe();
    let got = rt.block_on(move || {
        let ctx = Context::new(4);
        let mut b = Builder::new();
        let (fd, buf, len) = (b.value(r as i64), b.buffer(8), b.value(8));
        b.atom(libc::SYS_read, &[fd, buf, len]);
        let Outcome::Async(h) = ctx.exec(b.build().unwrap()) else {
            panic!("async")
        };
        // Another green thread on the same (only) worker runs while we wait, and it is
        // the one that makes the read complete.
        let writer = weft_runtime::spawn(move || {
            weft_runtime::sleep(Duration::from_millis(10));
            write_all(w, b"green");
            w
        });
        let d = ctx.wait_for(h).unwrap();
        let w = writer.join().unwrap();
        // SAFETY: closes descriptors this test opened and uses no more.
        unsafe { libc::close(w) };
        d.ret
    });
    assert_eq!(got, 5);
    // SAFETY: closes descriptors this test opened and uses no more.
    unsafe { libc::close(r) };
}

#[test]
fn a_server_loop_as_one_syslet() {
    // The seed's example: accept -> setsockopt(TCP_NODELAY) -> read while positive ->
    // decrement a counter -> back to accept while positive.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let lfd = listener.as_raw_fd();
    let mut b = Builder::new();
    let (l, null) = (b.value(lfd as i64), b.value(0));
    let conn = b.var();
    let accept = b.atom(libc::SYS_accept, &[l, null, null]);
    b.ret(accept, conn).flags(accept, SYSLET_STOP_ON_NEGATIVE);
    let (tcp, nodelay, one, four) = (
        b.value(libc::IPPROTO_TCP as i64),
        b.value(libc::TCP_NODELAY as i64),
        b.value(1),
        b.value(4),
    );
    let one_ptr = b.bytes(&1i32.to_ne_bytes());
    let set = b.atom(libc::SYS_setsockopt, &[conn, tcp, nodelay, one_ptr, four]);
    b.flags(set, SYSLET_STOP_ON_NEGATIVE);
    let (buf, len, total) = (b.buffer(256), b.value(256), b.value(0));
    let read = b.atom(libc::SYS_read, &[conn, buf, len]);
    b.flags(
        read,
        SYSLET_STOP_ON_NON_POSITIVE | SYSLET_SKIP_TO_NEXT_ON_STOP,
    );
    // Linearly after `read`: its else (EOF or error), the end of this connection.
    let close = b.atom(libc::SYS_close, &[conn]);
    let count = b.umem_add(total, one); // one per read
    b.next(read, Some(count)).next(count, Some(read)); // loop: read while positive
    let (clients, minus_one) = (b.value(3), b.value(-1));
    let left = b.umem_add(clients, minus_one);
    b.flags(left, SYSLET_STOP_ON_NON_POSITIVE);
    b.next(close, Some(left)).next(left, Some(accept));
    let prog = b.build().unwrap();
    let ctx = Context::new(4);
    let h = match ctx.exec(prog) {
        Outcome::Async(h) => h,
        Outcome::Done(_) => panic!("accept with no client waiting goes async"),
    };
    for i in 0..3 {
        use std::io::Write;
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(format!("client {i}").as_bytes()).unwrap();
    }
    let d = ctx.wait_for(h).unwrap();
    assert_eq!(d.program.get(clients), 0);
    assert_eq!(d.ret, 0, "ended at the counter reaching 0");
    assert!(d.program.get(total) >= 3, "at least one read per client");
    drop(listener);
}

fn tempdir() -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "weft-syslet-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn dropping_the_context_while_a_syslet_runs_is_safe() {
    // The program the atoms point into must outlive the syslet even when the user drops
    // the context first (it used to be freed under the cachemiss thread's feet).
    let mut ends = Vec::new();
    for _ in 0..20 {
        let (r, w) = pipe();
        let ctx = Context::new(4);
        let mut b = Builder::new();
        let (fd, buf, len, n) = (b.value(r as i64), b.buffer(4096), b.value(4096), b.var());
        let a = b.atom(libc::SYS_read, &[fd, buf, len]);
        b.ret(a, n);
        assert!(matches!(ctx.exec(b.build().unwrap()), Outcome::Async(_)));
        drop(ctx);
        // Overwrite freed memory if the program was freed, then let the read finish.
        let junk: Vec<Vec<u8>> = (0..64).map(|_| vec![0xAB; 4096]).collect();
        write_all(w, &[7u8; 64]);
        ends.push((r, w, junk));
    }
    // Each read has finished once its pipe is empty again: only then are its
    // descriptors closed (closed sooner, their numbers could be reused by another test
    // before a late read runs).
    for (r, _, _) in &ends {
        common::wait_until("every read ran", || !common::readable(*r));
    }
    for (r, w, _) in ends {
        // SAFETY: closes descriptors this test opened and uses no more.
        unsafe {
            libc::close(r);
            libc::close(w);
        }
    }
}
