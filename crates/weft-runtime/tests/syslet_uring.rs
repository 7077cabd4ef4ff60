//! Syslets on the io_uring chain engine (`syslet/uring.rs`) and on cachemiss threads:
//! every scenario runs both ways (the context's engine switch on and off) and must give
//! the same results. Ports of liburing's link tests in the syslet vocabulary: link,
//! hardlink, skip-cqe (NO_COMPLETE), open-direct-link; plus many files, a loop whose
//! body is a chain, cancellation of a chain blocked in a read, EFAULT inside a chain.
//!
//! On the threads I/O backend (`WEFT_IO_BACKEND=threads`), or with
//! `WEFT_SYSLET_URING=off`, both passes use cachemiss threads.

use std::time::{Duration, Instant};
use weft_runtime::syslet::*;

mod common;

const ENOENT: i64 = -(libc::ENOENT as i64);
const EBADF: i64 = -(libc::EBADF as i64);
const EFAULT: i64 = -(libc::EFAULT as i64);
const ECANCELED: i64 = -(libc::ECANCELED as i64);
const SENTINEL: i64 = 12345;

/// Whether syslets of a context with the engine switch `on` really use the engine here.
fn engine_used(on: bool) -> bool {
    on && weft_runtime::io_backend() == "io_uring"
        && std::env::var("WEFT_SYSLET_URING").as_deref() != Ok("off")
        && engine_available()
}

/// Runs `f` with the engine on, then off (checking that the engine ran a chain).
fn both(f: impl Fn(&Context, bool)) {
    both_with(true, f)
}

fn both_with(expect_chain: bool, f: impl Fn(&Context, bool)) {
    for on in [true, false] {
        let ctx = Context::new(64);
        ctx.set_uring_engine(on);
        let before = engine_stats();
        f(&ctx, on);
        if weft_runtime::io_backend() != "io_uring" {
            assert_eq!(engine_stats().chains, 0, "no chain on the threads backend");
        }
        if expect_chain && engine_used(on) {
            assert!(
                engine_stats().chains > before.chains,
                "the engine ran no chain"
            );
        }
    }
}

fn finish(ctx: &Context, o: Outcome) -> Done {
    match o {
        Outcome::Done(d) => d,
        Outcome::Async(h) => ctx.wait_for(h).expect("its completion"),
    }
}

fn pipe() -> (i32, i32) {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into a local array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    (fds[0], fds[1])
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("weft-syslet-uring-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

struct Orc {
    prog: Program,
    fd: Var,
    buf: Var,
    n: Var,
    c: Var,
}

/// openat(path) [open_flags] -> read(fd, 4096) [read_flags] -> close(fd), with every
/// result kept (n and c start at SENTINEL).
fn orc(path: &str, open_flags: u64, read_flags: u64) -> Orc {
    let mut b = Builder::new();
    let (at, p, fl, mode) = (
        b.value(libc::AT_FDCWD as i64),
        b.cstr(path),
        b.value(libc::O_RDONLY as i64),
        b.value(0),
    );
    let fd = b.value(SENTINEL);
    let open = b.atom(libc::SYS_openat, &[at, p, fl, mode]);
    b.ret(open, fd).flags(open, open_flags);
    let (buf, len, n) = (b.buffer(4096), b.value(4096), b.value(SENTINEL));
    let read = b.atom(libc::SYS_read, &[fd, buf, len]);
    b.ret(read, n).flags(read, read_flags);
    let c = b.value(SENTINEL);
    let close = b.atom(libc::SYS_close, &[fd]);
    b.ret(close, c);
    Orc {
        prog: b.build().unwrap(),
        fd,
        buf,
        n,
        c,
    }
}

#[test]
fn link_a_failing_first_atom_cancels_the_rest() {
    both(|ctx, on| {
        let o = orc(
            "/nonexistent/weft-uring",
            SYSLET_ASYNC | SYSLET_STOP_ON_NEGATIVE,
            0,
        );
        let d = finish(ctx, ctx.exec(o.prog));
        assert_eq!((d.atom, d.ret), (0, ENOENT), "engine {on}: names the open");
        assert_eq!(d.program.get(o.fd), ENOENT);
        assert_eq!(d.program.get(o.n), SENTINEL, "read never ran");
        assert_eq!(d.program.get(o.c), SENTINEL, "close never ran");
    });
}

#[test]
fn hardlink_goes_on_after_a_failure() {
    both(|ctx, on| {
        let o = orc("/nonexistent/weft-uring", SYSLET_ASYNC, 0);
        let d = finish(ctx, ctx.exec(o.prog));
        assert_eq!(d.program.get(o.fd), ENOENT, "engine {on}");
        assert_eq!(d.program.get(o.n), EBADF, "read ran on the bad descriptor");
        assert_eq!(d.program.get(o.c), EBADF);
        assert_eq!((d.atom, d.ret), (2, EBADF), "ends at close");
    });
}

#[test]
fn open_direct_link_reads_the_data_and_closes() {
    let dir = tempdir("direct");
    let path = dir.join("f");
    std::fs::write(&path, b"direct descriptors").unwrap();
    both(|ctx, on| {
        let before = engine_stats();
        let o = orc(
            path.to_str().unwrap(),
            SYSLET_ASYNC | SYSLET_STOP_ON_NEGATIVE,
            0,
        );
        let d = finish(ctx, ctx.exec(o.prog));
        assert_eq!((d.atom, d.ret), (2, 0), "engine {on}: ends at close, 0");
        assert!(d.program.get(o.fd) >= 0);
        assert_eq!(d.program.get(o.n), 18);
        assert_eq!(&d.program.buffer(o.buf)[..18], b"direct descriptors");
        assert_eq!(d.program.get(o.c), 0);
        if engine_used(on) {
            assert!(engine_stats().direct > before.direct, "opened into a slot");
            assert!((d.program.get(o.fd) as u32) < 4096, "the slot's index");
        }
    });
    // The stop-on-short-read else branch that goes to the same close maps as well.
    both(|ctx, _| {
        let o = orc(
            path.to_str().unwrap(),
            SYSLET_ASYNC | SYSLET_STOP_ON_NEGATIVE,
            SYSLET_STOP_ON_NEGATIVE | SYSLET_SKIP_TO_NEXT_ON_STOP,
        );
        let d = finish(ctx, ctx.exec(o.prog));
        assert_eq!((d.atom, d.ret, d.program.get(o.n)), (2, 0, 18));
    });
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_stop_condition_in_the_middle_ends_the_chain_and_is_evaluated() {
    let dir = tempdir("stop");
    let path = dir.join("empty");
    std::fs::write(&path, b"").unwrap();
    both(|ctx, on| {
        // read returns 0: STOP_ON_ZERO ends the syslet at the read (the close does not
        // run, as in the executor; the descriptor is a plain one then).
        let o = orc(
            path.to_str().unwrap(),
            SYSLET_ASYNC | SYSLET_STOP_ON_NEGATIVE,
            SYSLET_STOP_ON_ZERO,
        );
        let d = finish(ctx, ctx.exec(o.prog));
        assert_eq!((d.atom, d.ret), (1, 0), "engine {on}");
        assert_eq!(d.program.get(o.c), SENTINEL);
        let fd = d.program.get(o.fd);
        assert!(fd >= 0);
        // SAFETY: closes descriptors this test opened and uses no more.
        assert_eq!(unsafe { libc::close(fd as i32) }, 0, "a real descriptor");
    });
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn no_complete_is_like_skip_cqe() {
    let dir = tempdir("skip");
    let path = dir.join("f");
    both(|ctx, on| {
        std::fs::write(&path, b"......").unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        use std::os::fd::AsRawFd;
        // Three pwrites, all NO_COMPLETE: the first gets IOSQE_CQE_SKIP_SUCCESS on the
        // engine; the syslet ends at the last, silently.
        let prog = |last_silent: bool| {
            let mut b = Builder::new();
            let (fd, one) = (b.value(f.as_raw_fd() as i64), b.value(1));
            for (k, byte) in [b"a", b"b", b"c"].into_iter().enumerate() {
                let (src, off) = (b.bytes(byte), b.value(k as i64));
                let a = b.atom(libc::SYS_pwrite64, &[fd, src, one, off]);
                let mut fl = SYSLET_NO_COMPLETE;
                if k == 0 {
                    fl |= SYSLET_ASYNC;
                }
                if k < 2 || last_silent {
                    b.flags(a, fl);
                } else {
                    b.flags(a, 0);
                }
            }
            b.build().unwrap()
        };
        let before = engine_stats();
        assert!(matches!(ctx.exec(prog(true)), Outcome::Async(_)));
        let t = Instant::now();
        while ctx.in_flight() > 0 && t.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(ctx.in_flight(), 0, "engine {on}");
        assert_eq!(ctx.ready(), 0, "NO_COMPLETE at the end: no completion");
        assert_eq!(std::fs::read(&path).unwrap(), b"abc...");
        if engine_used(on) {
            assert!(engine_stats().skip_success > before.skip_success);
        }
        // Without NO_COMPLETE on the last atom, its completion comes.
        std::fs::write(&path, b"......").unwrap();
        let d = finish(ctx, ctx.exec(prog(false)));
        assert_eq!((d.atom, d.ret), (2, 1));
        assert_eq!(std::fs::read(&path).unwrap(), b"abc...");
    });
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn many_files_open_read_close() {
    const N: usize = 200;
    let dir = tempdir("many");
    let paths: Vec<_> = (0..N)
        .map(|i| {
            let p = dir.join(format!("f{i}"));
            std::fs::write(&p, format!("file number {i}")).unwrap();
            p
        })
        .collect();
    both(|ctx, on| {
        let mut hs = Vec::new();
        for p in &paths {
            let o = orc(
                p.to_str().unwrap(),
                SYSLET_ASYNC | SYSLET_STOP_ON_NEGATIVE,
                SYSLET_STOP_ON_NEGATIVE | SYSLET_SKIP_TO_NEXT_ON_STOP,
            );
            hs.push((ctx.exec(o.prog), o.buf, o.n));
        }
        for (i, (o, buf, n)) in hs.into_iter().enumerate() {
            let d = finish(ctx, o);
            let want = format!("file number {i}");
            assert_eq!((d.atom, d.ret), (2, 0), "engine {on}, file {i}");
            assert_eq!(d.program.get(n), want.len() as i64);
            assert_eq!(&d.program.buffer(buf)[..want.len()], want.as_bytes());
        }
        assert_eq!(ctx.in_flight(), 0);
    });
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_loop_whose_body_is_a_chain_counts_with_umem_add() {
    both(|ctx, on| {
        let (r, w) = pipe();
        let mut b = Builder::new();
        let (fd, buf, len, n) = (b.value(r as i64), b.buffer(1), b.value(1), b.var());
        let (count, one) = (b.value(0), b.value(1));
        let read = b.atom(libc::SYS_read, &[fd, buf, len]);
        b.ret(read, n)
            .flags(read, SYSLET_ASYNC | SYSLET_STOP_ON_NON_POSITIVE);
        let add = b.umem_add(count, one);
        b.next(add, Some(read));
        let o = ctx.exec(b.build().unwrap());
        const K: usize = 20;
        let writer = std::thread::spawn(move || {
            for i in 0..K {
                // SAFETY: writes from a live buffer of that length to a descriptor this
                // test owns.
                unsafe { libc::write(w, [i as u8].as_ptr().cast(), 1) };
                std::thread::sleep(Duration::from_millis(1));
            }
            // SAFETY: closes descriptors this test opened and uses no more.
            unsafe { libc::close(w) };
        });
        let d = finish(ctx, o);
        writer.join().unwrap();
        assert_eq!(
            (d.atom, d.ret),
            (0, 0),
            "engine {on}: ends at the read's EOF"
        );
        assert_eq!(d.program.get(count), K as i64);
        // SAFETY: closes descriptors this test opened and uses no more.
        unsafe { libc::close(r) };
    });
}

#[test]
fn cancel_a_chain_blocked_in_a_read() {
    both(|ctx, on| {
        let (r, w) = pipe();
        let mut b = Builder::new();
        let (fd, buf, len, n) = (
            b.value(r as i64),
            b.buffer(8),
            b.value(8),
            b.value(SENTINEL),
        );
        let (count, one) = (b.value(0), b.value(1));
        let read = b.atom(libc::SYS_read, &[fd, buf, len]);
        b.ret(read, n).flags(read, SYSLET_ASYNC);
        b.umem_add(count, one);
        let Outcome::Async(h) = ctx.exec(b.build().unwrap()) else {
            panic!("async")
        };
        std::thread::sleep(Duration::from_millis(30));
        assert!(ctx.cancel(h));
        let d = ctx.wait_for(h).unwrap();
        assert!(
            d.ret == ECANCELED || d.ret == -(libc::EINTR as i64),
            "engine {on}: {}",
            d.ret
        );
        assert_eq!(d.program.get(count), 0, "the atom after it did not run");
        if engine_used(on) {
            assert_eq!((d.atom, d.ret), (0, ECANCELED));
            assert_eq!(d.program.get(n), SENTINEL);
        }
        // SAFETY: closes descriptors this test opened and uses no more.
        unsafe {
            libc::close(r);
            libc::close(w);
        }
    });
}

#[test]
fn cancel_in_the_middle_of_a_chain() {
    both(|ctx, on| {
        let (r, w) = pipe();
        let (r2, w2) = pipe();
        let mut b = Builder::new();
        let (wfd, x, one, w0) = (
            b.value(w2 as i64),
            b.bytes(b"x"),
            b.value(1),
            b.value(SENTINEL),
        );
        let first = b.atom(libc::SYS_write, &[wfd, x, one]);
        b.ret(first, w0).flags(first, SYSLET_ASYNC);
        let (fd, buf, len, n) = (
            b.value(r as i64),
            b.buffer(8),
            b.value(8),
            b.value(SENTINEL),
        );
        let read = b.atom(libc::SYS_read, &[fd, buf, len]);
        b.ret(read, n);
        let (y, w1) = (b.bytes(b"y"), b.value(SENTINEL));
        let last = b.atom(libc::SYS_write, &[wfd, y, one]);
        b.ret(last, w1);
        let Outcome::Async(h) = ctx.exec(b.build().unwrap()) else {
            panic!("async")
        };
        // Cancelled once the first write has run (its byte is in the pipe): the chain
        // is then at its read, which blocks.
        common::wait_until("the first write", || common::readable(r2));
        assert!(ctx.cancel(h));
        let d = ctx.wait_for(h).unwrap();
        assert_eq!(d.program.get(w0), 1, "engine {on}: the first write ran");
        assert!(
            d.ret == ECANCELED || d.ret == -(libc::EINTR as i64),
            "{}",
            d.ret
        );
        if engine_used(on) {
            assert_eq!((d.atom, d.program.get(n)), (1, SENTINEL));
        }
        eprintln!(
            "engine {on}: the hard-linked write after the cancelled read: {}",
            d.program.get(w1)
        );
        for fd in [r, w, r2, w2] {
            // SAFETY: closes descriptors this test opened and uses no more.
            unsafe { libc::close(fd) };
        }
    });
}

#[test]
fn efault_in_the_middle_of_a_chain() {
    let dir = tempdir("efault");
    let path = dir.join("f");
    both(|ctx, on| {
        std::fs::write(&path, b"").unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        use std::os::fd::AsRawFd;
        // pwrite(f, "ab", 2, 0) -> pread(f, buf, *BAD, 0) -> pwrite(f, "c", 1, 2)
        let (fd, two, one, zero, two_off) = (f.as_raw_fd() as u64, 2u64, 1u64, 0u64, 2u64);
        let (ab, c) = (b"ab".as_ptr() as u64, b"c".as_ptr() as u64);
        let mut buf = [0u8; 8];
        let bufp = buf.as_mut_ptr() as u64;
        let mut rets = [SENTINEL; 3];
        let mut atoms = [SysletUatom::default(); 3];
        atoms[0].nr = libc::SYS_pwrite64 as u64;
        atoms[0].flags = SYSLET_ASYNC;
        atoms[0].arg_ptr[..4].copy_from_slice(&[&fd as *const u64, &ab, &two, &zero]);
        atoms[1].nr = libc::SYS_pread64 as u64;
        atoms[1].arg_ptr[..4].copy_from_slice(&[
            &fd as *const u64,
            &bufp,
            0x18 as *const u64,
            &zero,
        ]);
        atoms[2].nr = libc::SYS_pwrite64 as u64;
        atoms[2].arg_ptr[..4].copy_from_slice(&[&fd as *const u64, &c, &one, &two_off]);
        for (i, a) in atoms.iter_mut().enumerate() {
            a.ret_ptr = &mut rets[i];
        }
        let base = atoms.as_mut_ptr();
        // SAFETY: `base` points at a local array of three atoms; add(1) and add(2) stay
        // inside it.
        unsafe {
            (*base).next = base.add(1);
            (*base.add(1)).next = base.add(2);
        }
        // SAFETY: the atoms, their arguments and result slots are locals that outlive the
        // program, whose completion this test waits for before they go.
        let h = match unsafe { ctx.exec_raw(base) } {
            RawOutcome::Async(h) => h,
            RawOutcome::Done(..) => panic!("SYSLET_ASYNC goes async"),
        };
        let t = Instant::now();
        let c = loop {
            if let Some(c) = ctx.pop() {
                break c;
            }
            assert!(t.elapsed() < Duration::from_secs(60));
            ctx.wait(1, Some(Duration::from_millis(100)));
        };
        assert_eq!(c.id, h.0);
        assert_eq!(
            (c.atom, c.ret),
            // SAFETY: an offset inside the local array of three atoms.
            (unsafe { base.add(1) }, EFAULT),
            "engine {on}"
        );
        assert_eq!(
            rets,
            [2, SENTINEL, SENTINEL],
            "the first write ran, nothing after"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"ab");
        let _ = buf;
    });
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn branches_between_chains_follow_skip_to_next() {
    // open fails -> (skip) an else branch: getpid... -> ends; on success -> read.
    both(|ctx, on| {
        let mut b = Builder::new();
        let (at, p, fl, mode) = (
            b.value(libc::AT_FDCWD as i64),
            b.cstr("/nonexistent/weft-else"),
            b.value(libc::O_RDONLY as i64),
            b.value(0),
        );
        let fd = b.var();
        let open = b.atom(libc::SYS_openat, &[at, p, fl, mode]);
        b.ret(open, fd).flags(
            open,
            SYSLET_ASYNC | SYSLET_STOP_ON_NEGATIVE | SYSLET_SKIP_TO_NEXT_ON_STOP,
        );
        let (cnt, ten) = (b.value(0), b.value(10));
        let els = b.umem_add(cnt, ten); // the linearly next atom: the else branch
        b.next(els, None);
        let (buf, len) = (b.buffer(8), b.value(8));
        let then = b.atom(libc::SYS_read, &[fd, buf, len]);
        b.next(open, Some(then));
        let d = finish(ctx, ctx.exec(b.build().unwrap()));
        assert_eq!((d.atom, d.ret), (1, 10), "engine {on}");
        assert_eq!(d.program.get(fd), ENOENT);
    });
}

#[test]
fn an_atom_io_uring_cannot_do_goes_on_a_cachemiss_thread() {
    both(|ctx, on| {
        // read(r1) on the engine -> readv(r2) (no io_uring mapping here), which blocks
        // until a thread writes: the engine hands the rest to a cachemiss thread.
        let (r1, w1) = pipe();
        let (r2, w2) = pipe();
        // SAFETY: writes from a live buffer of that length to a descriptor this test owns.
        unsafe { libc::write(w1, b"1".as_ptr().cast(), 1) };
        let mut b = Builder::new();
        let (fd1, buf, len, n) = (b.value(r1 as i64), b.buffer(8), b.value(8), b.var());
        let read = b.atom(libc::SYS_read, &[fd1, buf, len]);
        b.ret(read, n).flags(read, SYSLET_ASYNC);
        let mut byte = [0u8; 4];
        let iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 4,
        };
        let (fd2, iovp, cnt) = (
            b.value(r2 as i64),
            b.value(&iov as *const libc::iovec as i64),
            b.value(1),
        );
        b.atom(libc::SYS_readv, &[fd2, iovp, cnt]);
        let before = engine_stats();
        let o = ctx.exec(b.build().unwrap());
        if engine_used(on) {
            // The write comes only once the engine has handed the chain on (written
            // sooner, the readv would not block and need no hand-off).
            common::wait_until("the engine handed the chain on", || {
                engine_stats().offloaded != before.offloaded
            });
        }
        // SAFETY: writes from a live buffer of that length to a descriptor this test owns.
        unsafe { libc::write(w2, b"22".as_ptr().cast(), 2) };
        let d = finish(ctx, o);
        assert_eq!((d.atom, d.ret, d.program.get(n)), (1, 2, 1), "engine {on}");
        assert_eq!(&byte[..2], b"22");
        if engine_used(on) {
            assert!(engine_stats().offloaded > before.offloaded);
        }
        for fd in [r1, w1, r2, w2] {
            // SAFETY: closes descriptors this test opened and uses no more.
            unsafe { libc::close(fd) };
        }
    });
}

#[test]
fn calls_io_uring_would_do_differently_keep_the_calls_results() {
    both_with(false, |ctx, on| {
        // A read on an empty non-blocking pipe: EAGAIN, as the call gives (io_uring would
        // wait): such an atom is not put on io_uring.
        let (r, w) = pipe();
        // SAFETY: sets a flag on a descriptor this test owns.
        unsafe { libc::fcntl(r, libc::F_SETFL, libc::O_NONBLOCK) };
        let mut b = Builder::new();
        let (fd, buf, len) = (b.value(r as i64), b.buffer(8), b.value(8));
        let a = b.atom(libc::SYS_read, &[fd, buf, len]);
        b.flags(a, SYSLET_ASYNC);
        let d = finish(ctx, ctx.exec(b.build().unwrap()));
        assert_eq!(d.ret, -(libc::EAGAIN as i64), "engine {on}");
        // pread64 on a pipe: ESPIPE (io_uring would ignore the offset and read).
        // SAFETY: writes from a live buffer of that length to a descriptor this test owns.
        unsafe { libc::write(w, b"data".as_ptr().cast(), 4) };
        let (r2, w2) = pipe();
        // SAFETY: writes from a live buffer of that length to a descriptor this test owns.
        unsafe { libc::write(w2, b"data".as_ptr().cast(), 4) };
        let mut b = Builder::new();
        let (fd, buf, len, off) = (b.value(r2 as i64), b.buffer(8), b.value(8), b.value(0));
        let a = b.atom(libc::SYS_pread64, &[fd, buf, len, off]);
        b.flags(a, SYSLET_ASYNC);
        let d = finish(ctx, ctx.exec(b.build().unwrap()));
        assert_eq!(d.ret, -(libc::ESPIPE as i64), "engine {on}");
        for fd in [r, w, r2, w2] {
            // SAFETY: closes descriptors this test opened and uses no more.
            unsafe { libc::close(fd) };
        }
    });
}

#[test]
fn pread_and_pwrite_on_a_file_map() {
    let dir = tempdir("prw");
    let path = dir.join("f");
    std::fs::write(&path, b"0123456789").unwrap();
    both(|ctx, on| {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        use std::os::fd::AsRawFd;
        let mut b = Builder::new();
        let (fd, src, two, five) = (
            b.value(f.as_raw_fd() as i64),
            b.bytes(b"ab"),
            b.value(2),
            b.value(5),
        );
        let w = b.atom(libc::SYS_pwrite64, &[fd, src, two, five]);
        b.flags(w, SYSLET_ASYNC | SYSLET_STOP_ON_NEGATIVE);
        let (buf, ten, zero, n) = (b.buffer(16), b.value(10), b.value(0), b.var());
        let r = b.atom(libc::SYS_pread64, &[fd, buf, ten, zero]);
        b.ret(r, n);
        let fs = b.atom(libc::SYS_fdatasync, &[fd]);
        b.flags(fs, SYSLET_STOP_ON_NEGATIVE);
        let d = finish(ctx, ctx.exec(b.build().unwrap()));
        assert_eq!((d.atom, d.ret), (2, 0), "engine {on}");
        assert_eq!(d.program.get(n), 10);
        assert_eq!(&d.program.buffer(buf)[..10], b"01234ab789");
        std::fs::write(&path, b"0123456789").unwrap();
    });
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn results_feeding_later_atoms_cut_the_chain_and_stay_exact() {
    let dir = tempdir("feed");
    let (src, dst) = (dir.join("src"), dir.join("dst"));
    std::fs::write(&src, b"seven!!").unwrap();
    both(|ctx, on| {
        std::fs::write(&dst, b"").unwrap();
        use std::os::fd::AsRawFd;
        let fs = std::fs::File::open(&src).unwrap();
        let fdst = std::fs::OpenOptions::new().write(true).open(&dst).unwrap();
        let (sfd, dfd) = (fs.as_raw_fd() as u64, fdst.as_raw_fd() as u64);
        let mut buf = [0u8; 64];
        let mut n: i64 = SENTINEL;
        let (bufp, big, zero, eight, sixteen) = (buf.as_mut_ptr() as u64, 64u64, 0u64, 8u64, 16u64);
        let np = &mut n as *mut i64 as u64;
        let mut last_ret = SENTINEL;
        // pread(src, buf, 64, 0) -> n; pwrite(dst, buf, n, 0): the length is the read's
        // result; pwrite(dst, &n, 8, 16): the bytes written are the read's result.
        let mut atoms = [SysletUatom::default(); 3];
        atoms[0].nr = libc::SYS_pread64 as u64;
        atoms[0].flags = SYSLET_ASYNC;
        atoms[0].ret_ptr = &mut n;
        atoms[0].arg_ptr[..4].copy_from_slice(&[&sfd as *const u64, &bufp, &big, &zero]);
        atoms[1].nr = libc::SYS_pwrite64 as u64;
        atoms[1].arg_ptr[..4].copy_from_slice(&[
            &dfd as *const u64,
            &bufp,
            &n as *const i64 as *const u64,
            &zero,
        ]);
        atoms[2].nr = libc::SYS_pwrite64 as u64;
        atoms[2].ret_ptr = &mut last_ret;
        atoms[2].arg_ptr[..4].copy_from_slice(&[&dfd as *const u64, &np, &eight, &sixteen]);
        let base = atoms.as_mut_ptr();
        // SAFETY: `base` points at a local array of three atoms; add(1) and add(2) stay
        // inside it.
        unsafe {
            (*base).next = base.add(1);
            (*base.add(1)).next = base.add(2);
        }
        // SAFETY: the atoms, their arguments and result slots are locals that outlive the
        // program, whose completion this test waits for before they go.
        let RawOutcome::Async(h) = (unsafe { ctx.exec_raw(base) }) else {
            panic!("SYSLET_ASYNC goes async")
        };
        let t = Instant::now();
        let c = loop {
            if let Some(c) = ctx.pop() {
                break c;
            }
            assert!(t.elapsed() < Duration::from_secs(60));
            ctx.wait(1, Some(Duration::from_millis(100)));
        };
        assert_eq!(
            (c.id, c.atom, c.ret),
            // SAFETY: an offset inside the local array of three atoms.
            (h.0, unsafe { base.add(2) }, 8),
            "engine {on}"
        );
        // SAFETY: reads a local that the finished program wrote through its result pointer.
        assert_eq!(unsafe { std::ptr::read_volatile(&last_ret) }, 8);
        let got = std::fs::read(&dst).unwrap();
        assert_eq!(&got[..7], b"seven!!");
        assert_eq!(&got[16..24], &7i64.to_ne_bytes());
        let _ = buf;
    });
    let _ = std::fs::remove_dir_all(dir);
}

/// The seed's async-test, for a quick measurement (not a test): open -> read -> close of
/// `WEFT_SYSLET_MEASURE_FILES` (default 1000) small files in `WEFT_SYSLET_MEASURE_DIR`
/// (default /var/tmp), as a sync loop, as syslets via cachemiss threads, and via the
/// engine; `WEFT_SYSLET_MEASURE_DROP=1` drops the page cache before each pass (root).
/// `cargo test --release -p weft-runtime --test syslet_uring -- --ignored --nocapture`
#[test]
#[ignore = "a measurement, not a check: run it by hand (see above)"]
fn measure_open_read_close() {
    let n: usize = std::env::var("WEFT_SYSLET_MEASURE_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let root = std::path::PathBuf::from(
        std::env::var("WEFT_SYSLET_MEASURE_DIR").unwrap_or_else(|_| "/var/tmp".into()),
    )
    .join(format!("weft-syslet-measure-{n}"));
    std::fs::create_dir_all(&root).unwrap();
    let paths: Vec<String> = (0..n)
        .map(|i| {
            let p = root.join(format!("f{i:05}"));
            if !p.exists() {
                std::fs::write(&p, vec![b'x'; 1000 + i % 3000]).unwrap();
            }
            p.to_str().unwrap().to_string()
        })
        .collect();
    let drop_caches = std::env::var("WEFT_SYSLET_MEASURE_DROP").as_deref() == Ok("1");
    let prepare = || {
        if drop_caches {
            // SAFETY: sync takes no arguments.
            unsafe { libc::sync() };
            std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
        }
    };
    let mut total = 0usize;
    for round in 0..2 {
        prepare();
        let t = Instant::now();
        let mut buf = vec![0u8; 4096];
        for p in &paths {
            let c = std::ffi::CString::new(p.as_str()).unwrap();
            // SAFETY: opens a NUL-terminated path (a CString).
            let fd = unsafe { libc::openat(libc::AT_FDCWD, c.as_ptr(), libc::O_RDONLY) };
            assert!(fd >= 0);
            // SAFETY: reads at most 4096 bytes into a live local buffer of that size.
            total += unsafe { libc::read(fd, buf.as_mut_ptr().cast(), 4096) } as usize;
            // SAFETY: closes descriptors this test opened and uses no more.
            unsafe { libc::close(fd) };
        }
        eprintln!("round {round} sync loop:            {:?}", t.elapsed());
        for (on, name) in [(false, "cachemiss threads"), (true, "io_uring engine")] {
            let progs: Vec<_> = paths
                .iter()
                .map(|p| {
                    orc(
                        p,
                        SYSLET_STOP_ON_NEGATIVE,
                        SYSLET_STOP_ON_NEGATIVE | SYSLET_SKIP_TO_NEXT_ON_STOP,
                    )
                })
                .collect();
            let ctx = Context::new(2048);
            ctx.set_uring_engine(on);
            prepare();
            let before = engine_stats();
            let t = Instant::now();
            let outs: Vec<_> = progs.into_iter().map(|o| (ctx.exec(o.prog), o.n)).collect();
            let mut asyncs = 0;
            let nv = outs.first().map(|o| o.1);
            for (o, _) in outs {
                match o {
                    Outcome::Done(d) => {
                        assert_eq!(d.ret, 0);
                        total += d.program.get(nv.unwrap()) as usize;
                    }
                    Outcome::Async(_) => asyncs += 1,
                }
            }
            let mut got = 0;
            while got < asyncs {
                match ctx.take() {
                    Some(Ok(d)) => {
                        assert_eq!(d.ret, 0);
                        total += d.program.get(nv.unwrap()) as usize;
                        got += 1;
                    }
                    Some(Err(_)) => unreachable!(),
                    None => {
                        ctx.wait(1, None);
                    }
                }
            }
            let s = engine_stats();
            eprintln!(
                "round {round} syslets, {name}: {:?} ({asyncs} went async; engine chains {})",
                t.elapsed(),
                s.chains - before.chains
            );
        }
    }
    assert!(total > 0);
}
