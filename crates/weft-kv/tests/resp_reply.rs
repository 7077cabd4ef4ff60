//! Reply encodings: every variant in RESP2 and RESP3, byte for byte, and the double
//! formatting of Redis 7.2's d2string.

use std::borrow::Cow;
use weft_kv::resp::reply::format_double;
use weft_kv::resp::Reply;

fn both(reply: &Reply, resp2: &[u8], resp3: &[u8]) {
    assert_eq!(
        String::from_utf8_lossy(&reply.encode_to_vec(2)),
        String::from_utf8_lossy(resp2),
        "RESP2 of {reply:?}"
    );
    assert_eq!(
        String::from_utf8_lossy(&reply.encode_to_vec(3)),
        String::from_utf8_lossy(resp3),
        "RESP3 of {reply:?}"
    );
}

fn same(reply: &Reply, bytes: &[u8]) {
    both(reply, bytes, bytes);
}

fn double(d: f64) -> String {
    let mut out = Vec::new();
    format_double(d, &mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn scalars() {
    same(&Reply::OK, b"+OK\r\n");
    same(&Reply::Simple(Cow::Owned("PONG".into())), b"+PONG\r\n");
    same(
        &Reply::err("ERR unknown command 'x'"),
        b"-ERR unknown command 'x'\r\n",
    );
    same(
        &Reply::error("WRONGTYPE Operation".into()),
        b"-WRONGTYPE Operation\r\n",
    );
    same(&Reply::Int(0), b":0\r\n");
    same(&Reply::Int(-42), b":-42\r\n");
    same(&Reply::Int(i64::MAX), b":9223372036854775807\r\n");
    same(&Reply::Int(i64::MIN), b":-9223372036854775808\r\n");
    same(&Reply::bulk(b"foo"), b"$3\r\nfoo\r\n");
    same(&Reply::Bulk(vec![]), b"$0\r\n\r\n");
    same(&Reply::bulk(b"a\r\nb\0"), b"$5\r\na\r\nb\0\r\n");
    both(&Reply::Nil, b"$-1\r\n", b"_\r\n");
    both(&Reply::NilArray, b"*-1\r\n", b"_\r\n");
    both(&Reply::Bool(true), b":1\r\n", b"#t\r\n");
    both(&Reply::Bool(false), b":0\r\n", b"#f\r\n");
    both(&Reply::Double(3.5), b"$3\r\n3.5\r\n", b",3.5\r\n");
    // Both as Redis 7.0 writes them: %.17g.
    both(
        &Reply::Double(0.1),
        b"$19\r\n0.10000000000000001\r\n",
        b",0.10000000000000001\r\n",
    );
    both(
        &Reply::Double(9223372036854775808.0),
        b"$22\r\n9.2233720368547758e+18\r\n",
        b",9.2233720368547758e+18\r\n",
    );
    both(&Reply::Double(f64::INFINITY), b"$3\r\ninf\r\n", b",inf\r\n");
    both(
        &Reply::Double(f64::NEG_INFINITY),
        b"$4\r\n-inf\r\n",
        b",-inf\r\n",
    );
    both(&Reply::Double(f64::NAN), b"$3\r\nnan\r\n", b",nan\r\n");
    both(
        &Reply::Verbatim("txt", b"hello\r\n".to_vec()),
        b"$7\r\nhello\r\n\r\n",
        b"=11\r\ntxt:hello\r\n\r\n",
    );
}

#[test]
fn aggregates() {
    same(&Reply::Array(vec![]), b"*0\r\n");
    both(
        &Reply::Array(vec![Reply::bulk(b"a"), Reply::Nil, Reply::Int(1)]),
        b"*3\r\n$1\r\na\r\n$-1\r\n:1\r\n",
        b"*3\r\n$1\r\na\r\n_\r\n:1\r\n",
    );
    both(
        &Reply::Map(vec![
            (Reply::bulk(b"server"), Reply::bulk(b"weft")),
            (Reply::bulk(b"proto"), Reply::Int(3)),
        ]),
        b"*4\r\n$6\r\nserver\r\n$4\r\nweft\r\n$5\r\nproto\r\n:3\r\n",
        b"%2\r\n$6\r\nserver\r\n$4\r\nweft\r\n$5\r\nproto\r\n:3\r\n",
    );
    both(&Reply::Map(vec![]), b"*0\r\n", b"%0\r\n");
    both(
        &Reply::Set(vec![Reply::bulk(b"x"), Reply::bulk(b"y")]),
        b"*2\r\n$1\r\nx\r\n$1\r\ny\r\n",
        b"~2\r\n$1\r\nx\r\n$1\r\ny\r\n",
    );
    // Nested: the RESP3-only types fall back inside aggregates too.
    both(
        &Reply::Array(vec![
            Reply::Set(vec![Reply::Bool(true)]),
            Reply::Map(vec![(Reply::Int(1), Reply::Double(0.5))]),
            Reply::NilArray,
        ]),
        b"*3\r\n*1\r\n:1\r\n*2\r\n:1\r\n$3\r\n0.5\r\n*-1\r\n",
        b"*3\r\n~1\r\n#t\r\n%1\r\n:1\r\n,0.5\r\n_\r\n",
    );
}

/// Big numbers, attributes and push data (DEBUG PROTOCOL's): RESP3's own types, and
/// what a RESP2 client gets instead.
#[test]
fn big_numbers_attributes_and_push_data() {
    both(
        &Reply::BigNum("123456789012345678901234567890".into()),
        b"$30\r\n123456789012345678901234567890\r\n",
        b"(123456789012345678901234567890\r\n",
    );
    let described = Reply::Bulk(b"x".to_vec());
    both(
        &Reply::Attribute(
            vec![(Reply::Bulk(b"ttl".to_vec()), Reply::Int(3))],
            Box::new(described.clone()),
        ),
        b"$1\r\nx\r\n",
        b"|1\r\n$3\r\nttl\r\n:3\r\n$1\r\nx\r\n",
    );
    both(
        &Reply::Push(vec![Reply::Int(1), Reply::Nil], Box::new(described)),
        b"*2\r\n:1\r\n$-1\r\n$1\r\nx\r\n",
        b">2\r\n:1\r\n_\r\n$1\r\nx\r\n",
    );
}

#[test]
fn encode_appends() {
    let mut out = b"+OK\r\n".to_vec();
    Reply::Int(7).encode(2, &mut out);
    Reply::Nil.encode(3, &mut out);
    assert_eq!(out, b"+OK\r\n:7\r\n_\r\n");
}

#[test]
fn line_breaks_in_status_and_error_texts_become_spaces() {
    same(
        &Reply::error("ERR bad\r\nthing".into()),
        b"-ERR bad  thing\r\n",
    );
    same(&Reply::Simple(Cow::Borrowed("a\nb")), b"+a b\r\n");
}

#[test]
fn doubles_as_redis_d2string() {
    let cases: &[(f64, &str)] = &[
        (0.0, "0"),
        (-0.0, "-0"),
        (1.0, "1"),
        (-17.0, "-17"),
        (1.1, "1.1"), // Redis 7.0 printed 1.1000000000000001
        (0.1, "0.1"),
        (-0.1, "-0.1"),
        (1.5, "1.5"),
        (123.456, "123.456"),
        (0.001234, "0.001234"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (1.2345678e-5, "1.2345678e-5"),
        (123.45678901, "123.45678901"),
        (4611686018427387904.0, "4611686018427387904"), // 2^62: still an integer
        (-4611686018427387904.0, "-4611686018427387904"),
        (9223372036854775808.0, "9223372036854776000"), // 2^63: fpconv's plain form
        (5e18, "5e+18"),                                // few digits, big exponent
        (1e20, "1e+20"),
        (1.5e300, "1.5e+300"),
        (-2.5e-300, "-2.5e-300"),
        (f64::MAX, "1.7976931348623157e+308"),
        (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
        (5e-324, "5e-324"),
        (1e15 + 0.5, "1000000000000000.5"),
    ];
    for &(d, text) in cases {
        assert_eq!(double(d), text, "{d:e}");
    }
    // Whatever the layout, the text reads back as the same double.
    for &(d, _) in cases {
        assert_eq!(
            double(d).parse::<f64>().unwrap().to_bits(),
            d.to_bits(),
            "{d:e}"
        );
    }
}

proptest::proptest! {
    #[test]
    fn any_double_reads_back(bits in proptest::prelude::any::<u64>()) {
        let d = f64::from_bits(bits);
        let text = double(d);
        if d.is_nan() {
            proptest::prop_assert_eq!(text, "nan");
        } else {
            proptest::prop_assert_eq!(text.parse::<f64>().unwrap().to_bits(), d.to_bits(), "{}", text);
        }
    }
}
