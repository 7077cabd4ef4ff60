//! SORT in `weft kv serve` (the built binary, two workers, so a SORT's key, the keys
//! its patterns name and its STORE destination fall on shards of both):
//!
//! - COMMAND GETKEYS names SORT's key and its STORE destination;
//! - SORT answers the same flat array in RESP2 and RESP3 (nil for what GET does not
//!   find);
//! - SORT ... STORE inside MULTI/EXEC, over both shards, and a WATCHed destination
//!   that SORT ... STORE removes (an empty result) aborts the EXEC;
//! - the stored lists are the same after a restart from the logs.

mod common;
#[path = "common/kv.rs"]
mod kv;

use kv::{bulk, run, KvServer};
use weft_kv::resp::Reply;

fn server(dir: &std::path::Path) -> KvServer {
    KvServer::weft(&dir.join("data"), &dir.join("kv.sock"), &["--workers", "2"])
        .expect("weft kv serve starts")
}

fn bulks(v: &[&str]) -> Reply {
    Reply::Array(v.iter().map(|s| bulk(s)).collect())
}

#[test]
fn sort_through_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let srv = server(dir.path());
    let mut c = srv.client().unwrap();
    assert_eq!(
        run(
            &mut c,
            &["command", "getkeys", "sort", "src", "store", "dst"]
        ),
        bulks(&["src", "dst"])
    );
    // GET's and BY's arguments are not keys, even when they read "store".
    assert_eq!(
        run(
            &mut c,
            &[
                "command", "getkeys", "sort", "src", "get", "store", "by", "store", "limit", "0",
                "1"
            ]
        ),
        bulks(&["src"])
    );
    assert_eq!(
        run(&mut c, &["command", "getkeys", "sort_ro", "src"]),
        bulks(&["src"])
    );
    run(&mut c, &["rpush", "ids", "2", "1", "3"]);
    run(
        &mut c,
        &[
            "mset", "w_1", "9", "w_2", "8", "w_3", "7", "n_1", "one", "n_3", "three",
        ],
    );
    let want = Reply::Array(vec![bulk("three"), Reply::Nil, bulk("one")]);
    assert_eq!(
        run(&mut c, &["sort", "ids", "by", "w_*", "get", "n_*"]),
        want
    );
    c.hello(3).unwrap();
    assert_eq!(
        run(&mut c, &["sort_ro", "ids", "by", "w_*", "get", "n_*"]),
        want
    );
    // In a transaction, over both shards.
    assert_eq!(run(&mut c, &["multi"]), Reply::Simple("OK".into()));
    for dest in ["d0", "d1", "d2", "d3"] {
        assert_eq!(
            run(&mut c, &["sort", "ids", "desc", "store", dest]),
            Reply::Simple("QUEUED".into())
        );
    }
    assert_eq!(run(&mut c, &["exec"]), Reply::Array(vec![Reply::Int(3); 4]));
    // A watched destination removed by an empty result aborts EXEC.
    let mut other = srv.client().unwrap();
    run(&mut c, &["watch", "d3"]);
    assert_eq!(
        run(&mut other, &["sort", "nokey", "store", "d3"]),
        Reply::Int(0)
    );
    run(&mut c, &["multi"]);
    run(&mut c, &["get", "x"]);
    assert!(matches!(
        run(&mut c, &["exec"]),
        Reply::Nil | Reply::NilArray
    ));
    drop((c, other, srv));
    let srv = server(dir.path());
    let mut c = srv.client().unwrap();
    for dest in ["d0", "d1", "d2"] {
        assert_eq!(
            run(&mut c, &["lrange", dest, "0", "-1"]),
            bulks(&["3", "2", "1"])
        );
    }
    assert_eq!(run(&mut c, &["exists", "d3"]), Reply::Int(0));
}
