//! The fast paths of redis-benchmark's commands in `weft kv serve` (the built binary),
//! checked byte for byte on the wire and across a restart:
//!
//! - LRANGE writes its elements straight into the connection's output: the bytes are
//!   exactly RESP's array of bulk strings, in RESP2 and RESP3, pipelined among other
//!   commands, inside MULTI/EXEC, for a packed list and for a big one (several nodes);
//! - RPOP of a big list keeps where its last node's elements start between pops: runs
//!   of RPOPs mixed with every other list change answer what a double-ended queue
//!   answers, and the list after a restart (its log replayed) is the same;
//! - ZPOPMIN and ZSCORE of integer scores (written without formatting through text)
//!   and of other scores give `%.17g`'s text in RESP2 and RESP3.

mod common;
#[path = "common/kv.rs"]
mod kv;

use kv::{KvServer, Rng, CEILING};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use weft_kv::client::Client;
use weft_kv::resp::Reply;

fn server(dir: &std::path::Path) -> KvServer {
    KvServer::weft(&dir.join("data"), &dir.join("kv.sock"), &["--workers", "2"])
        .expect("weft kv serve starts")
}

/// A raw connection: sends requests, reads exactly the bytes expected.
struct Raw(UnixStream);

impl Raw {
    fn connect(s: &KvServer) -> Raw {
        let c = UnixStream::connect(&s.socket).unwrap();
        c.set_read_timeout(Some(CEILING)).unwrap();
        Raw(c)
    }

    /// Switches to RESP3: HELLO 3, its map read up to the PONG of a PING after it.
    fn hello3(&mut self) {
        self.0
            .write_all(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*1\r\n$4\r\nPING\r\n")
            .unwrap();
        let (mut hello, mut b) = (Vec::new(), [0u8; 1]);
        while !hello.ends_with(b"+PONG\r\n") {
            self.0.read_exact(&mut b).unwrap();
            hello.push(b[0]);
        }
    }

    /// Sends each command (pipelined, in one write), then reads as many bytes as
    /// `want` has and compares.
    fn expect(&mut self, cmds: &[&[&str]], want: &[u8]) {
        let mut req = Vec::new();
        for c in cmds {
            req.extend_from_slice(format!("*{}\r\n", c.len()).as_bytes());
            for a in *c {
                req.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
            }
        }
        self.0.write_all(&req).unwrap();
        let mut got = vec![0; want.len()];
        self.0.read_exact(&mut got).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want),
            "replies to {cmds:?}"
        );
    }
}

fn bulk(x: &str) -> String {
    format!("${}\r\n{x}\r\n", x.len())
}

fn array(items: &[String]) -> String {
    let mut s = format!("*{}\r\n", items.len());
    for x in items {
        s.push_str(&bulk(x));
    }
    s
}

/// A list's elements as LRANGE answers them.
fn elements(model: &VecDeque<String>) -> Reply {
    Reply::Array(
        model
            .iter()
            .map(|v| Reply::Bulk(v.clone().into()))
            .collect(),
    )
}

fn call(c: &mut Client, args: &[&str]) -> Reply {
    let a: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    c.command(&a).unwrap()
}

#[test]
fn lrange_writes_resp_arrays_in_both_protocols() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path());
    let mut c = s.client().unwrap();
    // "small" stays packed; "big" (3000 elements of up to 24 bytes) takes several nodes.
    let small: Vec<String> = (0..5).map(|i| format!("s{i}")).collect();
    let big: Vec<String> = (0..3000)
        .map(|i| format!("element-{i}-{}", "x".repeat(i % 13)))
        .collect();
    for (key, items) in [("small", &small), ("big", &big)] {
        for chunk in items.chunks(500) {
            let mut args = vec!["RPUSH", key];
            args.extend(chunk.iter().map(String::as_str));
            assert!(matches!(call(&mut c, &args), Reply::Int(_)));
        }
    }
    assert_eq!(
        call(&mut c, &["OBJECT", "ENCODING", "big"]),
        Reply::Bulk(b"quicklist".to_vec())
    );
    let mut raw = Raw::connect(&s);
    for proto in ["2", "3"] {
        if proto == "3" {
            raw.hello3();
        }
        let want = [
            array(&small),
            array(&big[..100]),
            ":3000\r\n".to_string(),
            array(&big[..600]),
            array(&big[2995..]),
            array(&big[1000..2001]),
            array(&[]),
            array(&[]),
            array(&small[1..4]),
            array(&big),
        ]
        .concat();
        raw.expect(
            &[
                &["LRANGE", "small", "0", "-1"],
                &["LRANGE", "big", "0", "99"],
                &["LLEN", "big"],
                &["LRANGE", "big", "0", "599"],
                &["LRANGE", "big", "-5", "-1"],
                &["LRANGE", "big", "1000", "2000"],
                &["LRANGE", "big", "10", "5"],
                &["LRANGE", "nokey", "0", "-1"],
                &["LRANGE", "small", "1", "3"],
                &["LRANGE", "big", "-100000", "100000"],
            ],
            want.as_bytes(),
        );
        // Inside MULTI/EXEC the replies come as EXEC's array.
        let want = format!(
            "+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n{}:5\r\n{}",
            array(&big[2990..]),
            array(&small[..2])
        );
        raw.expect(
            &[
                &["MULTI"],
                &["LRANGE", "big", "-10", "-1"],
                &["LLEN", "small"],
                &["LRANGE", "small", "0", "1"],
                &["EXEC"],
            ],
            want.as_bytes(),
        );
    }
    // Errors change nothing and come as errors.
    raw.expect(
        &[
            &["SET", "str", "v"],
            &["LRANGE", "str", "0", "1"],
            &["LRANGE", "big", "x", "1"],
        ],
        b"+OK\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n\
          -ERR value is not an integer or out of range\r\n",
    );
}

#[test]
fn rpop_runs_agree_with_a_deque_and_after_a_restart() {
    let steps = if std::env::var_os("WEFT_KV_STRESS").is_some() {
        200_000
    } else {
        3_000
    };
    let dir = tempfile::tempdir().unwrap();
    let mut model: VecDeque<String> = VecDeque::new();
    let mut rng = Rng(Rng::from_time());
    let seed = rng.0;
    {
        let s = server(dir.path());
        let mut c = s.client().unwrap();
        let mut next = 0;
        let mut fresh = |rng: &mut Rng| {
            next += 1;
            format!("v{next}{}", "y".repeat(rng.below(30) as usize))
        };
        for _ in 0..4000 {
            let v = fresh(&mut rng);
            call(&mut c, &["RPUSH", "l", &v]);
            model.push_back(v);
        }
        for step in 0..steps {
            let what = rng.below(20);
            let (got, want) = match what {
                // Mostly runs of RPOP, as a queue's consumer makes.
                0..=9 => {
                    let got = call(&mut c, &["RPOP", "l"]);
                    let want = model
                        .pop_back()
                        .map_or(Reply::Nil, |v| Reply::Bulk(v.into()));
                    (got, want)
                }
                10 => {
                    let n = rng.below(5) as usize;
                    let got = call(&mut c, &["RPOP", "l", &n.to_string()]);
                    let want = if model.is_empty() {
                        Reply::NilArray
                    } else {
                        let k = n.min(model.len());
                        Reply::Array(
                            (0..k)
                                .map(|_| Reply::Bulk(model.pop_back().unwrap().into()))
                                .collect(),
                        )
                    };
                    (got, want)
                }
                11..=13 => {
                    let v = fresh(&mut rng);
                    let got = call(&mut c, &["RPUSH", "l", &v]);
                    model.push_back(v);
                    (got, Reply::Int(model.len() as i64))
                }
                14 => {
                    let v = fresh(&mut rng);
                    let got = call(&mut c, &["LPUSH", "l", &v]);
                    model.push_front(v);
                    (got, Reply::Int(model.len() as i64))
                }
                15 => {
                    let got = call(&mut c, &["LPOP", "l"]);
                    let want = model
                        .pop_front()
                        .map_or(Reply::Nil, |v| Reply::Bulk(v.into()));
                    (got, want)
                }
                16 if !model.is_empty() => {
                    let i = rng.below(3u64.min(model.len() as u64)) as usize + 1;
                    let v = fresh(&mut rng);
                    let got = call(&mut c, &["LSET", "l", &format!("-{i}"), &v]);
                    let at = model.len() - i;
                    model[at] = v;
                    (got, Reply::OK)
                }
                17 if !model.is_empty() => {
                    let pivot = model
                        [model.len() - 1 - rng.below(model.len().min(4) as u64) as usize]
                        .clone();
                    let v = fresh(&mut rng);
                    let got = call(&mut c, &["LINSERT", "l", "BEFORE", &pivot, &v]);
                    let at = model.iter().position(|x| *x == pivot).unwrap();
                    model.insert(at, v);
                    (got, Reply::Int(model.len() as i64))
                }
                18 if !model.is_empty() => {
                    let victim = model
                        [model.len() - 1 - rng.below(model.len().min(4) as u64) as usize]
                        .clone();
                    let got = call(&mut c, &["LREM", "l", "1", &victim]);
                    let at = model.iter().position(|x| *x == victim).unwrap();
                    model.remove(at);
                    (got, Reply::Int(1))
                }
                _ => {
                    let got = call(&mut c, &["LINDEX", "l", "-1"]);
                    let want = model
                        .back()
                        .map_or(Reply::Nil, |v| Reply::Bulk(v.clone().into()));
                    (got, want)
                }
            };
            assert_eq!(got, want, "step {step} (op {what}), seed {seed}");
            if model.is_empty() {
                for _ in 0..rng.below(3000) + 1 {
                    let v = fresh(&mut rng);
                    call(&mut c, &["RPUSH", "l", &v]);
                    model.push_back(v);
                }
            }
        }
        let all = call(&mut c, &["LRANGE", "l", "0", "-1"]);
        let want = elements(&model);
        assert_eq!(all, want, "seed {seed}");
        let mut s = s;
        s.signal(15);
        assert!(s.wait_exit().success(), "{}", s.stderr());
    }
    // The log replayed gives the same list.
    let s = server(dir.path());
    let mut c = s.client().unwrap();
    let all = call(&mut c, &["LRANGE", "l", "0", "-1"]);
    let want = elements(&model);
    assert_eq!(all, want, "after the restart, seed {seed}");
}

#[test]
fn zpopmin_scores_are_g17_text_in_both_protocols() {
    let dir = tempfile::tempdir().unwrap();
    let s = server(dir.path());
    let mut raw = Raw::connect(&s);
    // Enough members for the big encoding too (zset-max-listpack-entries is 128).
    for key in ["small", "big"] {
        let mut add = vec!["ZADD", key];
        let scores = [
            "-2",
            "0",
            "1.5",
            "12345",
            "-99999999999999984",
            "99999999999999984",
            "1e17",
            "123456789012345678",
            "0.1",
            "9007199254740993",
        ];
        let members = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];
        for (s, m) in scores.iter().zip(members) {
            add.push(s);
            add.push(m);
        }
        let fill: Vec<String> = (0..200).map(|i| format!("zz{i}")).collect();
        if key == "big" {
            for m in &fill {
                add.push("1e300");
                add.push(m);
            }
        }
        let n = if key == "big" { 210 } else { 10 };
        raw.expect(&[&add], format!(":{n}\r\n").as_bytes());
    }
    // In score order: e -99999999999999984, a -2, b 0, i 0.1, c 1.5, d 12345,
    // j 9007199254740992 (the double nearest), f 99999999999999984, g 1e+17,
    // h 123456789012345680 (as %.17g writes the double nearest).
    let order = [
        ("e", "-99999999999999984"),
        ("a", "-2"),
        ("b", "0"),
        ("i", "0.10000000000000001"),
        ("c", "1.5"),
        ("d", "12345"),
        ("j", "9007199254740992"),
        ("f", "99999999999999984"),
        ("g", "1e+17"),
        ("h", "1.2345678901234568e+17"),
    ];
    for proto in ["2", "3"] {
        if proto == "3" {
            raw.hello3();
        }
        let score = |t: &str| {
            if proto == "2" {
                bulk(t)
            } else {
                format!(",{t}\r\n")
            }
        };
        for key in ["small", "big"] {
            // ZSCORE first (nothing changes), then ZPOPMIN takes them in order; the
            // second protocol's round pops from the members left.
            let half = if proto == "2" {
                &order[..5]
            } else {
                &order[5..]
            };
            for (m, t) in half {
                let want = format!("{}*2\r\n{}{}", score(t), bulk(m), score(t));
                raw.expect(&[&["ZSCORE", key, m], &["ZPOPMIN", key]], want.as_bytes());
            }
        }
    }
}
