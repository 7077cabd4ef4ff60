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
        // SAFETY: gettid has no preconditions.
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
            if !x.consistent {
                // Listed from a copy of each field: its counts need not agree.
                unreadable += 1;
                continue;
            }
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

/// The fiber `id` in this process's registry.
fn listed(id: u64) -> introspect::FiberInfo {
    introspect::read(0)
        .unwrap()
        .fibers
        .into_iter()
        .find(|x| x.id == id)
        .unwrap_or_else(|| panic!("fiber {id} is not listed"))
}

#[test]
fn labels_name_a_fiber_and_where_it_was_spawned() {
    setup();
    std::thread::spawn(|| {
        assert!(matches!(
            weft_fiber::set_name("not a fiber"),
            Err(weft_fiber::Error::NotAFiber)
        ));
        let main = Arc::new(convert_thread().unwrap());
        // A converted thread has no spawn site, and a name once it gives itself one.
        let home = listed(main.id());
        assert_eq!(
            (home.name, home.function, home.spawned_at),
            (None, None, None)
        );
        weft_fiber::set_name("the test thread").unwrap();
        assert_eq!(listed(main.id()).name.as_deref(), Some("the test thread"));

        let back = main.clone();
        let line = line!() + 1;
        let f = Fiber::builder().name("named fiber").spawn(move || loop {
            back.switch_to().unwrap();
        });
        let f = f.unwrap();
        let x = listed(f.id());
        assert_eq!(x.name.as_deref(), Some("named fiber"));
        let function = x.function.expect("a Rust fiber records its closure's type");
        assert!(
            function.starts_with("registry::labels_name_a_fiber_and_where_it_was_spawned::")
                && function.ends_with("{{closure}}"),
            "{function}"
        );
        let at = x
            .spawned_at
            .expect("a Rust fiber records where it was spawned");
        assert_eq!((at.file.as_str(), at.line), (file!(), line), "{at:?}");
        f.switch_to().unwrap();
        drop(f);

        // The next fiber reuses the slot: none of the old label is left.
        let back = main.clone();
        let line = line!() + 1;
        let g = Fiber::new(move || loop {
            back.switch_to().unwrap();
        })
        .unwrap();
        let y = listed(g.id());
        assert_eq!(y.name, None, "{y:?}");
        assert_eq!(y.spawned_at.map(|a| a.line), Some(line));
        // The fiber renames itself while it runs.
        let h = Fiber::new(move || {
            weft_fiber::set_name("renamed").unwrap();
        })
        .unwrap();
        h.switch_to().unwrap();
        assert_eq!(listed(h.id()).name.as_deref(), Some("renamed"));
        assert_eq!(listed(main.id()).name.as_deref(), Some("the test thread"));
    })
    .join()
    .unwrap();
}

#[test]
fn a_reader_racing_a_renaming_fiber_never_sees_a_torn_name() {
    setup();
    // Of one length: a copy torn between the two shows both letters.
    let long = "a".repeat(40);
    let short = "b".repeat(40);
    let stop = Arc::new(AtomicBool::new(false));
    let renames = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let (id_tx, id_rx) = std::sync::mpsc::channel();
    let (s2, r2, l2, sh2) = (stop.clone(), renames.clone(), long.clone(), short.clone());
    let renamer = std::thread::spawn(move || {
        let main = convert_thread().unwrap();
        weft_fiber::set_name(&sh2).unwrap();
        id_tx.send(main.id()).unwrap();
        while !s2.load(Relaxed) {
            // Pauses between the renames: a reader that overlaps one retries, and gets
            // its copy in a pause (a fiber renaming itself without pause could keep a
            // reader from ever copying its label; the reader would show no name).
            for name in [&l2, &sh2] {
                weft_fiber::set_name(name).unwrap();
                for _ in 0..20 {
                    std::hint::spin_loop();
                }
            }
            r2.fetch_add(1, Relaxed);
        }
    });
    let id = id_rx.recv().unwrap();
    let t0 = std::time::Instant::now();
    let (mut reads, mut unlabelled) = (0u64, 0u64);
    // On until both sides have had their chances; the ceiling only stops a hang.
    while (reads < 2_000 || renames.load(Relaxed) < 10_000)
        && t0.elapsed() < std::time::Duration::from_secs(60)
    {
        match listed(id).name {
            Some(name) => assert!(name == long || name == short, "torn name {name:?}"),
            // The writer kept the label busy for longer than the reader's patience (a
            // loaded machine): the reader's documented answer is no label, never a
            // torn one.
            None => unlabelled += 1,
        }
        reads += 1;
    }
    stop.store(true, Relaxed);
    renamer.join().unwrap();
    assert!(reads >= 2_000, "only {reads} reads in 60 s");
    // How many reads gave up depends on how the OS schedules the two threads (a renamer
    // preempted mid-write keeps the label busy): no ratio is asserted, only that reads
    // did see labels, so the check above was not vacuous.
    assert!(
        unlabelled < reads,
        "no read of {reads} saw the label: every one gave up"
    );
}

/// Stores `v` at `at` in a registry file being written by hand.
fn put(b: &mut [u8], at: usize, v: &[u8]) {
    b[at..at + v.len()].copy_from_slice(v);
}

/// Reads a registry written by hand for a live process: a header of `version` with
/// `slots` slots of `slot_size` bytes (all used), then what `fill` writes.
fn read_by_hand(
    version: u32,
    slot_size: usize,
    slots: usize,
    fill: impl FnOnce(&mut Vec<u8>),
) -> introspect::Snapshot {
    setup();
    // A live process to own the file.
    let mut sleeper = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let pid = sleeper.id() as i32;
    let mut file = vec![0u8; 4096 + slots * slot_size];
    put(&mut file, 0, b"WEFTREG1");
    put(&mut file, 8, &version.to_ne_bytes());
    put(&mut file, 12, &(slot_size as u32).to_ne_bytes());
    put(&mut file, 16, &pid.to_ne_bytes());
    put(&mut file, 48, &(slots as u64).to_ne_bytes()); // capacity
    put(&mut file, 56, &(slots as u64).to_ne_bytes()); // used
    put(&mut file, 64, &1e9f64.to_ne_bytes()); // ticks per second
    fill(&mut file);
    let path = introspect::registry_dir().join(format!("weft-{pid}"));
    std::fs::write(&path, &file).unwrap();
    let read = introspect::read(pid);
    let _ = std::fs::remove_file(&path);
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    read.unwrap()
}

#[test]
fn a_version_1_registry_is_still_read() {
    let snap = read_by_hand(1, 128, 1, |file| {
        let slot = 4096;
        put(file, slot + 4, &1u32.to_ne_bytes()); // ready
        put(file, slot + 8, &42u64.to_ne_bytes()); // id
        put(file, slot + 16, &3u64.to_ne_bytes()); // activations
        put(file, slot + 24, &3u64.to_ne_bytes()); // deactivations
    });
    assert_eq!(snap.fibers.len(), 1, "{snap:?}");
    let f = &snap.fibers[0];
    assert_eq!((f.id, f.state, f.activations), (42, FiberState::Ready, 3));
    assert_eq!((&f.name, &f.function, &f.spawned_at), (&None, &None, &None));
}

#[test]
fn a_slot_kept_busy_is_listed_marked_not_dropped() {
    // As a writer stopped in the middle of an update leaves them: slot 0 (fiber 42)
    // and slot 1 (fiber 43) have an odd `seq`. Fiber 42's label names it; slot 1's
    // label names another fiber (the slot is being given to a new one), so nothing
    // says whose it is. Slot 2 (fiber 45) is stable.
    let snap = read_by_hand(2, 384, 3, |file| {
        for (i, (seq, id, label_id)) in [(7u32, 42u64, 42u64), (9, 43, 44), (2, 45, 45)]
            .into_iter()
            .enumerate()
        {
            let slot = 4096 + i * 384;
            put(file, slot, &seq.to_ne_bytes());
            put(file, slot + 4, &2u32.to_ne_bytes()); // running
            put(file, slot + 8, &id.to_ne_bytes());
            put(file, slot + 16, &5u64.to_ne_bytes()); // activations
            put(file, slot + 24, &4u64.to_ne_bytes()); // deactivations
            put(file, slot + 32, &1000u64.to_ne_bytes()); // run ticks
            put(file, slot + 136, &label_id.to_ne_bytes());
            put(file, slot + 168, format!("f{id}").as_bytes()); // name
        }
    });
    let listed: Vec<(u64, bool)> = snap.fibers.iter().map(|f| (f.id, f.consistent)).collect();
    assert_eq!(listed, [(42, false), (45, true)], "{snap:?}");
    assert_eq!(snap.unreadable, 1, "{snap:?}");
    let f = &snap.fibers[0];
    assert_eq!(
        (f.state, f.activations, f.deactivations),
        (FiberState::Running, 5, 4)
    );
    // The total only: no current slice is added to a copy that is not consistent.
    assert_eq!(f.run_time, std::time::Duration::from_micros(1));
    assert_eq!(f.name.as_deref(), Some("f42"));
}

#[test]
fn every_snapshot_lists_every_fiber_of_a_switching_thread_once() {
    setup();
    // As `introspect_target spin`: a thread's fiber and two fibers switching to each
    // other without pause, so at every switch both slots are busy. Every snapshot must
    // list all three, each once (consistent or marked not), however the reads and the
    // switches interleave.
    let stop = Arc::new(AtomicBool::new(false));
    let ids = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (s2, ids2) = (stop.clone(), ids.clone());
    let switcher = std::thread::spawn(move || {
        let main = Arc::new(convert_thread().unwrap());
        let b_slot: Arc<std::sync::OnceLock<Fiber>> = Arc::new(std::sync::OnceLock::new());
        let (back, to_b) = (main.clone(), b_slot.clone());
        let a = Arc::new(
            Fiber::new(move || loop {
                if s2.load(Relaxed) {
                    back.switch_to().unwrap();
                }
                to_b.get().unwrap().switch_to().unwrap();
            })
            .unwrap(),
        );
        let to_a = a.clone();
        b_slot
            .set(
                Fiber::new(move || loop {
                    to_a.switch_to().unwrap();
                })
                .unwrap(),
            )
            .ok()
            .unwrap();
        ids2.lock()
            .unwrap()
            .extend([main.id(), a.id(), b_slot.get().unwrap().id()]);
        // Back when the reader is done.
        a.switch_to().unwrap();
    });
    while ids.lock().unwrap().is_empty() {
        std::thread::yield_now();
    }
    let ids = ids.lock().unwrap().clone();
    // WEFT_STRESS=1: many more snapshots.
    let snapshots = if std::env::var_os("WEFT_STRESS").is_some() {
        200_000
    } else {
        3_000
    };
    let mut marked = 0usize;
    for n in 0..snapshots {
        let snap = introspect::read(0).unwrap();
        for id in &ids {
            let found: Vec<_> = snap.fibers.iter().filter(|f| f.id == *id).collect();
            assert_eq!(
                found.len(),
                1,
                "snapshot {n}: fiber {id} listed {} times: {snap:?}",
                found.len()
            );
            assert_ne!(found[0].state, FiberState::Finished, "{snap:?}");
            marked += usize::from(!found[0].consistent);
        }
    }
    stop.store(true, Relaxed);
    switcher.join().unwrap();
    // Marked copies are the exception (the writer kept a slot busy for 50 ms).
    assert!(
        marked * 10 < snapshots,
        "{marked} fibers not read consistently in {snapshots} snapshots"
    );
}
