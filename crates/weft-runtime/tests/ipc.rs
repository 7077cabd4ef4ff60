//! Synchronous IPC (`weft_runtime::ipc`): rendezvous, call/reply, timeouts, cancellation,
//! partner death, on one worker and across workers.

mod common;
use std::time::{Duration, Instant};
use weft_runtime::chan::oneshot;
use weft_runtime::ipc::{self, ErrorKind, Message, Stage, Timeout};
use weft_runtime::{spawn_on, Runtime};

fn rt(n: usize) -> Runtime {
    Runtime::builder().workers(n).build().unwrap()
}

/// A green thread on worker `w` that is alive and not in IPC (parked on a channel) until
/// the returned sender is used or dropped.
fn idle_on(w: usize) -> (weft_runtime::JoinHandle<()>, oneshot::Sender<()>) {
    let (tx, rx) = oneshot::channel::<()>();
    (
        spawn_on(w, move || {
            let _ = rx.recv();
        }),
        tx,
    )
}

/// A server on worker `w` that answers `x` with `x + 1` until cancelled.
fn adder(w: usize) -> weft_runtime::JoinHandle<u64> {
    spawn_on(w, || {
        let mut served = 0;
        let Ok((mut c, mut m)) = ipc::receive(None, Timeout::Never) else {
            return served;
        };
        loop {
            served += 1;
            match ipc::reply_and_wait(&c, Message::word(m.words[0] + 1), Timeout::Never) {
                Ok((c2, m2)) => (c, m) = (c2, m2),
                Err(e) if e.stage() == Stage::Send => match ipc::receive(None, Timeout::Never) {
                    Ok((c2, m2)) => (c, m) = (c2, m2),
                    Err(_) => return served,
                },
                Err(_) => return served,
            }
        }
    })
}

/// Cancels `h`'s IPC until it has ended (a thread not in IPC is not affected).
fn stop<T>(h: &weft_runtime::JoinHandle<T>) {
    while !h.is_finished() {
        ipc::cancel(&h.tid());
        weft_runtime::sleep(Duration::from_millis(1));
    }
}

#[test]
fn call_reply_on_one_worker_and_across() {
    for (server_w, client_w) in [(0, 0), (0, 1), (1, 0)] {
        let r = rt(2);
        let n = r.block_on(move || {
            let s = adder(server_w);
            let tid = s.tid();
            let c = spawn_on(client_w, move || {
                let mut n = 0;
                for _ in 0..1000 {
                    n = ipc::call(&tid, Message::word(n), Timeout::Never)
                        .unwrap()
                        .words[0];
                }
                n
            });
            let n = c.join().unwrap();
            stop(&s);
            assert_eq!(s.join().unwrap(), 1000);
            n
        });
        assert_eq!(n, 1000, "server on {server_w}, client on {client_w}");
    }
}

#[test]
fn zero_timeout_send_fails_when_receiver_not_waiting_and_gives_message_back() {
    let r = rt(2);
    r.block_on(|| {
        for w in 0..2 {
            let (idle, release) = idle_on(w);
            let tid = idle.tid();
            let msg = Message::word(7).with_payload(vec![1, 2, 3]);
            let e = ipc::send(&tid, msg.clone(), Timeout::Zero).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::TimedOut);
            assert_eq!(e.stage(), Stage::Send);
            assert_eq!(e.into_message(), Some(msg));
            drop(release);
            idle.join().unwrap();
        }
    });
}

#[test]
fn finite_timeouts_expire_on_both_stages() {
    let r = rt(2);
    r.block_on(|| {
        for w in 0..2 {
            let (idle, release) = idle_on(w);
            let tid = idle.tid();
            let t = Instant::now();
            let e = ipc::send(
                &tid,
                Message::word(1),
                Timeout::After(Duration::from_millis(20)),
            )
            .unwrap_err();
            assert_eq!((e.kind(), e.stage()), (ErrorKind::TimedOut, Stage::Send));
            assert!(t.elapsed() >= Duration::from_millis(20));
            let t = Instant::now();
            let e =
                ipc::receive(Some(&tid), Timeout::After(Duration::from_millis(20))).unwrap_err();
            assert_eq!((e.kind(), e.stage()), (ErrorKind::TimedOut, Stage::Receive));
            assert!(t.elapsed() >= Duration::from_millis(20));
            let e = ipc::receive(None, Timeout::Zero).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::TimedOut);
            drop(release);
            idle.join().unwrap();
        }
    });
}

#[test]
fn a_waiting_sender_gets_partner_dead_when_the_receiver_exits() {
    let r = rt(2);
    r.block_on(|| {
        for w in 0..2 {
            let victim = spawn_on(w, || weft_runtime::sleep(Duration::from_millis(30)));
            let tid = victim.tid();
            let e = ipc::send(&tid, Message::word(1), Timeout::Never).unwrap_err();
            assert_eq!((e.kind(), e.stage()), (ErrorKind::PartnerDead, Stage::Send));
            assert!(e.into_message().is_some());
            victim.join().unwrap();
            // And afterwards, at once.
            let e = ipc::send(&tid, Message::word(1), Timeout::Never).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::PartnerDead);
            let e = ipc::receive(Some(&tid), Timeout::Never).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::PartnerDead);
        }
    });
}

#[test]
fn a_caller_gets_partner_dead_when_the_server_exits_before_replying() {
    let r = rt(2);
    r.block_on(|| {
        for w in 0..2 {
            let server = spawn_on(w, || {
                let (_c, m) = ipc::receive(None, Timeout::Never).unwrap();
                m.words[0]
            });
            let e = ipc::call(&server.tid(), Message::word(5), Timeout::Never).unwrap_err();
            assert_eq!(
                (e.kind(), e.stage()),
                (ErrorKind::PartnerDead, Stage::Receive)
            );
            // The request was delivered: it is not given back (across workers it travels
            // as a copy in the request, and the sender's own copy is stale).
            assert!(e.into_message().is_none(), "a delivered message came back");
            assert_eq!(server.join().unwrap(), 5);
        }
    });
}

#[test]
fn cancel_wakes_a_blocked_thread_with_cancelled() {
    let r = rt(2);
    r.block_on(|| {
        for w in 0..2 {
            let waiter = spawn_on(w, || ipc::receive(None, Timeout::Never).unwrap_err().kind());
            let tid = waiter.tid();
            // A thread not (yet) in IPC is not affected: cancel until it was blocked.
            while !waiter.is_finished() {
                ipc::cancel(&tid);
                weft_runtime::sleep(Duration::from_millis(5));
            }
            assert_eq!(waiter.join().unwrap(), ErrorKind::Cancelled);
        }
    });
}

/// Every word of a message arrives, on one worker and across (where a message without a
/// payload whose fourth word is 0 travels as a copy in the request, and any other is
/// taken from the sender), and a refused send gets its own message back, payload or
/// not.
#[test]
fn all_four_words_arrive_and_a_refused_send_gets_its_message_back() {
    let r = rt(2);
    r.block_on(|| {
        for w in 0..2 {
            let server = spawn_on(w, || {
                let mut got = Vec::new();
                for _ in 0..3 {
                    let (c, m) = ipc::receive(None, Timeout::Never).unwrap();
                    let sum = m.words.iter().fold(0u64, |a, b| a.wrapping_add(*b));
                    got.push((m.words, m.payload.map(|p| p.len())));
                    ipc::send(&c, Message::new([sum, 7, 8, 9]), Timeout::Zero).unwrap();
                }
                got
            });
            let tid = server.tid();
            let words = [u64::MAX, 1 << 40, 3, 0x5eed];
            let r1 = ipc::call(&tid, Message::new(words), Timeout::Never).unwrap();
            let sum = words.iter().fold(0u64, |a, b| a.wrapping_add(*b));
            assert_eq!(r1.words, [sum, 7, 8, 9]);
            let r2 = ipc::call(
                &tid,
                Message::new([1, 2, 3, 4]).with_payload(vec![5; 10]),
                Timeout::Never,
            )
            .unwrap();
            assert_eq!(r2.words, [10, 7, 8, 9]);
            let three = [u64::MAX - 1, 1 << 63, 12345, 0];
            let r3 = ipc::call(&tid, Message::new(three), Timeout::Never).unwrap();
            let sum3 = three.iter().fold(0u64, |a, b| a.wrapping_add(*b));
            assert_eq!(r3.words, [sum3, 7, 8, 9]);
            assert_eq!(
                server.join().unwrap(),
                vec![(words, None), ([1, 2, 3, 4], Some(10)), (three, None)],
                "server on worker {w}"
            );
            // Refused (nobody receives): the message comes back whole, both kinds.
            let (idle, release) = idle_on(w);
            let e = ipc::send(&idle.tid(), Message::new(words), Timeout::Zero).unwrap_err();
            assert_eq!((e.kind(), e.stage()), (ErrorKind::TimedOut, Stage::Send));
            assert_eq!(e.into_message().map(|m| m.words), Some(words));
            let e = ipc::send(
                &idle.tid(),
                Message::new(words).with_payload(vec![1, 2, 3]),
                Timeout::Zero,
            )
            .unwrap_err();
            let m = e
                .into_message()
                .expect("a refused send gives its message back");
            assert_eq!((m.words, m.payload), (words, Some(vec![1, 2, 3])));
            drop(release);
            idle.join().unwrap();
        }
    });
}

#[test]
fn payload_moves_without_copy() {
    let r = rt(2);
    r.block_on(|| {
        let server = spawn_on(1, || {
            let (c, m) = ipc::receive(None, Timeout::Never).unwrap();
            let p = m.payload.unwrap();
            let addr = p.as_ptr() as usize;
            ipc::send(
                &c,
                Message::word(addr as u64).with_payload(p),
                Timeout::Zero,
            )
            .unwrap();
        });
        let payload = vec![42u8; 4096];
        let addr = payload.as_ptr() as usize;
        let reply = ipc::call(
            &server.tid(),
            Message::word(0).with_payload(payload),
            Timeout::Never,
        )
        .unwrap();
        assert_eq!(reply.words[0] as usize, addr, "the buffer itself moved");
        let back = reply.payload.unwrap();
        assert_eq!(back.as_ptr() as usize, addr);
        server.join().unwrap();
    });
}

#[test]
fn not_a_green_thread_and_invalid_partner_are_clear_errors() {
    let r = rt(1);
    let h = r.spawn(|| weft_runtime::sleep(Duration::from_millis(20)));
    let e = ipc::send(&h.tid(), Message::word(1), Timeout::Never).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotGreenThread);
    assert!(e.to_string().contains("green thread"), "{e}");
    assert!(e.into_message().is_some());
    r.block_on(|| {
        let e = ipc::send(&ipc::me(), Message::word(1), Timeout::Never).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidPartner);
    });
    h.join().unwrap();
}

#[test]
fn a_tid_taken_after_the_thread_exited_is_dead() {
    let r = rt(2);
    r.block_on(|| {
        let h = spawn_on(1, || 3);
        while !h.is_finished() {
            weft_runtime::yield_now();
        }
        let tid = h.tid();
        assert!(tid.is_dead());
        let e = ipc::send(&tid, Message::word(1), Timeout::Never).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PartnerDead);
        assert_eq!(h.join().unwrap(), 3);
    });
}

#[test]
fn tid_from_id_finds_live_identities() {
    let r = rt(1);
    r.block_on(|| {
        let me = ipc::me();
        assert_eq!(ipc::Tid::from_id(me.id()), Some(me.clone()));
        assert_eq!(ipc::Tid::from_id(u64::MAX), None);
    });
}

/// An identity lives as long as its thread or a `Tid` of it: once both are gone, its id
/// is unknown, also after cross-worker traffic (whose counts the workers keep for
/// their next requests: they must not keep a dead thread's identity alive).
#[test]
fn an_ended_thread_is_unknown_once_no_tid_refers_to_it() {
    for (server_w, client_w) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let r = rt(2);
        r.block_on(move || {
            let s = adder(server_w);
            let tid = s.tid();
            let id = tid.id();
            let c = spawn_on(client_w, move || {
                for i in 0..100 {
                    let r = ipc::call(&tid, Message::word(i), Timeout::Never).unwrap();
                    assert_eq!(r.words[0], i + 1);
                }
                // The caller's own operation state may keep its last partner until
                // its next operation: end that here, with a receive that times out.
                let _ = ipc::receive(None, Timeout::Zero);
            });
            c.join().unwrap();
            stop(&s);
            assert_eq!(s.join().unwrap(), 100);
            assert_eq!(
                ipc::Tid::from_id(id),
                None,
                "server on {server_w}, client on {client_w}: the ended server is still found"
            );
        });
    }
}

/// A `Tid` of a live thread dropped on that thread's worker banks its count in the
/// thread's identity (the thread's next call takes it back instead of counting again);
/// the thread's exit gives banked counts back. So an ended thread is unknown exactly
/// when no `Tid` refers to it any more, however many were dropped beside it.
#[test]
fn banked_counts_never_keep_an_ended_thread_findable() {
    for (server_w, client_w) in [(0, 0), (1, 0)] {
        let r = rt(2);
        r.block_on(move || {
            let s = adder(server_w);
            let tid = s.tid();
            let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
            let c = spawn_on(client_w, move || {
                // Wait (as a green thread: park, not block) until the Tids below are
                // dropped, then call: the calls take the banked counts back.
                while go_rx.try_recv().is_err() {
                    weft_runtime::sleep(Duration::from_millis(1));
                }
                for i in 0..20 {
                    let r = ipc::call(&tid, Message::word(i), Timeout::Never).unwrap();
                    assert_eq!(r.words[0], i + 1);
                }
            });
            let ct = c.tid();
            let id = ct.id();
            // Drop Tids of the client on its worker, while it lives: more than its 20
            // calls take back, so some are still banked when it ends.
            spawn_on(client_w, move || {
                for _ in 0..50 {
                    drop(ipc::Tid::from_id(id).expect("the client lives"));
                }
                drop(ct);
            })
            .join()
            .unwrap();
            go_tx.send(()).unwrap();
            c.join().unwrap();
            // (The server keeps a count on its last client as a spare until it ends.)
            stop(&s);
            assert_eq!(s.join().unwrap(), 20);
            assert_eq!(
                ipc::Tid::from_id(id),
                None,
                "client on {client_w}: its banked counts kept it findable"
            );
        });
    }
}

/// Worker numbers repeat from one runtime to the next: a `Tid` dropped on worker 0 of
/// one runtime, of a thread on worker 0 of another, must not bank its count in that
/// thread's identity (its state belongs to the other runtime's worker, which is using
/// it meanwhile). Here runtime B's client calls in a loop, taking banked counts back,
/// while a thread of runtime A drops `Tid`s of it: every count must come back once.
#[test]
fn a_tid_dropped_in_another_runtime_is_not_banked_there() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    // Not pinned: the two workers 0 run on two CPUs at once.
    let one = || Runtime::builder().workers(1).pin(false).build().unwrap();
    let (a, b) = (one(), one());
    let running = Arc::new(AtomicBool::new(true));
    let (id_tx, id_rx) = std::sync::mpsc::channel();
    let r2 = running.clone();
    let b_side = std::thread::spawn(move || {
        b.block_on(move || {
            let s = adder(0);
            let tid = s.tid();
            let c = spawn_on(0, move || {
                let mut n = 0u64;
                while r2.load(Ordering::Relaxed) {
                    n = ipc::call(&tid, Message::word(n), Timeout::Never)
                        .unwrap()
                        .words[0];
                }
            });
            id_tx.send(c.tid().id()).unwrap();
            c.join().unwrap();
            stop(&s);
            s.join().unwrap();
        });
    });
    let id = id_rx.recv().unwrap();
    a.block_on(move || {
        spawn_on(0, move || {
            let t = ipc::Tid::from_id(id).expect("the client runs");
            for _ in 0..2_000_000 {
                drop(t.clone());
            }
        })
        .join()
        .unwrap();
    });
    running.store(false, Ordering::Relaxed);
    b_side.join().unwrap();
    assert_eq!(
        ipc::Tid::from_id(id),
        None,
        "the ended client is still found: a count was lost"
    );
}

#[test]
fn reply_and_wait_takes_a_request_that_queued_during_the_reply() {
    // Two clients on the other worker call one server: while the server replies to
    // one, the other's request queues; the server must take it at once.
    let r = rt(2);
    r.block_on(|| {
        let server = adder(0);
        let tid = server.tid();
        let clients: Vec<_> = (0..4)
            .map(|_| {
                let tid = tid.clone();
                spawn_on(1, move || {
                    let mut n = 0;
                    for _ in 0..2000 {
                        n = ipc::call(&tid, Message::word(n), Timeout::Never)
                            .unwrap()
                            .words[0];
                    }
                    n
                })
            })
            .collect();
        for c in clients {
            assert_eq!(c.join().unwrap(), 2000);
        }
        stop(&server);
        assert_eq!(server.join().unwrap(), 8000);
    });
}

#[test]
fn cancel_from_a_plain_os_thread() {
    let r = rt(2);
    let waiter = r.spawn(|| ipc::receive(None, Timeout::Never).unwrap_err().kind());
    let tid = waiter.tid();
    // A thread not (yet) in IPC is not affected: cancel until it was blocked.
    while !waiter.is_finished() {
        ipc::cancel(&tid);
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(waiter.join().unwrap(), ErrorKind::Cancelled);
}

/// Runs `beside` on worker 0 of a one-worker runtime while a client and a server there
/// call each other in a loop (each call a direct switch to the other), until `beside`
/// returns; fails with `stuck` if that takes 60 s.
fn beside_a_local_ping_pong<T: Send + 'static>(
    stuck: &'static str,
    beside: impl FnOnce() -> T + Send + 'static,
) -> T {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    rt(1).block_on(move || {
        let server = adder(0);
        let tid = server.tid();
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let pinger = spawn_on(0, move || {
            let t = Instant::now();
            let mut n = 0u64;
            while !d.load(Ordering::Relaxed) {
                n = ipc::call(&tid, Message::word(n), Timeout::Never)
                    .unwrap()
                    .words[0];
                assert!(t.elapsed() < Duration::from_secs(60), "{stuck}");
            }
            n
        });
        let out = spawn_on(0, move || {
            let out = beside();
            done.store(true, Ordering::Relaxed);
            out
        })
        .join()
        .unwrap();
        assert!(pinger.join().unwrap() > 0);
        stop(&server);
        server.join().unwrap();
        out
    })
}

#[test]
fn timers_fire_beside_a_local_ping_pong() {
    // A pair calling each other on one worker switches straight between the two; the
    // worker must still look at its timers (a sleep beside them used to never return).
    beside_a_local_ping_pong(
        "a 5 x 1 ms sleep did not return beside the ping-pong",
        || {
            for _ in 0..5 {
                weft_runtime::sleep(Duration::from_millis(1));
            }
        },
    );
}

/// As above for I/O: a read beside a same-worker ping-pong completes. The ping-pong's
/// direct switches skip the worker's polling pick only while there is nothing to poll
/// (no mail, no timer, the I/O ring idle), so a completion that arrives must be seen.
#[test]
fn io_completes_beside_a_local_ping_pong() {
    use std::io::Write;
    let (a, mut b) = weft_runtime::net::UnixStream::pair().unwrap();
    // The write comes from a plain OS thread once the ping-pong runs.
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        b.write_all(b"hello").unwrap();
        b
    });
    let got = beside_a_local_ping_pong("a read did not complete beside the ping-pong", move || {
        let mut buf = [0u8; 5];
        let n = a.read(&mut buf).unwrap();
        buf[..n].to_vec()
    });
    assert_eq!(got, b"hello");
    drop(writer.join().unwrap());
}

/// The same-worker direct paths (a call or a reply that switches straight to its
/// waiting partner) in the cases they must get right or leave to the general path: a
/// server in a closed receive from its client, a third ready thread that must not
/// starve beside the ping-pong, and a client cancelled while its server holds its call.
#[test]
fn one_worker_direct_calls_and_replies_keep_the_semantics() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let r = rt(1);
    r.block_on(|| {
        // A closed receive: the server waits for this client only, then replies.
        let me = ipc::me();
        let server = spawn_on(0, move || {
            let (from, m) = ipc::receive(Some(&me), Timeout::Never).unwrap();
            assert_eq!(from, me);
            ipc::send(&from, Message::word(m.words[0] * 2), Timeout::Zero).unwrap();
        });
        let tid = server.tid();
        while ipc::call(&tid, Message::word(21), Timeout::Zero)
            .map(|m| assert_eq!(m.words[0], 42))
            .is_err()
        {
            weft_runtime::yield_now(); // (not receiving yet)
        }
        server.join().unwrap();

        // A yielding thread beside a ping-pong keeps running.
        let server = adder(0);
        let tid = server.tid();
        let yields = Arc::new(AtomicU64::new(0));
        let y = yields.clone();
        let yielder = spawn_on(0, move || {
            while y.load(Ordering::Relaxed) < 1000 {
                y.fetch_add(1, Ordering::Relaxed);
                weft_runtime::yield_now();
            }
        });
        let t = Instant::now();
        let mut n = 0;
        while yields.load(Ordering::Relaxed) < 1000 {
            n = ipc::call(&tid, Message::word(n), Timeout::Never)
                .unwrap()
                .words[0];
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "a yielding thread starved beside a ping-pong ({} yields)",
                yields.load(Ordering::Relaxed)
            );
        }
        yielder.join().unwrap();
        stop(&server);
        assert_eq!(server.join().unwrap(), n);

        // A client cancelled while the server holds its call: the call fails at its
        // receive stage (its message was delivered), and the server's reply, finding no
        // caller, fails at its send stage and gives the reply back.
        let server = spawn_on(0, || {
            let (c, m) = ipc::receive(None, Timeout::Never).unwrap();
            assert_eq!(m.words[0], 7);
            ipc::cancel(&c);
            // (Let the client see its cancellation first: a reply delivered before it
            // runs would win the race, as it may.)
            weft_runtime::yield_now();
            let e = ipc::reply_and_wait(&c, Message::word(8), Timeout::Never).unwrap_err();
            (e.kind(), e.stage(), e.into_message().map(|m| m.words[0]))
        });
        let tid = server.tid();
        let e = loop {
            match ipc::call(&tid, Message::word(7), Timeout::Zero) {
                Err(e) if e.stage() == Stage::Send => weft_runtime::yield_now(),
                r => break r.unwrap_err(),
            }
        };
        assert_eq!(
            (e.kind(), e.stage()),
            (ErrorKind::Cancelled, Stage::Receive)
        );
        assert!(e.into_message().is_none(), "a delivered message came back");
        assert_eq!(
            server.join().unwrap(),
            (ErrorKind::TimedOut, Stage::Send, Some(8))
        );
    });
}

/// A runtime dropped while a client waits in a direct call (its server took the request
/// and then parked for good): shutdown unwinds both stacks, and both threads report the
/// shutdown. (Also run under memcheck with the rest of this file.)
#[test]
fn shutdown_unwinds_a_client_waiting_in_a_direct_call() {
    use common::Flag;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let dropped = Arc::new(AtomicUsize::new(0));
    let got = Arc::new(AtomicUsize::new(0));
    let r = rt(1);
    let (f, g) = (Flag(dropped.clone()), got.clone());
    let server = r.spawn_on(0, move || {
        let _f = f;
        let (_c, m) = ipc::receive(None, Timeout::Never).unwrap();
        g.store(m.words[0] as usize, Ordering::SeqCst);
        loop {
            weft_runtime::park::park(); // never woken: the client waits for good
        }
    });
    let tid = server.tid();
    let f = Flag(dropped.clone());
    let client = r.spawn_on(0, move || {
        let _f = f;
        // (Until the server waits, a call with timeout zero fails at its send.)
        while let Err(e) = ipc::call(&tid, Message::word(7), Timeout::Zero) {
            assert_eq!(e.stage(), Stage::Send, "{e}");
            weft_runtime::yield_now();
        }
        unreachable!("the server never replies");
    });
    let t = Instant::now();
    while got.load(Ordering::SeqCst) != 7 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "the call never arrived"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(r);
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        2,
        "both stacks were unwound"
    );
    assert!(server.join().unwrap_err().is::<weft_runtime::Shutdown>());
    assert!(client.join().unwrap_err().is::<weft_runtime::Shutdown>());
}

/// Every test of this file again under valgrind's memcheck, in one process: no invalid
/// access, no use of uninitialised memory (the fiber core registers its stacks with
/// valgrind, so memcheck follows the switches).
#[test]
fn ipc_tests_run_clean_under_memcheck() {
    common::memcheck_this_binary(&["ipc_tests_run_clean_under_memcheck"]);
}
