//! Addresses in another process resolved to symbol names.
//!
//! [`Resolver::new`] reads `/proc/PID/maps` once. [`Resolver::resolve`] finds the
//! file-backed mapping that holds an address, turns the address into a file offset
//! and then, through the ELF file's `PT_LOAD` program headers, into the address the
//! ELF file itself uses (its "vaddr"), and looks that up in the file's `.symtab`, then
//! in `.dynsym` (a stripped library keeps only the latter). Function symbols only:
//! the symbol whose `[address, address + size)` holds the address, or the nearest one
//! before it when symbols have no size. Rust names are demangled (without the hash).
//!
//! The ELF file is opened as `/proc/PID/root/<path>` so it is the target's file even
//! when the target lives in another mount namespace (a container), then as `<path>`,
//! then through `/proc/PID/map_files/` (which also works when the file was deleted or
//! replaced since it was mapped). Each file is parsed once per resolver, each address
//! resolved once.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

/// A resolved address: `name+0xoffset` in `object`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    /// The symbol's name, demangled when it is a Rust name.
    pub name: String,
    /// How far past the symbol's start the address is.
    pub offset: u64,
    /// The ELF file (as the target's maps name it).
    pub object: PathBuf,
}

impl fmt::Display for Symbol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.offset == 0 {
            write!(f, "{}", self.name)
        } else {
            write!(f, "{}+{:#x}", self.name, self.offset)
        }
    }
}

/// One line of /proc/PID/maps that maps a file.
#[derive(Debug, Clone)]
struct Mapping {
    start: u64,
    end: u64,
    file_offset: u64,
    /// The path as maps shows it, without a " (deleted)" suffix.
    path: PathBuf,
    deleted: bool,
}

/// The parts of an ELF file a lookup needs (owned: the file's bytes are dropped).
struct ElfInfo {
    /// PT_LOAD segments: (file offset, file size, vaddr).
    loads: Vec<(u64, u64, u64)>,
    /// Function symbols of .symtab, sorted by address.
    symtab: Vec<Sym>,
    /// Function symbols of .dynsym, sorted by address.
    dynsym: Vec<Sym>,
}

struct Sym {
    address: u64,
    size: u64,
    name: Arc<str>,
}

/// Resolves addresses of one process to symbols. `Send`, so it can move to the thread that needs it.
pub struct Resolver {
    pid: i32,
    maps: Vec<Mapping>,
    /// Parsed files by path; `None` if the file could not be read or parsed.
    objects: HashMap<PathBuf, Option<Arc<ElfInfo>>>,
    /// Addresses already resolved.
    cache: HashMap<u64, Option<Symbol>>,
}

impl Resolver {
    /// Reads `/proc/PID/maps`. Fails if the process is gone or its maps are not
    /// readable by this user.
    pub fn new(pid: i32) -> std::io::Result<Resolver> {
        let text = std::fs::read(format!("/proc/{pid}/maps"))?;
        Ok(Resolver::with_maps(pid, &text))
    }

    /// A resolver for `pid` from the text of its /proc/PID/maps, already read.
    pub fn with_maps(pid: i32, maps: &[u8]) -> Resolver {
        Resolver {
            pid,
            maps: parse_maps(&String::from_utf8_lossy(maps)),
            objects: HashMap::new(),
            cache: HashMap::new(),
        }
    }

    /// The symbol holding `addr` in the target, if a mapped ELF file names it.
    pub fn resolve(&mut self, addr: u64) -> Option<Symbol> {
        if let Some(hit) = self.cache.get(&addr) {
            return hit.clone();
        }
        let found = self.lookup(addr);
        self.cache.insert(addr, found.clone());
        found
    }

    fn lookup(&mut self, addr: u64) -> Option<Symbol> {
        // The mapping with the greatest start <= addr, if it holds addr.
        let i = self
            .maps
            .partition_point(|m| m.start <= addr)
            .checked_sub(1)?;
        let m = self.maps[i].clone();
        if addr >= m.end {
            return None;
        }
        let info = self.object(&m)?;
        let file_off = addr - m.start + m.file_offset;
        let vaddr = info
            .loads
            .iter()
            .find(|&&(off, size, _)| off <= file_off && file_off < off + size)
            .map(|&(off, _, vaddr)| file_off - off + vaddr)?;
        let sym = find_symbol(&info.symtab, vaddr).or_else(|| find_symbol(&info.dynsym, vaddr))?;
        Some(Symbol {
            name: demangle(&sym.name),
            offset: vaddr - sym.address,
            object: m.path.clone(),
        })
    }

    fn object(&mut self, m: &Mapping) -> Option<Arc<ElfInfo>> {
        if let Some(o) = self.objects.get(&m.path) {
            return o.clone();
        }
        let info = self.read_object(m).map(Arc::new);
        self.objects.insert(m.path.clone(), info.clone());
        info
    }

    fn read_object(&self, m: &Mapping) -> Option<ElfInfo> {
        let mut candidates = Vec::new();
        if !m.deleted {
            let rel = m.path.strip_prefix("/").unwrap_or(&m.path);
            candidates.push(Path::new(&format!("/proc/{}/root", self.pid)).join(rel));
            candidates.push(m.path.clone());
        }
        candidates.push(PathBuf::from(format!(
            "/proc/{}/map_files/{:x}-{:x}",
            self.pid, m.start, m.end
        )));
        candidates
            .iter()
            .find_map(|p| std::fs::read(p).ok())
            .and_then(|data| parse_elf(&data))
    }
}

fn parse_maps(text: &str) -> Vec<Mapping> {
    let mut maps: Vec<Mapping> = text
        .lines()
        .filter_map(|line| {
            // start-end perms offset dev inode path
            let mut f = line.splitn(6, ' ');
            let (start, end) = f.next()?.split_once('-')?;
            let _perms = f.next()?;
            let offset = f.next()?;
            let _dev = f.next()?;
            let _inode = f.next()?;
            let path = f.next()?.trim_start();
            if !path.starts_with('/') {
                return None; // anonymous, [heap], [stack], [vdso], ...
            }
            let (path, deleted) = match path.strip_suffix(" (deleted)") {
                Some(p) => (p, true),
                None => (path, false),
            };
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                file_offset: u64::from_str_radix(offset, 16).ok()?,
                path: PathBuf::from(path),
                deleted,
            })
        })
        .collect();
    maps.sort_by_key(|m| m.start);
    maps
}

fn parse_elf(data: &[u8]) -> Option<ElfInfo> {
    let file = object::File::parse(data).ok()?;
    let loads = file
        .segments()
        .map(|s| {
            let (off, size) = s.file_range();
            (off, size, s.address())
        })
        .filter(|&(_, size, _)| size > 0)
        .collect();
    let collect = |syms: &mut dyn Iterator<Item = object::Symbol<'_, '_>>| {
        let mut v: Vec<Sym> = syms
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
            .filter_map(|s| {
                let name = s.name().ok().filter(|n| !n.is_empty())?;
                Some(Sym {
                    address: s.address(),
                    size: s.size(),
                    name: Arc::from(name),
                })
            })
            .collect();
        // By address; at one address, sized symbols first, then globals before locals
        // is not known here, so keep the file's order (stable sort).
        v.sort_by_key(|s| (s.address, s.size == 0));
        v
    };
    let symtab = collect(&mut file.symbols());
    let dynsym = collect(&mut file.dynamic_symbols());
    Some(ElfInfo {
        loads,
        symtab,
        dynsym,
    })
}

/// The symbol of `syms` (sorted by address) holding `vaddr`: one whose range holds it,
/// else the nearest preceding one without a size.
fn find_symbol(syms: &[Sym], vaddr: u64) -> Option<&Sym> {
    let end = syms.partition_point(|s| s.address <= vaddr);
    let nearest = syms.get(end.checked_sub(1)?)?;
    // Symbols at or before vaddr, nearest first: a sized one that holds vaddr wins.
    // Look back a little only (aliases, nested local labels); functions do not nest.
    for s in syms[..end].iter().rev().take(64) {
        if s.size > 0 && vaddr < s.address.saturating_add(s.size) {
            return Some(s);
        }
    }
    // No sized symbol holds it: the nearest preceding symbol without a size.
    syms[..end]
        .iter()
        .rev()
        .take_while(|s| s.address == nearest.address)
        .find(|s| s.size == 0)
}

/// Rust names demangled without their hash (`{:#}`); others as they are.
pub fn demangle(name: &str) -> String {
    match rustc_demangle::try_demangle(name) {
        Ok(d) => format!("{d:#}"),
        Err(_) => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    #[no_mangle]
    pub extern "C" fn weft_cli_symbols_test_marker(x: u64) -> u64 {
        std::hint::black_box(x).wrapping_mul(3)
    }

    #[inline(never)]
    fn a_rust_function(x: u64) -> u64 {
        std::hint::black_box(x) + 1
    }

    #[test]
    fn resolves_functions_of_this_process() {
        let pid = std::process::id() as i32;
        let mut r = Resolver::new(pid).unwrap();
        let addr = weft_cli_symbols_test_marker as *const () as u64;
        let s = r.resolve(addr).expect("marker resolves");
        assert_eq!(s.name, "weft_cli_symbols_test_marker");
        assert_eq!(s.offset, 0);
        assert_eq!(s.to_string(), "weft_cli_symbols_test_marker");
        let s = r.resolve(addr + 1).unwrap();
        assert_eq!(s.offset, 1);
        assert_eq!(s.to_string(), "weft_cli_symbols_test_marker+0x1");

        let addr = a_rust_function as *const () as u64;
        let s = r.resolve(addr).expect("rust function resolves");
        assert!(s.name.ends_with("a_rust_function"), "{}", s.name);
        assert!(!s.name.contains("::h"), "hash not removed: {}", s.name);

        // A libc function, through the shared library's symbols.
        let addr = libc::getpid as *const () as u64;
        let s = r.resolve(addr).expect("getpid resolves");
        assert!(s.name.contains("getpid"), "{}", s.name);
        assert!(
            s.object.to_string_lossy().contains("libc"),
            "{:?}",
            s.object
        );

        assert_eq!(r.resolve(0), None);
        assert_eq!(r.resolve(8), None);
    }

    #[test]
    fn parses_maps_lines() {
        let m = parse_maps(
            "55d0c1a00000-55d0c1a20000 r--p 00000000 08:01 123 /usr/bin/x\n\
             7f00-8f00 r-xp 00001000 08:01 124                  /lib/with space.so (deleted)\n\
             7ffd0000-7ffd1000 rw-p 00000000 00:00 0 [stack]\n\
             7ffe0000-7ffe1000 rw-p 00000000 00:00 0\n",
        );
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].start, 0x7f00);
        assert_eq!(m[0].path, PathBuf::from("/lib/with space.so"));
        assert!(m[0].deleted);
        assert_eq!(m[0].file_offset, 0x1000);
        assert_eq!(m[1].path, PathBuf::from("/usr/bin/x"));
    }
}
