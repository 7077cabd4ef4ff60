//! Files whose operations park only the calling green thread.
//!
//! [`File`] mirrors the parts of `std::fs::File` that block: open, read, write,
//! positioned reads and writes, sync. On a green thread each call goes through the
//! worker's I/O backend (io_uring, or the thread pool; see `io/mod.rs`); on any other
//! thread it is the plain syscall. Dropping a `File` closes it without blocking the
//! worker (the close is queued on the ring or done on the pool).
//!
//! ```
//! let rt = weft_runtime::Runtime::builder().workers(1).build().unwrap();
//! let dir = std::env::temp_dir().join(format!("weft-fs-doc-{}", std::process::id()));
//! let back = rt.block_on(move || {
//!     weft_runtime::fs::write(&dir, b"hello").unwrap();
//!     let v = weft_runtime::fs::read(&dir).unwrap();
//!     std::fs::remove_file(&dir).unwrap();
//!     v
//! });
//! assert_eq!(back, b"hello");
//! ```

use crate::io::{self as rio, Fd};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("path {path:?} contains a NUL byte"),
        )
    })
}

/// Attaches the path to an error from opening it (the kind is kept).
fn with_path(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

/// Options for opening a [`File`], as `std::fs::OpenOptions`.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    read: bool,
    write: bool,
    append: bool,
    truncate: bool,
    create: bool,
    create_new: bool,
    mode: u32,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl OpenOptions {
    /// All options off (mode 0o666 before the umask).
    pub fn new() -> OpenOptions {
        OpenOptions {
            read: false,
            write: false,
            append: false,
            truncate: false,
            create: false,
            create_new: false,
            mode: 0o666,
        }
    }
    /// Open for reading.
    pub fn read(&mut self, on: bool) -> &mut Self {
        self.read = on;
        self
    }
    /// Open for writing.
    pub fn write(&mut self, on: bool) -> &mut Self {
        self.write = on;
        self
    }
    /// Writes go to the end of the file (implies write).
    pub fn append(&mut self, on: bool) -> &mut Self {
        self.append = on;
        self
    }
    /// Truncate an existing file to length 0.
    pub fn truncate(&mut self, on: bool) -> &mut Self {
        self.truncate = on;
        self
    }
    /// Create the file if it does not exist.
    pub fn create(&mut self, on: bool) -> &mut Self {
        self.create = on;
        self
    }
    /// Create the file, failing (`AlreadyExists`) if it exists.
    pub fn create_new(&mut self, on: bool) -> &mut Self {
        self.create_new = on;
        self
    }
    /// Permission bits of a created file (before the umask).
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.mode = mode;
        self
    }

    /// Opens `path` with these options.
    pub fn open(&self, path: impl AsRef<Path>) -> io::Result<File> {
        let path = path.as_ref();
        let write = self.write || self.append;
        let mut flags = match (self.read, write) {
            (true, false) => libc::O_RDONLY,
            (false, true) => libc::O_WRONLY,
            (true, true) => libc::O_RDWR,
            (false, false) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "OpenOptions: neither read nor write access was asked for",
                ))
            }
        };
        if self.append {
            flags |= libc::O_APPEND;
        }
        if self.truncate {
            flags |= libc::O_TRUNC;
        }
        if self.create_new {
            flags |= libc::O_CREAT | libc::O_EXCL;
        } else if self.create {
            flags |= libc::O_CREAT;
        }
        let fd =
            rio::open(cpath(path)?, flags, self.mode).map_err(|e| with_path(e, "open", path))?;
        Ok(File { fd })
    }
}

/// An open file (see the module comment). Closed, without blocking a worker, on drop.
pub struct File {
    fd: Fd,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File").field("fd", &self.fd.raw()).finish()
    }
}

impl File {
    /// Opens `path` for reading.
    pub fn open(path: impl AsRef<Path>) -> io::Result<File> {
        OpenOptions::new().read(true).open(path)
    }

    /// Creates (or truncates) `path` and opens it for writing.
    pub fn create(path: impl AsRef<Path>) -> io::Result<File> {
        OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
    }

    /// Options to open a file with.
    pub fn options() -> OpenOptions {
        OpenOptions::new()
    }

    /// Reads at the file position (advancing it); 0 at end of file.
    pub fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        rio::read(&self.fd, buf, None)
    }

    /// Writes at the file position (advancing it); may write less than `buf`.
    pub fn write(&self, buf: &[u8]) -> io::Result<usize> {
        rio::write(&self.fd, buf, None)
    }

    /// Reads at byte `offset`, leaving the file position alone.
    pub fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        rio::read(&self.fd, buf, Some(offset))
    }

    /// Writes at byte `offset`, leaving the file position alone.
    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        rio::write(&self.fd, buf, Some(offset))
    }

    /// Reads exactly `buf.len()` bytes at `offset` (`UnexpectedEof` if the file ends).
    pub fn read_exact_at(&self, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read_at(buf, offset)? {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the file ended before the buffer was filled",
                    ))
                }
                n => {
                    buf = &mut buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }

    /// Writes all of `buf` at `offset`.
    pub fn write_all_at(&self, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write_at(buf, offset)? {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n => {
                    buf = &buf[n..];
                    offset += n as u64;
                }
            }
        }
        Ok(())
    }

    /// Flushes data and metadata to the device (fsync).
    pub fn sync_all(&self) -> io::Result<()> {
        rio::fsync(&self.fd, false)
    }

    /// Flushes data to the device (fdatasync).
    pub fn sync_data(&self) -> io::Result<()> {
        rio::fsync(&self.fd, true)
    }
}

impl io::Read for File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        File::read(self, buf)
    }
}

impl io::Read for &File {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        File::read(self, buf)
    }
}

impl io::Write for File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        File::write(self, buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl io::Write for &File {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        File::write(self, buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl AsRawFd for File {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.raw()
    }
}

impl From<OwnedFd> for File {
    /// Adopts a descriptor (a pipe end, a `std::fs::File` turned into one, ...).
    fn from(fd: OwnedFd) -> File {
        File {
            fd: Fd::new(fd.into_raw_fd(), false),
        }
    }
}

impl From<std::fs::File> for File {
    fn from(f: std::fs::File) -> File {
        File::from(OwnedFd::from(f))
    }
}

impl FromRawFd for File {
    unsafe fn from_raw_fd(fd: RawFd) -> File {
        File {
            fd: Fd::new(fd, false),
        }
    }
}

impl IntoRawFd for File {
    /// The descriptor, which the caller then owns.
    ///
    /// # Panics
    /// Never in practice: only while an operation of this file is in flight, which a
    /// `File` given by value cannot have.
    fn into_raw_fd(self) -> RawFd {
        match self.fd.into_raw() {
            Ok(fd) => fd,
            Err(_) => panic!("File::into_raw_fd while an operation still uses the file"),
        }
    }
}

/// Reads the whole file at `path`.
pub fn read(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    let f = File::open(path.as_ref())?;
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut chunk)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&chunk[..n]);
        if n == chunk.len() && chunk.len() < (1 << 20) {
            chunk.resize(chunk.len() * 2, 0);
        }
    }
}

/// Writes `data` to `path`, creating or truncating it.
pub fn write(path: impl AsRef<Path>, data: impl AsRef<[u8]>) -> io::Result<()> {
    let f = File::create(path.as_ref())?;
    let mut data = data.as_ref();
    while !data.is_empty() {
        match f.write(data)? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => data = &data[n..],
        }
    }
    Ok(())
}
