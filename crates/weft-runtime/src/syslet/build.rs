//! Writing syslets from Rust: a builder that owns everything the atoms point to, and
//! the validation that runs before anything is submitted.
//!
//! ```
//! use weft_runtime::syslet::{Builder, SYSLET_STOP_ON_NEGATIVE};
//!
//! let mut b = Builder::new();
//! let (dirfd, path, flags) = (b.value(libc::AT_FDCWD as i64), b.cstr("/proc/self/stat"), b.value(0));
//! let (mode, fd) = (b.value(0), b.var());
//! let open = b.atom(libc::SYS_openat, &[dirfd, path, flags, mode]);
//! b.ret(open, fd);
//! b.flags(open, SYSLET_STOP_ON_NEGATIVE); // a failed open ends the syslet there
//! let (buf, len) = (b.buffer(4096), b.value(4096));
//! let n = b.var();
//! let read = b.atom(libc::SYS_read, &[fd, buf, len]);
//! b.ret(read, n);
//! b.atom(libc::SYS_close, &[fd]); // atoms follow each other unless told otherwise
//! let prog = b.build().unwrap();
//! assert_eq!(prog.atoms(), 3);
//! ```
//!
//! A [`Var`] is a 64-bit cell the program owns: an atom's result can be stored in one
//! ([`Builder::ret`]) and another atom can take it as an argument, which is how one
//! result feeds a later argument. Constants, C strings and buffers are variables too
//! (a buffer's variable holds its address). Nothing the atoms point to moves or dies
//! while the program lives, so running one is safe.

use super::atom::*;
use super::sys;
use std::ffi::CString;
use std::fmt;

/// A 64-bit variable of a program (an argument, a result, a counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Var(usize);

/// An atom of a program, by its position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtomId(pub usize);

struct Spec {
    nr: u64,
    args: Vec<Var>,
    flags: u64,
    ret: Option<Var>,
    /// `None`: the following atom (or the end, for the last one).
    next: Option<Option<AtomId>>,
}

/// Builds a [`Program`]. Atoms run in the order they were added unless
/// [`next`](Builder::next) says otherwise.
#[derive(Default)]
pub struct Builder {
    specs: Vec<Spec>,
    vars: Vec<i64>,
    /// Variables that hold the address of another variable (`umem_add`'s pointer).
    addr_of: Vec<(Var, Var)>,
    /// Variables that hold the address of an owned buffer or string.
    bufs: Vec<(Var, Box<[u8]>)>,
}

/// What is wrong with a program (found before it runs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildError {
    /// An atom names a system call number weft does not know.
    UnknownSyscall {
        /// The atom's position in the program (0 for the first).
        atom: usize,
        /// The system call number it names.
        nr: u64,
    },
    /// An atom names a system call that cannot run in a syslet (fork, exec, exit...).
    ForbiddenSyscall {
        /// The atom's position in the program.
        atom: usize,
        /// The system call's name.
        name: &'static str,
    },
    /// An atom has fewer arguments than its system call takes.
    MissingArgument {
        /// The atom's position in the program.
        atom: usize,
        /// The system call's name.
        name: &'static str,
        /// How many arguments the system call takes.
        takes: u8,
        /// How many the atom has.
        given: usize,
    },
    /// More than six arguments.
    TooManyArguments {
        /// The atom's position in the program.
        atom: usize,
        /// How many arguments it has.
        given: usize,
    },
    /// `next` names an atom that does not exist.
    BadJump {
        /// The atom whose `next` is wrong.
        atom: usize,
        /// The position it names.
        target: usize,
        /// How many atoms the program has.
        atoms: usize,
    },
    /// `SYSLET_SKIP_TO_NEXT_ON_STOP` on the last atom: there is no linearly next one.
    SkipPastEnd {
        /// The atom's position in the program (the last one).
        atom: usize,
    },
    /// Unknown flag bits, or ASYNC with SYNC.
    BadFlags {
        /// The atom's position in the program.
        atom: usize,
        /// Its flags, as given.
        flags: u64,
    },
    /// A program without atoms.
    Empty,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::UnknownSyscall { atom, nr } => write!(
                f,
                "syslet atom {atom}: unknown system call number {nr} (use libc::SYS_* or syslet::SYS_UMEM_ADD)"
            ),
            BuildError::ForbiddenSyscall { atom, name } => write!(
                f,
                "syslet atom {atom}: {name} cannot run in a syslet (it would act on the executor's thread, not the program); call it directly"
            ),
            BuildError::MissingArgument { atom, name, takes, given } => write!(
                f,
                "syslet atom {atom}: {name} takes {takes} arguments, {given} given"
            ),
            BuildError::TooManyArguments { atom, given } => write!(
                f,
                "syslet atom {atom}: {given} arguments given, a system call takes at most 6"
            ),
            BuildError::BadJump { atom, target, atoms } => write!(
                f,
                "syslet atom {atom}: next is atom {target}, but the program has {atoms} atoms"
            ),
            BuildError::SkipPastEnd { atom } => write!(
                f,
                "syslet atom {atom}: SYSLET_SKIP_TO_NEXT_ON_STOP on the last atom (there is no linearly next atom to skip to); add one after it"
            ),
            BuildError::BadFlags { atom, flags } => write!(
                f,
                "syslet atom {atom}: bad flags {flags:#x} (unknown bits, or SYSLET_ASYNC with SYSLET_SYNC)"
            ),
            BuildError::Empty => write!(f, "a syslet needs at least one atom"),
        }
    }
}

impl std::error::Error for BuildError {}

impl Builder {
    /// An empty program.
    pub fn new() -> Self {
        Self::default()
    }

    /// A new variable, initially 0.
    pub fn var(&mut self) -> Var {
        self.value(0)
    }

    /// A new variable holding `v` (a constant argument, a counter's start).
    pub fn value(&mut self, v: i64) -> Var {
        self.vars.push(v);
        Var(self.vars.len() - 1)
    }

    /// A variable holding the address of an owned, NUL-terminated copy of `s` (a path).
    ///
    /// # Panics
    /// If `s` contains a NUL byte.
    pub fn cstr(&mut self, s: &str) -> Var {
        let c = CString::new(s).expect("a path without NUL bytes");
        self.owned(c.into_bytes_with_nul().into_boxed_slice())
    }

    /// A variable holding the address of an owned zeroed buffer of `len` bytes (read it
    /// after the program ran with [`Program::buffer`]).
    pub fn buffer(&mut self, len: usize) -> Var {
        self.owned(vec![0u8; len].into_boxed_slice())
    }

    /// A variable holding the address of an owned copy of `bytes` (data to write).
    pub fn bytes(&mut self, bytes: &[u8]) -> Var {
        self.owned(bytes.to_vec().into_boxed_slice())
    }

    fn owned(&mut self, b: Box<[u8]>) -> Var {
        let v = self.var();
        self.bufs.push((v, b));
        v
    }

    /// Appends an atom calling system call `nr` with `args` (each argument is read from
    /// its variable when the atom runs). It runs after the previously added atom.
    pub fn atom(&mut self, nr: i64, args: &[Var]) -> AtomId {
        self.specs.push(Spec {
            nr: nr as u64,
            args: args.to_vec(),
            flags: 0,
            ret: None,
            next: None,
        });
        AtomId(self.specs.len() - 1)
    }

    /// Appends `umem_add(&counter, delta)`: adds the value of `delta` to `counter` and
    /// returns the new value (the kernel syslets' `sys_umem_add`; with a delta of 0, reads it).
    pub fn umem_add(&mut self, counter: Var, delta: Var) -> AtomId {
        let p = self.var();
        self.addr_of.push((p, counter));
        self.atom(sys::SYS_UMEM_ADD as i64, &[p, delta])
    }

    /// Sets `atom`'s flags (`SYSLET_*`).
    pub fn flags(&mut self, atom: AtomId, flags: u64) -> &mut Self {
        self.specs[atom.0].flags = flags;
        self
    }

    /// Stores `atom`'s result in `var`.
    pub fn ret(&mut self, atom: AtomId, var: Var) -> &mut Self {
        self.specs[atom.0].ret = Some(var);
        self
    }

    /// Sets what runs after `atom`: `Some(target)` (a jump; back for a loop), or `None`
    /// (the syslet ends after it).
    pub fn next(&mut self, atom: AtomId, target: Option<AtomId>) -> &mut Self {
        self.specs[atom.0].next = Some(target);
        self
    }

    /// Checks the program and lays it out.
    pub fn build(self) -> Result<Program, BuildError> {
        let n = self.specs.len();
        if n == 0 {
            return Err(BuildError::Empty);
        }
        for (i, s) in self.specs.iter().enumerate() {
            let info = sys::info(s.nr).ok_or(BuildError::UnknownSyscall { atom: i, nr: s.nr })?;
            if info.class == sys::Class::Forbidden {
                return Err(BuildError::ForbiddenSyscall {
                    atom: i,
                    name: info.name,
                });
            }
            if s.args.len() > 6 {
                return Err(BuildError::TooManyArguments {
                    atom: i,
                    given: s.args.len(),
                });
            }
            if s.args.len() < info.arity as usize {
                return Err(BuildError::MissingArgument {
                    atom: i,
                    name: info.name,
                    takes: info.arity,
                    given: s.args.len(),
                });
            }
            if s.flags & !SYSLET_FLAGS != 0
                || (s.flags & SYSLET_ASYNC != 0 && s.flags & SYSLET_SYNC != 0)
            {
                return Err(BuildError::BadFlags {
                    atom: i,
                    flags: s.flags,
                });
            }
            if s.flags & SYSLET_SKIP_TO_NEXT_ON_STOP != 0 && i + 1 == n {
                return Err(BuildError::SkipPastEnd { atom: i });
            }
            if let Some(Some(t)) = s.next {
                if t.0 >= n {
                    return Err(BuildError::BadJump {
                        atom: i,
                        target: t.0,
                        atoms: n,
                    });
                }
            }
        }
        // Lay out: variables first (their addresses are taken), then the atoms.
        let mut vars: Box<[i64]> = self.vars.into_boxed_slice();
        let bufs = self.bufs;
        for (v, b) in &bufs {
            vars[v.0] = b.as_ptr() as i64;
        }
        let vp = vars.as_mut_ptr();
        for (p, target) in &self.addr_of {
            vars[p.0] = vp.wrapping_add(target.0) as i64;
        }
        let mut atoms: Box<[SysletUatom]> = vec![SysletUatom::default(); n].into_boxed_slice();
        let ap = atoms.as_mut_ptr();
        for (i, s) in self.specs.iter().enumerate() {
            let a = &mut atoms[i];
            a.flags = s.flags;
            a.nr = s.nr;
            a.ret_ptr = s
                .ret
                .map_or(core::ptr::null_mut(), |v| vp.wrapping_add(v.0));
            let next = match s.next {
                None if i + 1 < n => Some(i + 1),
                None => None,
                Some(t) => t.map(|t| t.0),
            };
            a.next = next.map_or(core::ptr::null_mut(), |j| ap.wrapping_add(j));
            for (k, v) in s.args.iter().enumerate() {
                a.arg_ptr[k] = vp.wrapping_add(v.0).cast_const().cast();
            }
            a.private = i as *mut core::ffi::c_void;
        }
        Ok(Program { atoms, vars, bufs })
    }
}

/// A checked syslet, ready to [`exec`](super::Context::exec). It owns its atoms and
/// everything they point to (addresses stay fixed when the program moves).
pub struct Program {
    atoms: Box<[SysletUatom]>,
    vars: Box<[i64]>,
    bufs: Vec<(Var, Box<[u8]>)>,
}

// SAFETY: the raw pointers in the atoms point into the program's own boxes, which move
// with it.
unsafe impl Send for Program {}

impl Program {
    /// How many atoms it has.
    pub fn atoms(&self) -> usize {
        self.atoms.len()
    }

    /// The value of a variable (a result, a counter) now.
    pub fn get(&self, v: Var) -> i64 {
        // SAFETY: a plain read of our own memory; no run is in progress (`&self` while
        // the executor holds the program is impossible: it owns it then).
        unsafe { core::ptr::read_volatile(&self.vars[v.0]) }
    }

    /// Sets a variable before running the program again.
    pub fn set(&mut self, v: Var, value: i64) {
        self.vars[v.0] = value;
    }

    /// The owned buffer behind `v` ([`Builder::buffer`], [`Builder::bytes`]).
    ///
    /// # Panics
    /// If `v` is not a buffer.
    pub fn buffer(&self, v: Var) -> &[u8] {
        &self
            .bufs
            .iter()
            .find(|(b, _)| *b == v)
            .expect("a buffer variable")
            .1
    }

    /// The index of an atom given its address (a completion's `atom`).
    pub fn index_of(&self, atom: *const SysletUatom) -> Option<usize> {
        let base = self.atoms.as_ptr() as usize;
        let a = atom as usize;
        let size = core::mem::size_of::<SysletUatom>();
        (a >= base && a < base + self.atoms.len() * size).then(|| (a - base) / size)
    }

    /// The first atom (for the executor).
    pub(crate) fn first(&mut self) -> *mut SysletUatom {
        self.atoms.as_mut_ptr()
    }
}
