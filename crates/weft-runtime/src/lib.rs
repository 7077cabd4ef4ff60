//! # weft-runtime: the M:N runtime (layer 2)
//!
//! The runtime of issue 4 will run many green threads over one worker thread per CPU,
//! partitioned like the split multiprocessor model of the Fiasco kernel (seed 003):
//! each worker owns its run queue, timers and io_uring, and workers talk only through
//! an n x n matrix of message boxes.
//!
//! What exists today is that matrix ([`msgbox`]): single-producer single-consumer boxes
//! between every ordered pair of workers, a doorbell per receiver so a worker finds its
//! mail without polling every box, and a parker that lets an idle worker sleep on an
//! eventfd (which its io_uring will later wait on) and be woken by a sender without a
//! lost wake-up. The workers, run queues, timers and I/O come next.

pub mod msgbox;
mod sync;
