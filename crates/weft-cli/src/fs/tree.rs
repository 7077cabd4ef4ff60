//! The tree `weft fs mount` serves: `<pid>/fibers/<id>`, read from the registry.
//!
//! ```text
//! /                       one directory per live process using weft (its pid)
//! /<pid>/                 one directory, "fibers"
//! /<pid>/fibers/          one file per fiber, named by its id
//! /<pid>/fibers/<id>      the fiber's fields, one per line (see [`render`])
//! ```
//!
//! Nothing is kept between requests except what makes one open file or one
//! open directory consistent:
//!
//! * `lookup` and `getattr` of a process ask the registry
//!   ([`weft_fiber::introspect::list`]) whether it is alive; of a fiber, they
//!   read the process's registry (through a snapshot at most [`SNAPSHOT_MAX_AGE`]
//!   old, so that `ls -l` of 100,000 fibers does not read the registry 100,000
//!   times).
//! * `open` of a fiber file reads the registry afresh and renders the text once:
//!   every `read` of that open file sees the same text (direct I/O, so the
//!   page cache never serves an older one).
//! * `opendir` takes the listing once; `readdir` pages through it.
//!
//! Inode numbers come from a table ([`Inodes`]) that maps each path ever looked
//! up to a number for the life of the mount, so a path keeps its inode.
//!
//! Entry points are resolved to symbols with the helpers of `weft ps`
//! ([`crate::introspect::symbols::Resolver`]), cached per process (keyed by its
//! start time, so a reused pid gets a new resolver) for [`RESOLVER_MAX_AGE`]
//! (libraries loaded later are then picked up).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, Request,
};
use weft_fiber::introspect::{self, FiberInfo, IntrospectError, Snapshot};
use weft_fiber::FiberState;

use crate::introspect::symbols::Resolver;

/// How long the kernel may cache names and attributes. Short: the tree
/// changes as processes and fibers come and go.
const TTL: Duration = Duration::from_millis(100);
/// How old a snapshot may be for `lookup`/`getattr` (never for `open`).
const SNAPSHOT_MAX_AGE: Duration = Duration::from_millis(50);
/// How long a symbol resolver is reused for one process.
const RESOLVER_MAX_AGE: Duration = Duration::from_secs(5);
/// How long a resolver is used without checking that its pid was not reused.
const RESOLVER_TRUSTED: Duration = Duration::from_millis(500);

/// What an inode stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Node {
    Root,
    Process(i32),
    Fibers(i32),
    Fiber(i32, u64),
}

/// Path <-> inode number, for the life of the mount.
struct Inodes {
    by_node: HashMap<Node, u64>,
    by_ino: HashMap<u64, Node>,
    next: u64,
}

impl Inodes {
    fn new() -> Inodes {
        let mut t = Inodes {
            by_node: HashMap::new(),
            by_ino: HashMap::new(),
            next: INodeNo::ROOT.0 + 1,
        };
        t.by_node.insert(Node::Root, INodeNo::ROOT.0);
        t.by_ino.insert(INodeNo::ROOT.0, Node::Root);
        t
    }

    fn ino(&mut self, node: Node) -> INodeNo {
        if let Some(&ino) = self.by_node.get(&node) {
            return INodeNo(ino);
        }
        let ino = self.next;
        self.next += 1;
        self.by_node.insert(node, ino);
        self.by_ino.insert(ino, node);
        INodeNo(ino)
    }

    fn node(&self, ino: INodeNo) -> Option<Node> {
        self.by_ino.get(&ino.0).copied()
    }
}

/// One directory entry of an open directory.
struct DirEntry {
    ino: INodeNo,
    kind: FileType,
    name: String,
}

/// A cached symbol resolver for one process.
struct CachedResolver {
    start_time: Option<u64>,
    made: Instant,
    resolver: Option<Resolver>,
}

/// The filesystem.
pub struct FiberFs {
    uid: u32,
    gid: u32,
    mounted_at: SystemTime,
    inodes: Mutex<Inodes>,
    snapshots: Mutex<HashMap<i32, (Instant, Arc<Snapshot>)>>,
    resolvers: Mutex<HashMap<i32, CachedResolver>>,
    files: Mutex<HashMap<u64, Arc<Vec<u8>>>>,
    dirs: Mutex<HashMap<u64, Arc<Vec<DirEntry>>>>,
    next_handle: Mutex<u64>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in one request must not take the whole mount down.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The errno a reader error becomes.
fn errno_of(e: &IntrospectError) -> Errno {
    match e {
        IntrospectError::NotUsingWeft { .. }
        | IntrospectError::NoSuchProcess { .. }
        | IntrospectError::Stale { .. } => Errno::ENOENT,
        IntrospectError::PermissionDenied { .. } => Errno::EACCES,
        IntrospectError::BadFormat { .. } => Errno::EIO,
        IntrospectError::Io(io) => io.raw_os_error().map(Errno::from_i32).unwrap_or(Errno::EIO),
        _ => Errno::EIO,
    }
}

/// The start time of `pid` (field 22 of /proc/PID/stat), to tell a reused pid.
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain anything.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The text of `DIR/<pid>/fibers/<id>`: one field per line, then what the
/// fiber's label says, each line only when known.
///
/// ```text
/// running: yes
/// entry point: 0x55d0c0a1b2c0 (weft_target_alpha)
/// parent thread: 4242
/// activations: 3
/// failed activations: 0
/// total execution time: 1.234567 ms
/// name: kv-conn 7
/// spawned at: crates/weft-kv/src/server/mod.rs:371:10
/// function: weft_kv::server::accept<weft_runtime::net::UnixStream>::{{closure}}
/// ```
///
/// `running` is `yes` or `no` (`no (finished)` once the fiber's routine has
/// ended). The entry point is the start routine's address and, in
/// parentheses, its symbol (`name` or `name+0xoff`); a converted thread has no
/// start routine: `none (converted thread)`. The parent thread is the id
/// (gettid) of the thread that created the fiber. The time is in
/// milliseconds with nanosecond precision. `name` is the name the program gave
/// the fiber; `spawned at` the source file, line and column of the call that
/// spawned it and `function` the type name of what it runs (Rust fibers and
/// green threads).
pub fn render(f: &FiberInfo, symbol: Option<&str>) -> String {
    let running = match f.state {
        FiberState::Running => "yes",
        FiberState::Ready => "no",
        FiberState::Finished => "no (finished)",
    };
    let entry = if f.entry == 0 && f.is_thread_fiber {
        "none (converted thread)".to_string()
    } else {
        match symbol {
            Some(s) => format!("{:#x} ({s})", f.entry),
            None => format!("{:#x}", f.entry),
        }
    };
    let ns = f.run_time.as_nanos();
    let mut text = format!(
        "running: {running}\n\
         entry point: {entry}\n\
         parent thread: {}\n\
         activations: {}\n\
         failed activations: {}\n\
         total execution time: {}.{:06} ms\n",
        f.creator_tid,
        f.activations,
        f.failed_activations,
        ns / 1_000_000,
        ns % 1_000_000
    );
    if let Some(name) = &f.name {
        text += &format!("name: {name}\n");
    }
    if let Some(at) = &f.spawned_at {
        text += &format!("spawned at: {}:{}:{}\n", at.file, at.line, at.column);
    }
    if let Some(function) = &f.function {
        text += &format!("function: {function}\n");
    }
    text
}

impl FiberFs {
    pub fn new() -> FiberFs {
        // SAFETY: getuid/getgid cannot fail and have no preconditions.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        FiberFs {
            uid,
            gid,
            mounted_at: SystemTime::now(),
            inodes: Mutex::new(Inodes::new()),
            snapshots: Mutex::new(HashMap::new()),
            resolvers: Mutex::new(HashMap::new()),
            files: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_handle: Mutex::new(1),
        }
    }

    fn handle(&self) -> u64 {
        let mut h = lock(&self.next_handle);
        let v = *h;
        *h += 1;
        v
    }

    fn ino(&self, node: Node) -> INodeNo {
        lock(&self.inodes).ino(node)
    }

    fn node(&self, ino: INodeNo) -> Option<Node> {
        lock(&self.inodes).node(ino)
    }

    /// The live processes shown at the root: alive, and (unless we are root)
    /// ours; the registry of another user is not readable anyway.
    fn processes(&self) -> Result<Vec<i32>, Errno> {
        let entries = match introspect::list() {
            Ok(entries) => entries,
            // No registry directory yet: no process has made a registry.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e.raw_os_error().map(Errno::from_i32).unwrap_or(Errno::EIO)),
        };
        let mut pids: Vec<i32> = entries
            .into_iter()
            .filter(|e| e.alive && (self.uid == 0 || e.uid == self.uid))
            .map(|e| e.pid)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        Ok(pids)
    }

    fn process_exists(&self, pid: i32) -> Result<bool, Errno> {
        Ok(self.processes()?.contains(&pid))
    }

    /// A snapshot of `pid`, at most `max_age` old (`Duration::ZERO`: fresh).
    fn snapshot(&self, pid: i32, max_age: Duration) -> Result<Arc<Snapshot>, Errno> {
        if !max_age.is_zero() {
            if let Some((at, snap)) = lock(&self.snapshots).get(&pid) {
                if at.elapsed() <= max_age {
                    return Ok(snap.clone());
                }
            }
        }
        match introspect::read(pid) {
            Ok(mut snap) => {
                // Sorted by id: `fiber` finds one by binary search (an `ls -l`
                // of 100,000 fibers looks each of them up).
                snap.fibers.sort_unstable_by_key(|f| f.id);
                let snap = Arc::new(snap);
                let mut cache = lock(&self.snapshots);
                // Forget processes that have not been asked about for a while.
                cache.retain(|_, (at, _)| at.elapsed() < Duration::from_secs(10));
                cache.insert(pid, (Instant::now(), snap.clone()));
                Ok(snap)
            }
            Err(e) => {
                lock(&self.snapshots).remove(&pid);
                Err(errno_of(&e))
            }
        }
    }

    fn fiber(&self, pid: i32, id: u64, max_age: Duration) -> Result<FiberInfo, Errno> {
        let snap = self.snapshot(pid, max_age)?;
        let i = snap
            .fibers
            .binary_search_by_key(&id, |f| f.id)
            .map_err(|_| Errno::ENOENT)?;
        Ok(snap.fibers[i].clone())
    }

    /// The symbol of `addr` in process `pid`, as `name` or `name+0xoff`.
    fn symbol(&self, pid: i32, addr: u64) -> Option<String> {
        if addr == 0 {
            return None;
        }
        let mut cache = lock(&self.resolvers);
        // A resolver made in the last RESOLVER_TRUSTED is used as it is; an
        // older one only if the pid still names the same process.
        let fresh = cache.get(&pid).is_some_and(|c| {
            let age = c.made.elapsed();
            age < RESOLVER_TRUSTED || (age < RESOLVER_MAX_AGE && c.start_time == start_time(pid))
        });
        if !fresh {
            let started = start_time(pid);
            cache.retain(|_, c| c.made.elapsed() < RESOLVER_MAX_AGE);
            cache.insert(
                pid,
                CachedResolver {
                    start_time: started,
                    made: Instant::now(),
                    resolver: Resolver::new(pid).ok(),
                },
            );
        }
        let resolver = cache.get_mut(&pid)?.resolver.as_mut()?;
        resolver.resolve(addr).map(|s| s.to_string())
    }

    fn text(&self, pid: i32, f: &FiberInfo) -> String {
        let sym = self.symbol(pid, f.entry);
        render(f, sym.as_deref())
    }

    fn dir_attr(&self, ino: INodeNo, nlink: u32) -> FileAttr {
        FileAttr {
            ino,
            size: 0,
            blocks: 0,
            atime: self.mounted_at,
            mtime: self.mounted_at,
            ctime: self.mounted_at,
            crtime: self.mounted_at,
            kind: FileType::Directory,
            perm: 0o555,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    fn file_attr(&self, ino: INodeNo, size: u64) -> FileAttr {
        let now = SystemTime::now();
        FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: now,
            mtime: now,
            ctime: now,
            crtime: self.mounted_at,
            kind: FileType::RegularFile,
            perm: 0o444,
            nlink: 1,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// The attributes of `node`, checking that it still exists.
    fn attr(&self, node: Node) -> Result<FileAttr, Errno> {
        let ino = self.ino(node);
        match node {
            Node::Root => Ok(self.dir_attr(ino, 2)),
            Node::Process(pid) => {
                if self.process_exists(pid)? {
                    Ok(self.dir_attr(ino, 3))
                } else {
                    Err(Errno::ENOENT)
                }
            }
            Node::Fibers(pid) => {
                if self.process_exists(pid)? {
                    Ok(self.dir_attr(ino, 2))
                } else {
                    Err(Errno::ENOENT)
                }
            }
            Node::Fiber(pid, id) => {
                let f = self.fiber(pid, id, SNAPSHOT_MAX_AGE)?;
                // The size of the text as it is now; reads use direct I/O, so
                // a text that has grown since is still read whole.
                Ok(self.file_attr(ino, self.text(pid, &f).len() as u64))
            }
        }
    }

    fn child(&self, parent: Node, name: &OsStr) -> Result<Node, Errno> {
        let name = name.to_str().ok_or(Errno::ENOENT)?;
        match parent {
            Node::Root => {
                let pid: i32 = parse_canonical(name).ok_or(Errno::ENOENT)?;
                Ok(Node::Process(pid))
            }
            Node::Process(pid) if name == "fibers" => Ok(Node::Fibers(pid)),
            Node::Process(_) => Err(Errno::ENOENT),
            Node::Fibers(pid) => {
                let id: u64 = parse_canonical(name).ok_or(Errno::ENOENT)?;
                Ok(Node::Fiber(pid, id))
            }
            Node::Fiber(..) => Err(Errno::ENOTDIR),
        }
    }

    fn list_dir(&self, ino: INodeNo, node: Node) -> Result<Vec<DirEntry>, Errno> {
        let parent_ino = match node {
            Node::Root | Node::Process(_) => INodeNo::ROOT,
            Node::Fibers(pid) => self.ino(Node::Process(pid)),
            Node::Fiber(..) => return Err(Errno::ENOTDIR),
        };
        let mut out = vec![
            DirEntry {
                ino,
                kind: FileType::Directory,
                name: ".".into(),
            },
            DirEntry {
                ino: if matches!(node, Node::Process(_)) {
                    INodeNo::ROOT
                } else {
                    parent_ino
                },
                kind: FileType::Directory,
                name: "..".into(),
            },
        ];
        match node {
            Node::Root => {
                for pid in self.processes()? {
                    out.push(DirEntry {
                        ino: self.ino(Node::Process(pid)),
                        kind: FileType::Directory,
                        name: pid.to_string(),
                    });
                }
            }
            Node::Process(pid) => {
                if !self.process_exists(pid)? {
                    return Err(Errno::ENOENT);
                }
                out.push(DirEntry {
                    ino: self.ino(Node::Fibers(pid)),
                    kind: FileType::Directory,
                    name: "fibers".into(),
                });
            }
            Node::Fibers(pid) => {
                let snap = self.snapshot(pid, Duration::ZERO)?;
                for id in snap.fibers.iter().map(|f| f.id) {
                    out.push(DirEntry {
                        ino: self.ino(Node::Fiber(pid, id)),
                        kind: FileType::RegularFile,
                        name: id.to_string(),
                    });
                }
            }
            Node::Fiber(..) => unreachable!(),
        }
        Ok(out)
    }
}

impl Default for FiberFs {
    fn default() -> Self {
        FiberFs::new()
    }
}

/// Parses a decimal number written the one way we write it (no sign, no
/// leading zero), so that each process and fiber has exactly one name.
fn parse_canonical<T: std::str::FromStr + ToString>(s: &str) -> Option<T> {
    let v: T = s.parse().ok()?;
    (v.to_string() == s).then_some(v)
}

impl Filesystem for FiberFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let result = self
            .node(parent)
            .ok_or(Errno::ENOENT)
            .and_then(|p| self.child(p, name))
            .and_then(|n| self.attr(n));
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self
            .node(ino)
            .ok_or(Errno::ENOENT)
            .and_then(|n| self.attr(n))
        {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if flags.0 & libc::O_ACCMODE != libc::O_RDONLY {
            return reply.error(Errno::EROFS);
        }
        let text = match self.node(ino) {
            Some(Node::Fiber(pid, id)) => match self.fiber(pid, id, Duration::ZERO) {
                Ok(f) => self.text(pid, &f),
                Err(e) => return reply.error(e),
            },
            Some(_) => return reply.error(Errno::EISDIR),
            None => return reply.error(Errno::ENOENT),
        };
        let fh = self.handle();
        lock(&self.files).insert(fh, Arc::new(text.into_bytes()));
        reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO);
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let Some(text) = lock(&self.files).get(&fh.0).cloned() else {
            return reply.error(Errno::EBADF);
        };
        let start = (offset as usize).min(text.len());
        let end = start.saturating_add(size as usize).min(text.len());
        reply.data(&text[start..end]);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        lock(&self.files).remove(&fh.0);
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let entries = match self.node(ino) {
            Some(node) => self.list_dir(ino, node),
            None => Err(Errno::ENOENT),
        };
        match entries {
            Ok(entries) => {
                let fh = self.handle();
                lock(&self.dirs).insert(fh, Arc::new(entries));
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(entries) = lock(&self.dirs).get(&fh.0).cloned() else {
            return reply.error(Errno::EBADF);
        };
        // The offset of an entry is the index of the next one.
        for (i, e) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(e.ino, i as u64 + 1, e.kind, &e.name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        lock(&self.dirs).remove(&fh.0);
        reply.ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(state: FiberState, entry: u64, thread: bool) -> FiberInfo {
        FiberInfo {
            id: 7,
            state,
            is_thread_fiber: thread,
            entry,
            creator_tid: 4242,
            running_on: None,
            last_tid: 4242,
            activations: 3,
            failed_activations: 1,
            deactivations: 3,
            run_time: Duration::from_nanos(1_234_567),
            stack_base: 0,
            stack_size: 65536,
            name: None,
            function: None,
            spawned_at: None,
            consistent: true,
        }
    }

    #[test]
    fn renders_every_field() {
        let f = info(FiberState::Ready, 0x55d0c0a1b2c0, false);
        assert_eq!(
            render(&f, Some("weft_target_alpha")),
            "running: no\nentry point: 0x55d0c0a1b2c0 (weft_target_alpha)\n\
             parent thread: 4242\nactivations: 3\nfailed activations: 1\n\
             total execution time: 1.234567 ms\n"
        );
        let f = info(FiberState::Running, 0, true);
        let t = render(&f, None);
        assert!(t.starts_with("running: yes\nentry point: none (converted thread)\n"));
        let f = info(FiberState::Finished, 0x1000, false);
        let t = render(&f, None);
        assert!(t.starts_with("running: no (finished)\nentry point: 0x1000\n"));
    }

    #[test]
    fn renders_the_label_after_the_fields() {
        let mut f = info(FiberState::Ready, 0x1000, false);
        f.name = Some("conn 7".to_string());
        f.spawned_at = Some(weft_fiber::introspect::SpawnSite {
            file: "src/server.rs".to_string(),
            line: 42,
            column: 9,
        });
        f.function = Some("server::accept::{{closure}}".to_string());
        let t = render(&f, Some("call"));
        assert!(
            t.ends_with(
                "total execution time: 1.234567 ms\nname: conn 7\n\
                 spawned at: src/server.rs:42:9\nfunction: server::accept::{{closure}}\n"
            ),
            "{t}"
        );
        // Only what is known: a name alone.
        f.spawned_at = None;
        f.function = None;
        assert!(render(&f, None).ends_with(" ms\nname: conn 7\n"));
    }

    #[test]
    fn names_are_canonical() {
        assert_eq!(parse_canonical::<i32>("42"), Some(42));
        assert_eq!(parse_canonical::<i32>("042"), None);
        assert_eq!(parse_canonical::<i32>("+42"), None);
        assert_eq!(parse_canonical::<u64>("x"), None);
    }
}
