//! `weft ps` and `weft top` against a live C program (`tests/c/introspect_target.c`,
//! compiled here against `include/` and the libweft.so cargo built), and the registry
//! reader (`weft_fiber::introspect`) against a target switching as fast as it can.
//!
//! Every test uses its own registry directory (`WEFT_REGISTRY_DIR`), so it sees only
//! its own targets, never other processes' registries nor another test's.
//!
//! libweft is the one in `<target>/<profile>/`, next to the `weft` binary; if it is
//! missing or older than a source file of weft-fiber or weft-capi, the harness runs
//! `cargo build -p libweft` for the same profile first (as `weft-capi/tests/c_api.rs`
//! does).

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{note, skip, text, weft, Target, WEFT};

// ---- libweft and the target program ---------------------------------------------

/// A registry directory of one test, removed at the end.
struct RegDir(PathBuf);

impl RegDir {
    fn new(name: &str) -> RegDir {
        let d = std::env::temp_dir().join(format!("weft-ps-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        // Searchable by everyone: the security test reads it as another user.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        RegDir(d)
    }
    fn registry(&self, pid: i32) -> PathBuf {
        self.0.join(format!("weft-{pid}"))
    }
}

impl Drop for RegDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn json_lines(o: &Output) -> Vec<Value> {
    assert!(o.status.success(), "weft failed\n{}", text(o));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

// ---- (a) every field ---------------------------------------------------------------

#[test]
fn ps_json_shows_every_field_exactly() {
    const K: usize = 8;
    let reg = RegDir::new("fields");
    let t = Target::start(&reg.0, &[&K.to_string()]);
    let pid = t.pid();
    let tid = t.tid();
    let ids = t.ready_ids();
    assert_eq!(ids.len(), K);
    let main_id: u64 = t.value("main").parse().unwrap();
    let (alpha, beta) = (t.addr("alpha"), t.addr("beta"));

    let o = weft(&reg.0, &["ps", &pid.to_string(), "--json"]);
    let rows = json_lines(&o);
    assert_eq!(
        rows.len(),
        K + 1,
        "K fibers and the main thread\n{}",
        text(&o)
    );
    let by_id: HashMap<u64, &Value> = rows
        .iter()
        .map(|r| (r["id"].as_u64().unwrap(), r))
        .collect();

    // The converted main thread: running on the main thread, entered once per switch
    // back from a fiber, 3 failed switches from the contender thread. Its conversion is
    // not an activation, so running it has as many activations as deactivations.
    let m = by_id[&main_id];
    let all = format!("{rows:#?}");
    assert_eq!(m["pid"], pid, "{all}");
    assert_eq!(m["state"], "running", "{all}");
    assert_eq!(m["is_thread_fiber"], true, "{all}");
    assert_eq!(m["running_on"], tid, "{all}");
    assert_eq!(m["entry"], "0x0", "{all}");
    assert_eq!(m["entry_symbol"], Value::Null, "{all}");
    assert_eq!(m["creator_tid"], tid, "{all}");
    assert_eq!(m["last_tid"], tid, "{all}");
    assert_eq!(m["activations"], (K * (K + 1) / 2) as u64, "{all}");
    assert_eq!(m["deactivations"], (K * (K + 1) / 2) as u64, "{all}");
    assert_eq!(m["failed_activations"], 3, "{all}");
    assert_eq!(m["stack_size"], 0, "{all}");
    assert_eq!(m["stack_high_water"], Value::Null, "{all}");
    assert!(m["run_time_ns"].as_u64().unwrap() > 0, "{all}");

    for (i, id) in ids.iter().enumerate() {
        let f = by_id
            .get(id)
            .unwrap_or_else(|| panic!("fiber {i} (id {id}) missing\n{all}"));
        let what = format!("fiber {i} (id {id}): {f:#}");
        assert_eq!(f["state"], "ready", "{what}");
        assert_eq!(f["is_thread_fiber"], false, "{what}");
        assert_eq!(f["running_on"], Value::Null, "{what}");
        let (entry, name) = if i % 2 == 0 {
            (alpha, "weft_target_alpha")
        } else {
            (beta, "weft_target_beta")
        };
        assert_eq!(f["entry"], format!("{entry:#x}"), "{what}");
        assert_eq!(f["entry_symbol"], name, "{what}");
        let obj = f["entry_object"].as_str().unwrap();
        assert!(obj.contains("introspect_target"), "{what}");
        assert_eq!(f["creator_tid"], tid, "{what}");
        assert_eq!(f["last_tid"], tid, "{what}");
        assert_eq!(f["activations"], (i + 1) as u64, "{what}");
        assert_eq!(f["deactivations"], (i + 1) as u64, "{what}");
        assert_eq!(f["failed_activations"], 0, "{what}");
        let expected_stack = if i % 2 == 0 { 1 << 20 } else { 256 * 1024 };
        assert_eq!(f["stack_size"], expected_stack, "{what}");
        assert_eq!(
            f["stack_size"], t.stacks[id],
            "{what}: the size the C API reports"
        );
        let base = u64::from_str_radix(
            f["stack_base"].as_str().unwrap().trim_start_matches("0x"),
            16,
        )
        .unwrap();
        assert!(base != 0 && base.is_multiple_of(4096), "{what}");
        let hw = f["stack_high_water"]
            .as_u64()
            .unwrap_or_else(|| panic!("no high water: {what}"));
        assert!(hw > 0 && hw <= expected_stack, "{what}");
        if i % 2 == 1 {
            // weft_target_beta touches a 64 KiB local array.
            assert!(hw >= 64 * 1024, "{what}");
        } else {
            assert!(hw < 64 * 1024, "{what}");
        }
        // Run time is wall time while the fiber is current: however busy the machine,
        // fiber 0 shows its 50 ms burn (40: room for converting clock ticks to time),
        // and no fiber more than the wall time the target spent switching to it (with
        // 1% and 1 ms for the conversion): none is charged another's time.
        let run = f["run_time_ns"].as_u64().unwrap();
        let wall = t.walls[id];
        assert!(
            run > 0 && run <= wall + wall / 100 + 1_000_000,
            "run time beyond the {wall} ns spent switching to it: {what}"
        );
        if i == 0 {
            assert!(run >= 40_000_000, "fiber 0 burnt 50 ms: {what}");
        }
    }

    // The table shows the same.
    let o = weft(&reg.0, &["ps", &pid.to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.lines().next().unwrap().contains("ENTRY"), "{table}");
    assert_eq!(table.lines().count(), K + 2, "{table}");
    assert!(
        table.contains("weft_target_alpha") && table.contains("weft_target_beta"),
        "{table}"
    );
    assert!(
        table.contains("(thread)") && table.contains("running"),
        "{table}"
    );
    assert!(table.contains(" ms"), "run time of fiber 0 in ms: {table}");

    // Exits normally: the registry goes away.
    let reg_file = reg.registry(pid);
    assert!(reg_file.exists());
    assert!(t.finish().success());
    assert!(!reg_file.exists(), "registry not removed at normal exit");
}

/// A fiber whose record its process keeps busy (as a writer stopped in the middle of a
/// switch leaves it: an odd sequence word) is listed from a copy of each field, and
/// marked: `"inconsistent": true` in `--json`, its state with a `?` in the table; a
/// stable one is `"inconsistent": false`. The registry is written by hand for a live
/// process (`sleep`), in the layout docs/introspection.md gives.
#[test]
fn ps_marks_a_fiber_not_read_consistently() {
    let reg = RegDir::new("inconsistent");
    let mut sleeper = Command::new("sleep").arg("60").spawn().unwrap();
    let pid = sleeper.id() as i32;
    let (slot_size, slots) = (384, 2);
    let mut file = vec![0u8; 4096 + slots * slot_size];
    let mut put = |at: usize, v: &[u8]| file[at..at + v.len()].copy_from_slice(v);
    put(0, b"WEFTREG1");
    put(8, &2u32.to_ne_bytes()); // version
    put(12, &(slot_size as u32).to_ne_bytes());
    put(16, &pid.to_ne_bytes());
    put(48, &(slots as u64).to_ne_bytes()); // capacity
    put(56, &(slots as u64).to_ne_bytes()); // used
    put(64, &1e9f64.to_ne_bytes()); // ticks per second
                                    // Slot 0: fiber 42, kept busy (odd seq); slot 1: fiber 45, stable. Both running,
                                    // each label naming its fiber.
    for (i, (seq, id)) in [(7u32, 42u64), (2, 45)].into_iter().enumerate() {
        let slot = 4096 + i * slot_size;
        put(slot, &seq.to_ne_bytes());
        put(slot + 4, &2u32.to_ne_bytes()); // running
        put(slot + 8, &id.to_ne_bytes());
        put(slot + 16, &5u64.to_ne_bytes()); // activations
        put(slot + 24, &4u64.to_ne_bytes()); // deactivations
        put(slot + 136, &id.to_ne_bytes()); // the label's fiber
        put(slot + 168, format!("f{id}").as_bytes()); // name
    }
    std::fs::write(reg.registry(pid), &file).unwrap();
    let json = weft(&reg.0, &["ps", &pid.to_string(), "--json"]);
    let table = weft(&reg.0, &["ps", &pid.to_string()]);
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    let rows = json_lines(&json);
    let listed: Vec<(u64, &str, bool)> = rows
        .iter()
        .map(|r| {
            let id = r["id"].as_u64().unwrap();
            (
                id,
                r["name"].as_str().unwrap(),
                r["inconsistent"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(listed, [(42, "f42", true), (45, "f45", false)], "{rows:#?}");
    assert_eq!(rows[0]["activations"], 5, "{rows:#?}");
    assert!(table.status.success(), "{}", text(&table));
    let out = String::from_utf8_lossy(&table.stdout);
    let states: Vec<(&str, &str)> = out
        .lines()
        .skip(1)
        .map(|l| {
            let mut w = l.split_whitespace();
            (w.next().unwrap(), w.next().unwrap())
        })
        .collect();
    assert_eq!(states, [("42", "running?"), ("45", "running")], "{out}");
}

// ---- (b) the list of processes -----------------------------------------------------

#[test]
fn ps_lists_processes_using_weft() {
    let reg = RegDir::new("list");
    let t1 = Target::start(&reg.0, &["3"]);
    let t2 = Target::start(&reg.0, &["5"]);

    let o = weft(&reg.0, &["ps", "--json"]);
    let rows = json_lines(&o);
    assert_eq!(rows.len(), 2, "{}", text(&o));
    for (t, k) in [(&t1, 3), (&t2, 5)] {
        let r = rows
            .iter()
            .find(|r| r["pid"] == t.pid())
            .unwrap_or_else(|| panic!("pid {} not listed\n{}", t.pid(), text(&o)));
        assert_eq!(r["fibers"], k + 1, "{r}");
        assert_eq!(r["running"], 1, "{r}");
        assert_eq!(
            r["command"], "introspect_targ",
            "comm is cut to 15 bytes: {r}"
        );
        // SAFETY: getuid has no preconditions.
        assert_eq!(r["uid"], unsafe { libc::getuid() }, "{r}");
    }

    let o = weft(&reg.0, &["ps"]);
    assert!(o.status.success(), "{}", text(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.starts_with("    PID"), "{table}");
    for t in [&t1, &t2] {
        assert!(
            table
                .lines()
                .any(|l| l.split_whitespace().next() == Some(&t.pid().to_string())),
            "{table}"
        );
    }

    // Nothing: says so on stderr, exit 0.
    drop((t1, t2));
    let empty = RegDir::new("list-empty");
    let o = weft(&empty.0, &["ps"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no process using weft"),
        "{}",
        text(&o)
    );
}

#[test]
fn ps_errors_are_clear() {
    let reg = RegDir::new("errors");
    // A pid that does not exist.
    let o = weft(&reg.0, &["ps", "2147483000"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no process 2147483000"),
        "{}",
        text(&o)
    );

    // A process that does not use weft.
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let o = weft(&reg.0, &["ps", &sleeper.id().to_string()]);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("does not use weft"),
        "{}",
        text(&o)
    );
}

// ---- (c) stale registries ------------------------------------------------------------

#[test]
fn stale_registry_of_a_killed_process_is_reported_and_removed() {
    let reg = RegDir::new("stale");
    let mut t = Target::start(&reg.0, &["2"]);
    let pid = t.pid();
    let file = reg.registry(pid);
    assert!(file.exists());
    t.kill(); // SIGKILL: no chance to remove the registry
    assert!(
        file.exists(),
        "a SIGKILLed process cannot remove its registry"
    );

    // The pid's own view says it is gone.
    let o = weft(&reg.0, &["ps", &pid.to_string()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("stale") || err.contains("no process"),
        "{}",
        text(&o)
    );

    // Listing does not list it, says so in one line, and changes nothing.
    for args in [&["ps", "--json"][..], &["ps"][..]] {
        let o = weft(&reg.0, args);
        assert!(o.status.success(), "{}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        let stale_lines = err.lines().filter(|l| l.contains(" stale registr")).count();
        assert_eq!(stale_lines, 1, "{}", text(&o));
        assert!(
            err.contains("1 stale registry") && err.contains("weft ps --prune"),
            "{}",
            text(&o)
        );
        assert!(!String::from_utf8_lossy(&o.stdout).contains(&pid.to_string()));
        assert!(file.exists(), "a listing removed a registry");
    }
    assert!(json_lines(&weft(&reg.0, &["ps", "--json"])).is_empty());

    // --prune removes it, and says how many it removed.
    let o = weft(&reg.0, &["ps", "--prune", "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("removed 1 stale registry"), "{}", text(&o));
    assert!(!err.contains("weft ps --prune removes"), "{}", text(&o));
    assert!(!file.exists(), "stale registry not removed by --prune");

    // A weft process that starts removes the stale registries its user left.
    let mut dead = Target::start(&reg.0, &["1"]);
    let dead_pid = dead.pid();
    dead.kill();
    assert!(reg.registry(dead_pid).exists());
    let mut live = Target::start(&reg.0, &["1"]);
    assert!(
        !reg.registry(dead_pid).exists(),
        "a starting weft process left its user's stale registry"
    );
    assert!(reg.registry(live.pid()).exists());
    let o = weft(&reg.0, &["ps"]);
    assert!(o.stderr.is_empty(), "{}", text(&o));
    live.kill();
}

// ---- (d) no torn record while the target switches --------------------------------------

#[test]
fn reader_never_sees_a_torn_record() {
    use weft_fiber::introspect::{self, FiberInfo};
    use weft_fiber::FiberState;

    let reg = RegDir::new("torn");
    // This test is the only one reading the registry in-process: the library finds it
    // through this process's environment.
    std::env::set_var("WEFT_REGISTRY_DIR", &reg.0);
    let t = Target::start(&reg.0, &["spin"]);
    let pid = t.pid();
    let tid = t.tid();
    let spinning = t.ready_ids();

    let check = |f: &FiberInfo, what: &str| {
        // A converted thread's conversion is not counted as an activation.
        let activations = f.activations + u64::from(f.is_thread_fiber);
        match f.state {
            FiberState::Running => {
                assert_eq!(f.running_on, Some(f.last_tid), "{what}");
                assert_eq!(activations, f.deactivations + 1, "{what}");
            }
            FiberState::Ready => {
                assert_eq!(f.running_on, None, "{what}");
                assert_eq!(activations, f.deactivations, "{what}");
            }
            FiberState::Finished => panic!("nothing finishes here: {what}"),
        }
        assert_eq!(f.creator_tid, tid, "{what}");
        if f.activations > 0 {
            assert_eq!(f.last_tid, tid, "{what}");
        }
    };

    let mut last: HashMap<u64, FiberInfo> = HashMap::new();
    let mut snapshots = 0u64;
    let mut unreadable = 0u64;
    let mut running_seen = HashMap::<u64, u64>::new();
    let switches = |last: &HashMap<u64, FiberInfo>| -> u64 {
        spinning
            .iter()
            .map(|id| last.get(id).map_or(0, |f| f.activations))
            .sum()
    };
    // Read until the race has had its chances: 1,000,000 switches by the target, each
    // spinning fiber seen running, 1,000 snapshots. A busy machine gets there later; the
    // ceiling only stops a hang.
    let start = Instant::now();
    while switches(&last) < 1_000_000
        || snapshots < 1_000
        || spinning
            .iter()
            .any(|id| running_seen.get(id).copied().unwrap_or(0) == 0)
    {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "after 120 s: {snapshots} snapshots, {} switches, running seen {running_seen:?}",
            switches(&last)
        );
        let s = introspect::read(pid).unwrap_or_else(|e| panic!("read({pid}): {e}"));
        // Every fiber is listed, once. A slot its writer kept busy for the whole read
        // patience (50 ms: descheduled mid-update on an overloaded machine) is listed
        // marked not consistent, never as a consistent torn copy.
        let mut ids: Vec<u64> = s.fibers.iter().map(|f| f.id).collect();
        ids.sort();
        let mut all: Vec<u64> = vec![t.value("main").parse().unwrap()];
        all.extend(&spinning);
        all.sort();
        assert_eq!(ids, all, "main + 2 spinning fibers: {:?}", s.fibers);
        assert_eq!(s.unreadable, 0, "{:?}", s.fibers);
        unreadable += s.fibers.iter().filter(|f| !f.consistent).count() as u64;
        for f in &s.fibers {
            let what = format!("snapshot {snapshots}: {f:?}");
            if !f.consistent {
                continue;
            }
            check(f, &what);
            if let Some(p) = last.get(&f.id) {
                assert!(
                    f.activations >= p.activations,
                    "activations went back: {p:?} -> {what}"
                );
                assert!(
                    f.deactivations >= p.deactivations,
                    "deactivations went back: {p:?} -> {what}"
                );
                assert!(
                    f.run_time >= p.run_time,
                    "run time went back: {p:?} -> {what}"
                );
            }
            if f.state == FiberState::Running {
                *running_seen.entry(f.id).or_default() += 1;
            }
            last.insert(f.id, f.clone());
        }
        snapshots += 1;
    }
    // A fiber is listed not consistent only when its writer kept its slot busy for the
    // reader's whole patience (50 ms and 4,096 tries), rare even when the OS
    // deschedules the writer; a writer that left the slot odd would make most so.
    assert!(
        unreadable * 10 < snapshots,
        "{unreadable} fibers not read consistently in {snapshots} snapshots: the writer \
         is hardly ever out of its seqlock for 50 ms"
    );
    // Stops cleanly when asked.
    assert!(t.finish().success());
}

// ---- (e) 100,000 fibers ------------------------------------------------------------------

fn max_map_count() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Every one of 100,000 fibers is listed, as JSON and as a table. (How fast is for
/// `weft bench`, not for a test.)
#[test]
fn ps_lists_100k_fibers() {
    let mut n: u64 = 100_000;
    // Every fiber stack is two mappings (guard + stack): the kernel's limit on mappings
    // per process bounds the number of fibers.
    if let Some(max) = max_map_count() {
        let fits = max.saturating_sub(4_000) / 2;
        if fits < n {
            note(&format!(
                "vm.max_map_count is {max}: each fiber stack takes 2 mappings, so one \
                 process can hold about {fits} fibers; testing with {fits} instead of {n} \
                 (sysctl -w vm.max_map_count=262144 allows the full test)"
            ));
            n = fits;
        }
    }
    let reg = RegDir::new("many");
    let t = Target::start(&reg.0, &["many", &n.to_string()]);
    let pid = t.pid().to_string();

    let o = weft(&reg.0, &["ps", &pid, "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len() as u64, n + 1, "n fibers and the main thread");
    // Spot checks: the first and last fibers are complete records.
    for l in [lines[1], lines[lines.len() - 1]] {
        let v: Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["state"], "ready", "{v}");
        assert_eq!(v["stack_size"], 16 * 1024, "{v}");
        let sym = v["entry_symbol"].as_str().unwrap();
        assert!(sym == "weft_target_alpha" || sym == "many_entry", "{v}");
    }
    let table = weft(&reg.0, &["ps", &pid]);
    assert!(table.status.success(), "{}", text(&table));
    let table = String::from_utf8_lossy(&table.stdout);
    assert_eq!(
        table.lines().count() as u64,
        n + 2,
        "a header, n fibers and the main thread"
    );
}

// ---- (f) another user may not read the registry ---------------------------------------

#[test]
fn another_user_cannot_read_the_registry() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip("needs root (to run weft ps as another user)");
        return;
    }
    let Ok(setpriv) = which("setpriv") else {
        skip("setpriv (util-linux) is not installed");
        return;
    };
    let reg = RegDir::new("security");
    let t = Target::start(&reg.0, &["2"]);
    let pid = t.pid();
    let file = reg.registry(pid);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "registry mode {mode:o}");

    // A copy of weft that user 65534 can run (the build tree may not be reachable).
    let bin = reg.0.join("weft");
    std::fs::copy(WEFT, &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();

    let o = Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(["ps", &pid.to_string()])
        .env("WEFT_REGISTRY_DIR", &reg.0)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not allowed"), "{}", text(&o));
    assert!(err.contains("run as that user or as root"), "{}", text(&o));
    assert!(
        err.contains("root"),
        "says whose registry it is: {}",
        text(&o)
    );
    assert!(o.stdout.is_empty(), "{}", text(&o));

    // The process list shows it, with "?" for what cannot be read.
    let o = Command::new(which("setpriv").unwrap())
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(["ps", "--json"])
        .env("WEFT_REGISTRY_DIR", &reg.0)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let rows = json_lines(&o);
    assert_eq!(rows.len(), 1, "{}", text(&o));
    assert_eq!(rows[0]["pid"], pid);
    assert_eq!(rows[0]["fibers"], Value::Null);
    assert_eq!(rows[0]["user"], "root");
}

fn which(name: &str) -> Result<PathBuf, ()> {
    let path = std::env::var_os("PATH").ok_or(())?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or(())
}

// ---- names and spawn sites -------------------------------------------------------

#[test]
fn ps_shows_green_thread_names_and_entries() {
    let reg = RegDir::new("names");
    let t = Target::start(&reg.0, &["green"]);
    let pid = t.pid();
    let ids = t.ready_ids();
    assert_eq!(ids.len(), 4);
    let main_id: u64 = t.value("main").parse().unwrap();
    let long = t.lines["long"].join(" ");
    let (green, renamer) = (t.addr("greenfn"), t.addr("renamerfn"));

    // The workers' fibers get their threads' names when each worker starts: a loaded
    // machine may not have started one yet, so the listing is taken once both show.
    let workers_named = |rows: &[Value]| {
        ["weft-worker-0", "weft-worker-1"].iter().all(|w| {
            rows.iter()
                .any(|r| r["name"] == *w && r["is_thread_fiber"] == true)
        })
    };
    let t0 = std::time::Instant::now();
    let rows = loop {
        let rows = json_lines(&weft(&reg.0, &["ps", &pid.to_string(), "--json"]));
        if workers_named(&rows) || t0.elapsed() > std::time::Duration::from_secs(60) {
            break rows;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let all = format!("{rows:#?}");
    let by_id: HashMap<u64, &Value> = rows
        .iter()
        .map(|r| (r["id"].as_u64().unwrap(), r))
        .collect();
    let row = |id: &u64| {
        *by_id
            .get(id)
            .unwrap_or_else(|| panic!("fiber {id} missing\n{all}"))
    };
    // A C green thread: its entry point is its C function, by address and symbol; it
    // has no Rust spawn site or function.
    for (i, id) in ids.iter().enumerate() {
        let f = row(id);
        let (addr, symbol) = if i == 3 {
            (renamer, "weft_target_renamer")
        } else {
            (green, "weft_target_green")
        };
        assert_eq!(f["entry"], format!("{addr:#x}"), "{f:#}");
        assert_eq!(f["entry_symbol"], symbol, "{f:#}");
        assert_eq!(f["function"], Value::Null, "{f:#}");
        assert_eq!(f["spawn_file"], Value::Null, "{f:#}");
        assert_eq!(f["spawn_line"], Value::Null, "{f:#}");
    }
    assert_eq!(row(&ids[0])["name"], "green-alpha", "{all}");
    // Cut at 48 bytes, marked.
    let cut = row(&ids[1])["name"].as_str().unwrap().to_string();
    assert!(
        cut.len() <= 48 && cut.ends_with("...") && long.starts_with(&cut[..cut.len() - 3]),
        "{cut:?} is not {long:?} cut to 48 bytes"
    );
    assert_eq!(row(&ids[2])["name"], Value::Null, "{all}");
    assert_eq!(row(&ids[3])["name"], "renamed-by-itself", "{all}");
    // The main thread's fiber named itself; the workers' fibers have their threads' names.
    assert_eq!(row(&main_id)["name"], "target-main", "{all}");
    for w in ["weft-worker-0", "weft-worker-1"] {
        assert!(
            rows.iter()
                .any(|r| r["name"] == w && r["is_thread_fiber"] == true),
            "no worker fiber named {w}\n{all}"
        );
    }

    // The table: NAME and SPAWNED-AT before ENTRY.
    let o = weft(&reg.0, &["ps", &pid.to_string()]);
    assert!(o.status.success(), "{}", text(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    let head = table.lines().next().unwrap();
    assert!(
        head.contains("NAME") && head.ends_with("SPAWNED-AT  ENTRY"),
        "{table}"
    );
    let line = |id: u64| {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&id.to_string()))
            .unwrap_or_else(|| panic!("no row for {id}\n{table}"))
            .to_string()
    };
    assert!(line(ids[0]).contains("green-alpha"), "{table}");
    assert!(line(ids[0]).ends_with("weft_target_green"), "{table}");
    assert!(line(ids[3]).contains("renamed-by-itself"), "{table}");

    // weft top shows the names too.
    let o = weft(&reg.0, &["top", &pid.to_string(), "--iterations", "1"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for n in [
        "NAME",
        "SPAWNED-AT",
        "green-alpha",
        "renamed-by-itself",
        "target-main",
    ] {
        assert!(out.contains(n), "{n} missing from weft top\n{out}");
    }
    assert!(t.finish().success());
}

/// A `weft kv serve` on a Unix socket, its registry in `reg`; killed when dropped.
struct KvServer {
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for KvServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn ps_names_the_threads_of_weft_kv_serve() {
    use std::io::{Read, Write};
    let reg = RegDir::new("kv");
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kv.sock");
    let child = Command::new(WEFT)
        .args(["kv", "serve", "--port", "0", "--workers", "2", "--dir"])
        .arg(dir.path().join("data"))
        .arg("--socket")
        .arg(&socket)
        .env("WEFT_REGISTRY_DIR", &reg.0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start weft kv serve");
    let pid = child.id().to_string();
    let _server = KvServer { child, _dir: dir };
    // A client, served by a connection thread once it has had an answer.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut client = loop {
        if let Ok(c) = std::os::unix::net::UnixStream::connect(&socket) {
            break c;
        }
        assert!(Instant::now() < deadline, "weft kv serve did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    client.write_all(b"PING\r\n").unwrap();
    let mut pong = [0u8; 7];
    client.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"+PONG\r\n");

    let o = weft(&reg.0, &["ps", &pid, "--json"]);
    let rows = json_lines(&o);
    let all = format!("{rows:#?}");
    let names: Vec<&str> = rows.iter().filter_map(|r| r["name"].as_str()).collect();
    for n in [
        "kv-shard 0",
        "kv-shard 1",
        "kv-flusher 0",
        "kv-flusher 1",
        "kv-housekeeping 0",
        "kv-listen unix",
        "kv-main",
        "weft-kv-0",
    ] {
        assert!(
            names.contains(&n),
            "no thread named {n:?}: {names:?}\n{all}"
        );
    }
    assert!(
        names.iter().any(|n| n.starts_with("kv-conn ")),
        "no connection thread: {names:?}"
    );
    // Every green thread says where in weft-kv it was spawned and what it runs.
    for r in rows.iter().filter(|r| r["is_thread_fiber"] == false) {
        let file = r["spawn_file"].as_str().unwrap_or_default();
        assert!(file.starts_with("crates/weft-kv/src/"), "{r:#}");
        assert!(r["spawn_line"].as_u64().unwrap_or(0) > 0, "{r:#}");
        let function = r["function"].as_str().unwrap_or_default();
        assert!(function.starts_with("weft_kv::"), "{r:#}");
    }
    // The table's ENTRY column names functions, not the fiber core's trampoline.
    let o = weft(&reg.0, &["ps", &pid]);
    assert!(o.status.success(), "{}", text(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(!table.contains("RawFiber"), "{table}");
    assert!(table.contains("weft_kv::server::"), "{table}");
}

// ---- weft top ----------------------------------------------------------------------------

#[test]
fn top_batch_mode_shows_rates() {
    let reg = RegDir::new("top");
    let t = Target::start(&reg.0, &["spin"]);
    let pid = t.pid().to_string();
    let ids = t.ready_ids();
    let o = weft(
        &reg.0,
        &[
            "top",
            &pid,
            "--iterations",
            "2",
            "--interval",
            "0.2",
            "--sort",
            "activations",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !out.contains('\x1b'),
        "batch mode does not clear the screen: {out:?}"
    );
    let headers: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("weft top - pid"))
        .collect();
    assert_eq!(headers.len(), 2, "{out}");
    assert!(
        headers[0].contains(&format!("pid {pid} (introspect_targ)")),
        "{out}"
    );
    assert!(headers[0].contains("3 fibers"), "{out}");
    // The second sample has rates (the target switched between the samples; how fast
    // is for `weft bench`), and the two spinning fibers first when sorted by
    // activations.
    let second = out.split("weft top - pid").nth(2).unwrap();
    let rate: f64 = second
        .lines()
        .find_map(|l| l.strip_prefix("switches/s: "))
        .and_then(|r| r.split_whitespace().next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no switches/s in {second}"));
    assert!(rate > 0.0, "switches/s {rate}: {out}");
    // The first frame has no rates yet: "-", not 0.
    let first = out.split("weft top - pid").nth(1).unwrap();
    assert!(first.contains("switches/s: -"), "{first}");
    for row in frame_rows(first) {
        assert_eq!(
            (row[4], row[7]),
            ("-", "-"),
            "ACT/S and %TIME of {row:?}\n{out}"
        );
    }
    for row in frame_rows(second) {
        assert!(
            row[4].parse::<f64>().is_ok() && row[7].parse::<f64>().is_ok(),
            "rates of {row:?}\n{out}"
        );
    }
    let first_rows: Vec<u64> = second
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("ID"))
        .skip(1)
        .take(2)
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    let mut sorted = first_rows.clone();
    sorted.sort();
    let mut expected = ids.clone();
    expected.sort();
    assert_eq!(sorted, expected, "{out}");
    drop(t);

    // A pid without weft: the error of ps, exit 1.
    let o = weft(&reg.0, &["top", "2147483000", "--iterations", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
}

/// The fiber rows of one frame of `weft top`, split at whitespace (RUN-TIME takes two
/// fields: ACT/S is field 4, %TIME field 7).
fn frame_rows(frame: &str) -> Vec<Vec<&str>> {
    frame
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("ID"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect())
        .collect()
}

#[test]
fn top_into_a_file_prints_plain_frames() {
    use std::io::BufRead;
    let reg = RegDir::new("top-file");
    let t = Target::start(&reg.0, &["spin"]);
    // Interactive mode (no --iterations) with stdout a pipe, as `weft top PID > file`.
    let mut top = Command::new(WEFT)
        .args(["top", &t.pid().to_string(), "--interval", "0.1"])
        .env("WEFT_REGISTRY_DIR", &reg.0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run weft top");
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = top.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        for l in std::io::BufReader::new(stdout).lines() {
            let Ok(l) = l else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut lines: Vec<String> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while lines
        .iter()
        .filter(|l| l.contains("weft top - pid"))
        .count()
        < 3
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => lines.push(l),
            Err(_) => panic!("fewer than 3 frames in 60 s: {lines:#?}"),
        }
    }
    // SAFETY: signalling our own child by its pid.
    unsafe { libc::kill(top.id() as i32, libc::SIGTERM) };
    let status = top.wait().unwrap();
    reader.join().unwrap();
    lines.extend(rx.try_iter());
    let out = lines.join("\n");
    assert!(status.success(), "weft top after SIGTERM: {status}\n{out}");
    assert!(!out.contains('\x1b'), "escape codes in a file: {out:?}");
    // Each frame starts with its header; every frame but the first after a blank line.
    let headers: Vec<usize> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("weft top - pid"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(headers[0], 0, "{out}");
    for &h in &headers[1..] {
        assert_eq!(
            lines[h - 1],
            "",
            "no blank line before frame at line {h}\n{out}"
        );
    }
    // Every fiber is listed in every frame; rates are "-" in the first one only.
    let frames: Vec<&str> = out.split("weft top - pid").skip(1).collect();
    for (i, frame) in frames.iter().take(3).enumerate() {
        let rows = frame_rows(frame);
        assert_eq!(rows.len(), 3, "frame {i}: {frame}");
        for row in rows {
            let known = row[4].parse::<f64>().is_ok() && row[7].parse::<f64>().is_ok();
            let dash = row[4] == "-" && row[7] == "-";
            assert!(
                if i == 0 { dash } else { known },
                "frame {i}: {row:?}\n{out}"
            );
        }
    }
}
