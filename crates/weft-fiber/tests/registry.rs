//! The shared-memory registry, read through `weft_fiber::introspect`: every fiber is
//! listed with exact counts, a reader racing a switching thread never sees a torn slot,
//! the file is private, removed at normal exit, and recognised as stale after a kill.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Arc;
use weft_fiber::introspect::{self, IntrospectError};
use weft_fiber::{convert_thread, Fiber, FiberState};

/// All tests in this file share one registry directory (set before any fiber exists).
fn setup() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("WEFT_REGISTRY_DIR").is_some() {
            return; // a child of these tests: use the parent's directory
        }
        let dir = std::env::temp_dir().join(format!("weft-registry-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // SAFETY (test): set once, before any thread of this test binary reads it.
        unsafe { std::env::set_var("WEFT_REGISTRY_DIR", &dir) };
    });
}

#[test]
fn this_process_is_listed_with_exact_counts() {
    setup();
    std::thread::spawn(|| {
        let main = Arc::new(convert_thread().unwrap());
        let back = main.clone();
        let f = Fiber::builder()
            .stack_size(64 * 1024)
            .spawn(move || loop {
                back.switch_to().unwrap();
            })
            .unwrap();
        for _ in 0..5 {
            f.switch_to().unwrap();
        }
        let snap = introspect::read(0).unwrap();
        let me = snap
            .fibers
            .iter()
            .find(|x| x.id == f.id())
            .expect("the fiber is listed");
        assert_eq!(me.activations, 5);
        assert_eq!(me.deactivations, 5);
        assert_eq!(me.state, FiberState::Ready);
        assert_eq!(me.running_on, None);
        assert_eq!(me.stack_size, 64 * 1024);
        assert_ne!(me.stack_base, 0);
        assert_ne!(me.entry, 0);
        let tid = unsafe { libc::gettid() };
        assert_eq!(me.creator_tid, tid);
        assert_eq!(me.last_tid, tid);
        assert!(!me.is_thread_fiber);
        let home = snap
            .fibers
            .iter()
            .find(|x| x.id == main.id())
            .expect("the thread's fiber is listed");
        assert!(home.is_thread_fiber);
        assert_eq!(home.state, FiberState::Running);
        assert_eq!(home.running_on, Some(tid));
        assert_eq!(home.activations, 5);
        let path = introspect::registry_dir().join(format!("weft-{}", std::process::id()));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "only the owner may read the registry");
        drop(f);
        let snap = introspect::read(0).unwrap();
        assert!(
            snap.fibers.iter().all(|x| x.id != me.id),
            "a deleted fiber leaves the registry"
        );
    })
    .join()
    .unwrap();
}

#[test]
fn a_reader_racing_a_switching_thread_never_sees_a_torn_slot() {
    setup();
    let stop = Arc::new(AtomicBool::new(false));
    let ids = Arc::new(std::sync::Mutex::new(Vec::new()));
    // Round trips so far (published every 1,024), for the reader's loop below.
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (s2, ids2, done2) = (stop.clone(), ids.clone(), done.clone());
    let switcher = std::thread::spawn(move || {
        let main = Arc::new(convert_thread().unwrap());
        let back = main.clone();
        let f = Fiber::new(move || loop {
            back.switch_to().unwrap();
        })
        .unwrap();
        ids2.lock().unwrap().extend([main.id(), f.id()]);
        let mut n = 0u64;
        while !s2.load(Relaxed) {
            f.switch_to().unwrap();
            n += 1;
            if n.is_multiple_of(1024) {
                done2.store(n, Relaxed);
            }
        }
        n
    });
    while ids.lock().unwrap().is_empty() {
        std::thread::yield_now();
    }
    let ids = ids.lock().unwrap().clone();
    let t0 = std::time::Instant::now();
    let (mut reads, mut last, mut unreadable) = (0u64, [0u64; 2], 0u64);
    // Race for 1.5 s at least, and on until both sides have had their chances: a loaded
    // machine (or qemu) gets there later, not less often. The ceiling only stops a hang.
    let enough = |reads: u64| done.load(Relaxed) >= 100_000 && reads >= 1_000;
    while t0.elapsed() < std::time::Duration::from_millis(1500)
        || (!enough(reads) && t0.elapsed() < std::time::Duration::from_secs(120))
    {
        let snap = introspect::read(0).unwrap();
        if snap.unreadable > 0 {
            // The writer was descheduled mid-update for longer than the reader's
            // patience (a loaded machine): the reader's documented answer is
            // "unreadable", never a torn value. Rare, or the seqlock is broken.
            unreadable += 1;
            continue;
        }
        for (k, id) in ids.iter().enumerate() {
            let x = snap.fibers.iter().find(|x| x.id == *id).expect("listed");
            match x.state {
                FiberState::Running => {
                    assert_eq!(
                        x.activations + u64::from(x.is_thread_fiber),
                        x.deactivations + 1,
                        "{x:?}"
                    );
                    assert!(x.running_on.is_some());
                }
                FiberState::Ready => assert_eq!(
                    x.activations + u64::from(x.is_thread_fiber),
                    x.deactivations,
                    "{x:?}"
                ),
                FiberState::Finished => panic!("{x:?}"),
            }
            assert!(x.activations >= last[k], "activations went backwards");
            last[k] = x.activations;
        }
        reads += 1;
    }
    stop.store(true, Relaxed);
    let switches = switcher.join().unwrap();
    assert!(reads >= 1_000, "only {reads} consistent reads in 120 s");
    assert!(
        unreadable * 20 <= reads,
        "{unreadable} snapshots with an unreadable slot for {reads} consistent ones"
    );
    assert!(
        switches >= 100_000,
        "only {switches} round trips in 120 s of reading"
    );
}

#[test]
fn the_registry_is_removed_at_exit_and_stale_after_a_kill() {
    setup();
    if std::env::var_os("WEFT_REGISTRY_CHILD").is_some() {
        let _main = convert_thread().unwrap();
        if std::env::var_os("WEFT_REGISTRY_CHILD_HANG").is_some() {
            println!("ready");
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
        return; // normal exit: the registry must go
    }
    let args = [
        "the_registry_is_removed_at_exit_and_stale_after_a_kill",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ];
    let dir = introspect::registry_dir();
    let child = common::self_command()
        .args(args)
        .env("WEFT_REGISTRY_CHILD", "1")
        .env("WEFT_REGISTRY_DIR", &dir)
        .status()
        .unwrap();
    assert!(child.success());
    let leftovers: Vec<_> = introspect::list()
        .unwrap()
        .into_iter()
        .filter(|p| p.pid != std::process::id() as i32)
        .collect();
    assert!(
        leftovers.is_empty(),
        "a normal exit removes the registry: {leftovers:?}"
    );

    let mut child = common::self_command()
        .args(args)
        .env("WEFT_REGISTRY_CHILD", "1")
        .env("WEFT_REGISTRY_CHILD_HANG", "1")
        .env("WEFT_REGISTRY_DIR", &dir)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("ready") {
        line.clear();
        assert!(
            std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0,
            "child ended early"
        );
    }
    assert!(introspect::read(pid).is_ok());
    assert!(introspect::list()
        .unwrap()
        .iter()
        .any(|p| p.pid == pid && p.alive));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        introspect::list()
            .unwrap()
            .iter()
            .any(|p| p.pid == pid && !p.alive),
        "seen as stale"
    );
    assert!(matches!(
        introspect::read(pid),
        Err(IntrospectError::Stale { .. })
    ));
    assert_eq!(introspect::clean_stale().unwrap(), vec![pid]);
    assert!(matches!(
        introspect::read(pid),
        Err(IntrospectError::NoSuchProcess { .. })
    ));
}
