//! The I/O driver each worker owns (placeholder: the io_uring backend and the thread
//! fallback are being built; see docs/runtime.md).

/// A worker's I/O driver.
pub(crate) struct Driver;

impl Driver {
    /// A driver for the worker that sleeps on eventfd `wake_fd`.
    pub(crate) fn new(_wake_fd: std::os::fd::RawFd) -> std::io::Result<Driver> {
        Ok(Driver)
    }

    /// Submits what is pending and reaps completions, waking their green threads.
    /// Returns how many completed.
    pub(crate) fn poll(&mut self) -> usize {
        0
    }

    /// Called just before the worker sleeps on its eventfd: whatever must be submitted
    /// so that a completion will ring that eventfd.
    pub(crate) fn before_sleep(&mut self) {}
}
