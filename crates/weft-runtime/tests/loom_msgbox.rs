//! loom models of the message boxes, run on the real code built with loom's atomics
//! and parking: `cargo test -p weft-runtime --features loom --test loom_msgbox`
//! (`make test` runs them).
//!
//! - a message sent while the receiver is going to sleep always wakes it (a lost
//!   wake-up shows as a deadlock, which loom reports): the doorbell protocol of
//!   `src/msgbox/park.rs`;
//! - a sender whose doorbell bit is still set does not ring: a message sent while the
//!   receiver clears that bit (its box went quiet), or while it goes to sleep with the
//!   bit set, is still found (the fences of `park.rs`; built with `STICKY_POLLS` = 1,
//!   so one empty poll clears a bit);
//! - messages that overflow a full box arrive, in order, none lost or doubled;
//! - two workers sending to each other at once both get their mail;
//! - a wake-up without mail (shutdown) is not lost, whenever it comes.
#![cfg(feature = "loom")]

use loom::thread;
use weft_runtime::msgbox::matrix;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// Receives until `count` messages have arrived, sleeping when there are none.
fn receive(e: &mut weft_runtime::msgbox::Endpoint<u32>, count: usize) -> Vec<(usize, u32)> {
    let mut got = Vec::new();
    loop {
        e.poll(|from, m| got.push((from, m)));
        if got.len() >= count {
            return got;
        }
        e.wait(None);
    }
}

#[test]
fn a_message_always_wakes_a_sleeping_receiver() {
    model(|| {
        let mut e = matrix::<u32>(2, 2).unwrap();
        let (mut a, mut b) = (e.remove(0), e.remove(0));
        let sender = thread::spawn(move || a.send(1, 7));
        assert_eq!(receive(&mut b, 1), vec![(0, 7)]);
        sender.join().unwrap();
    });
}

#[test]
fn a_wake_up_without_mail_is_not_lost() {
    model(|| {
        let mut e = matrix::<u32>(2, 2).unwrap();
        let (a, mut b) = (e.remove(0), e.remove(0));
        let waker = thread::spawn(move || a.wake(1));
        b.wait(None); // must return, whether the wake-up comes before or during the sleep
        waker.join().unwrap();
    });
}

#[test]
fn overflow_arrives_in_order() {
    model(|| {
        let mut e = matrix::<u32>(2, 2).unwrap();
        let (mut a, mut b) = (e.remove(0), e.remove(0));
        let sender = thread::spawn(move || {
            for i in 0..3 {
                a.send(1, i); // capacity 2: the third waits in a's overflow
            }
            // Room is found by retrying (on a timed sleep in real use; loom has no
            // time, so here by yielding): what this checks is order and no loss.
            while a.flush() {
                thread::yield_now();
            }
        });
        assert_eq!(receive(&mut b, 3), vec![(0, 0), (0, 1), (0, 2)]);
        sender.join().unwrap();
    });
}

#[test]
fn two_workers_sending_to_each_other_both_get_their_mail() {
    model(|| {
        let mut e = matrix::<u32>(2, 2).unwrap();
        let (mut a, mut b) = (e.remove(0), e.remove(0));
        let t = thread::spawn(move || {
            a.send(1, 1);
            receive(&mut a, 1)
        });
        b.send(0, 2);
        assert_eq!(receive(&mut b, 1), vec![(0, 1)]);
        assert_eq!(t.join().unwrap(), vec![(1, 2)]);
    });
}

#[test]
fn a_message_sent_while_its_bit_is_being_cleared_is_found() {
    model(|| {
        let mut e = matrix::<u32>(2, 4).unwrap();
        let (mut a, mut b) = (e.remove(0), e.remove(0));
        a.send(1, 1); // sets a's bit on b's doorbell
        let sender = thread::spawn(move || {
            a.send(1, 2); // may see the bit still set, and not ring
            a
        });
        // b takes message 1; a poll that finds the box empty clears the bit (and looks
        // again); then b sleeps until message 2 is there.
        let mut got = Vec::new();
        b.poll(|from, m| got.push((from, m)));
        b.poll(|from, m| got.push((from, m)));
        got.extend(receive(&mut b, 2 - got.len()));
        assert_eq!(got, vec![(0, 1), (0, 2)]);
        sender.join().unwrap();
    });
}

#[test]
fn a_sender_with_its_bit_set_still_wakes_a_receiver_going_to_sleep() {
    model(|| {
        let mut e = matrix::<u32>(2, 4).unwrap();
        let (mut a, mut b) = (e.remove(0), e.remove(0));
        a.send(1, 1);
        assert_eq!(receive(&mut b, 1), vec![(0, 1)]); // the bit stays set (sticky)
        let sender = thread::spawn(move || {
            a.send(1, 2);
            a.send(1, 3);
            a
        });
        assert_eq!(receive(&mut b, 2), vec![(0, 2), (0, 3)]);
        sender.join().unwrap();
    });
}
