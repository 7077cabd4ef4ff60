//! Raising the process's limit of open descriptors, for what holds thousands of
//! connections (the system-call layer's tests and benchmark). Included with `#[path]`.

#![allow(dead_code)]

/// Raises this process's limit of open descriptors (`RLIMIT_NOFILE`) towards `want`:
/// the soft limit up to the hard one, and as root the hard one too. Returns the limit
/// now (the caller does with fewer descriptors when it is lower).
pub fn raise_nofile(want: u64) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        if r.rlim_cur >= want {
            return r.rlim_cur;
        }
        let up = libc::rlimit {
            rlim_cur: want,
            rlim_max: r.rlim_max.max(want),
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &up) != 0 {
            let soft = libc::rlimit {
                rlim_cur: r.rlim_max.min(want),
                rlim_max: r.rlim_max,
            };
            libc::setrlimit(libc::RLIMIT_NOFILE, &soft);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
    }
    r.rlim_cur
}
