//! How much of a fiber's stack has been touched: its high-water mark.
//!
//! weft maps every fiber stack as one anonymous `MAP_NORESERVE` mapping whose lowest
//! 16 KiB are made `PROT_NONE` (the guard), so in `/proc/PID/smaps` a stack is a VMA
//! of its own: the guard, with no resident pages, is a separate VMA below it. Pages are
//! committed only when touched and a stack grows down, so the stack's resident size
//! (`Rss`) is how deep it has ever gone: its high-water mark. (A page the kernel swapped
//! out is not counted; `Swap` is added for that reason.)
//!
//! [`Smaps::load`] reads the VMAs once, so `weft ps` can answer for 100,000 fibers with
//! one pass and a binary search per fiber instead of a system call per fiber. It reads
//! `/proc/PID/numa_maps` (resident anonymous pages per VMA, one short line each) with
//! `/proc/PID/maps` (each VMA's end) rather than `/proc/PID/smaps`, whose two dozen
//! lines per VMA make it 4 times slower to produce for a process with 60,000 VMAs (the
//! kernel's formatting, not the parsing, is the cost: 250 ms against 67 ms for 30,000
//! fibers). smaps is the fallback on kernels without NUMA support, and adds swapped-out
//! pages, which numa_maps does not count.

use std::io::Read;

/// One VMA of /proc/PID/smaps: `[start, end)` and its resident + swapped bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    pub rss: u64,
}

/// The VMAs of a process, sorted by address.
#[derive(Debug, Clone, Default)]
pub struct Smaps {
    vmas: Vec<Vma>,
}

impl Smaps {
    /// Reads the VMAs of process `pid` (see the module comment).
    pub fn load(pid: i32) -> std::io::Result<Smaps> {
        let maps = read_all(&format!("/proc/{pid}/maps"))?;
        Smaps::load_with_maps(pid, &maps)
    }

    /// Like [`Smaps::load`], with the text of /proc/PID/maps already read.
    pub fn load_with_maps(pid: i32, maps: &[u8]) -> std::io::Result<Smaps> {
        match read_all(&format!("/proc/{pid}/numa_maps")) {
            Ok(numa) => Ok(Smaps::from_numa_maps(maps, &numa)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Ok(Smaps::parse(&read_all(&format!("/proc/{pid}/smaps"))?))
            }
            Err(e) => Err(e),
        }
    }

    /// Joins /proc/PID/maps (ranges) with /proc/PID/numa_maps (the same VMAs in the same
    /// order, by start address, with `anon=<pages>` and `kernelpagesize_kB=<k>`).
    pub fn from_numa_maps(maps: &[u8], numa: &[u8]) -> Smaps {
        let mut rss: Vec<(u64, u64)> = Vec::new();
        for line in numa.split(|&b| b == b'\n') {
            let mut words = line.split(|&b| b == b' ');
            let Some(start) = words.next().and_then(hex) else {
                continue;
            };
            let (mut pages, mut kb) = (0, 4);
            for w in words {
                if let Some(v) = w.strip_prefix(b"anon=") {
                    pages = dec(v).unwrap_or(0);
                } else if let Some(v) = w.strip_prefix(b"kernelpagesize_kB=") {
                    kb = dec(v).unwrap_or(4);
                }
            }
            if pages > 0 {
                rss.push((start, pages * kb * 1024));
            }
        }
        rss.sort_unstable();
        let mut vmas = ranges(maps);
        for v in &mut vmas {
            if let Ok(i) = rss.binary_search_by_key(&v.start, |&(s, _)| s) {
                v.rss = rss[i].1;
            }
        }
        Smaps { vmas }
    }

    /// Parses the text of an smaps file.
    pub fn parse(text: &[u8]) -> Smaps {
        let mut vmas: Vec<Vma> = Vec::new();
        for line in text.split(|&b| b == b'\n') {
            let Some(&first) = line.first() else {
                continue;
            };
            // Field lines start with a capital letter ("Rss:", "VmFlags:"); a VMA's
            // header starts with its hex start address (lower-case digits).
            if first.is_ascii_uppercase() {
                let (is_rss, is_swap) = (line.starts_with(b"Rss:"), line.starts_with(b"Swap:"));
                if is_rss || is_swap {
                    if let (Some(v), Some(kb)) = (vmas.last_mut(), kb_value(line)) {
                        v.rss += kb * 1024;
                    }
                }
                continue;
            }
            let range = line.split(|&b| b == b' ').next().unwrap_or(b"");
            let Some(dash) = range.iter().position(|&b| b == b'-') else {
                continue;
            };
            if let (Some(start), Some(end)) = (hex(&range[..dash]), hex(&range[dash + 1..])) {
                vmas.push(Vma { start, end, rss: 0 });
            }
        }
        vmas.sort_by_key(|v| v.start);
        Smaps { vmas }
    }

    /// All VMAs, sorted by start address.
    pub fn vmas(&self) -> &[Vma] {
        &self.vmas
    }

    /// Resident bytes of the VMAs overlapping `[base, base + size)`, capped at `size`;
    /// `None` if no VMA overlaps it (the stack is not mapped, or `size` is 0).
    pub fn rss_of(&self, base: u64, size: u64) -> Option<u64> {
        if size == 0 {
            return None;
        }
        let end = base.checked_add(size)?;
        // First VMA that ends after base.
        let first = self.vmas.partition_point(|v| v.end <= base);
        let mut total = 0;
        let mut any = false;
        for v in self.vmas[first..].iter().take_while(|v| v.start < end) {
            any = true;
            total += v.rss;
        }
        any.then_some(total.min(size))
    }
}

fn read_all(path: &str) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::open(path)?;
    let mut buf = Vec::with_capacity(1 << 20);
    f.read_to_end(&mut buf)?;
    Ok(buf)
}

/// The `start-end` ranges of a maps (or smaps) text, sorted, with no Rss yet.
fn ranges(maps: &[u8]) -> Vec<Vma> {
    let mut vmas: Vec<Vma> = maps
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let range = line.split(|&b| b == b' ').next()?;
            let dash = range.iter().position(|&b| b == b'-')?;
            Some(Vma {
                start: hex(&range[..dash])?,
                end: hex(&range[dash + 1..])?,
                rss: 0,
            })
        })
        .collect();
    vmas.sort_by_key(|v| v.start);
    vmas
}

fn dec(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit()
            .then(|| n.checked_mul(10)?.checked_add(u64::from(b - b'0')))
            .flatten()
    })
}

fn kb_value(line: &[u8]) -> Option<u64> {
    // "Rss:                  12 kB"
    let colon = line.iter().position(|&b| b == b':')?;
    let mut n: u64 = 0;
    let mut seen = false;
    for &b in line[colon + 1..].iter().skip_while(|b| **b == b' ') {
        if b.is_ascii_digit() {
            n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
            seen = true;
        } else {
            break;
        }
    }
    seen.then_some(n)
}

fn hex(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut n: u64 = 0;
    for &b in s {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        n = (n << 4) | u64::from(d);
    }
    Some(n)
}

/// Bytes of the stack `[base, base + size)` of process `pid` that have been touched
/// (see the module comment), or `None` if that range is not mapped. For many stacks,
/// [`Smaps::load`] once and call [`Smaps::rss_of`] for each.
pub fn high_water(pid: i32, base: u64, size: u64) -> std::io::Result<Option<u64>> {
    Ok(Smaps::load(pid)?.rss_of(base, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
7f0000000000-7f0000004000 ---p 00000000 00:00 0 
Size:                 16 kB
Rss:                   0 kB
VmFlags: mr mw me nr sd
7f0000004000-7f0000104000 rw-p 00000000 00:00 0 
Size:               1024 kB
KernelPageSize:        4 kB
Rss:                  12 kB
Pss:                  12 kB
Swap:                  4 kB
VmFlags: rd wr mr mw me nr sd
7f0000200000-7f0000300000 r-xp 00000000 08:01 42                         /usr/lib/x.so
Rss:                 100 kB
";

    #[test]
    fn parses_rss_per_vma() {
        let s = Smaps::parse(SAMPLE.as_bytes());
        assert_eq!(s.vmas().len(), 3);
        assert_eq!(s.vmas()[1].start, 0x7f0000004000);
        assert_eq!(s.vmas()[1].rss, 16 * 1024);
        assert_eq!(s.rss_of(0x7f0000004000, 1 << 20), Some(16 * 1024));
        assert_eq!(s.rss_of(0x7f0000004000, 8192), Some(8192)); // capped
        assert_eq!(s.rss_of(0x1000, 4096), None);
        assert_eq!(s.rss_of(0x7f0000004000, 0), None);
    }

    #[test]
    fn joins_maps_and_numa_maps() {
        let maps = b"7f0000000000-7f0000004000 ---p 00000000 00:00 0 \n\
                     7f0000004000-7f0000104000 rw-p 00000000 00:00 0 \n\
                     7f0000200000-7f0000300000 r-xp 00000000 08:01 42   /usr/lib/x.so\n";
        let numa = b"7f0000000000 default\n\
                     7f0000004000 default anon=3 dirty=3 active=0 N0=3 kernelpagesize_kB=4\n\
                     7f0000200000 default file=/usr/lib/x.so mapped=20 N0=20 kernelpagesize_kB=4\n";
        let s = Smaps::from_numa_maps(maps, numa);
        assert_eq!(
            s.vmas(),
            &[
                Vma {
                    start: 0x7f0000000000,
                    end: 0x7f0000004000,
                    rss: 0
                },
                Vma {
                    start: 0x7f0000004000,
                    end: 0x7f0000104000,
                    rss: 3 * 4096
                },
                Vma {
                    start: 0x7f0000200000,
                    end: 0x7f0000300000,
                    rss: 0
                },
            ]
        );
        assert_eq!(s.rss_of(0x7f0000004000, 1 << 20), Some(3 * 4096));
    }

    #[test]
    fn touched_stack_of_this_process() {
        let size = 256 * 1024;
        // SAFETY: a fresh anonymous mapping with a PROT_NONE page on each side (so
        // the kernel cannot merge it with a neighbour), unmapped below.
        unsafe {
            let total = size + 2 * 4096;
            let m = libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            assert_ne!(m, libc::MAP_FAILED);
            assert_eq!(libc::mprotect(m, 4096, libc::PROT_NONE), 0);
            let p = m.cast::<u8>().add(4096);
            assert_eq!(libc::mprotect(p.add(size).cast(), 4096, libc::PROT_NONE), 0);
            let base = p as u64;
            let pid = std::process::id() as i32;
            assert_eq!(high_water(pid, base, size as u64).unwrap(), Some(0));
            // Touch the top 3 pages, as a stack would.
            std::ptr::write_bytes(p.add(size - 3 * 4096), 1, 3 * 4096);
            assert_eq!(high_water(pid, base, size as u64).unwrap(), Some(3 * 4096));
            libc::munmap(m, total);
        }
    }
}
