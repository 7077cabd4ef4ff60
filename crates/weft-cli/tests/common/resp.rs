//! A RESP connection for the weft-kv tests that compare replies on the wire: every
//! value is kept with its RESP type byte (a status `+OK` is not a bulk `$2 OK`, a
//! RESP3 map is not an array).
//!
//! Included with `#[path]` by the tests that need it (beside `mod common`).

#![allow(dead_code)] // each test binary uses its own subset

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// However long a busy machine takes to answer; only a ceiling against a hang.
pub const EVENTUALLY: Duration = Duration::from_secs(60);

/// A reply as sent: every value with its RESP type byte.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Val {
    /// `+ - : , # ( _` and the rest of the line.
    Line(u8, String),
    /// `$ = !` and the data (`None`: a null bulk).
    Blob(u8, Option<Vec<u8>>),
    /// `* ~ > %` (a map holds keys and values in turn) and the elements (`None`: null).
    Agg(u8, Option<Vec<Val>>),
}

impl Val {
    pub fn text(&self) -> String {
        match self {
            Val::Line(_, s) => s.clone(),
            Val::Blob(_, Some(b)) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        }
    }
    pub fn items(&self) -> &[Val] {
        match self {
            Val::Agg(_, Some(v)) => v,
            _ => &[],
        }
    }
    pub fn kind(&self) -> u8 {
        match self {
            Val::Line(t, _) | Val::Blob(t, _) | Val::Agg(t, _) => *t,
        }
    }
    pub fn int(&self) -> Option<i64> {
        match self {
            Val::Line(b':', s) => s.parse().ok(),
            _ => None,
        }
    }
}

/// One connection, speaking RESP.
pub struct Wire {
    pub w: UnixStream,
    pub r: BufReader<UnixStream>,
}

impl Wire {
    /// Connects to the Unix socket at `path`.
    pub fn connect(path: &Path) -> Wire {
        let s = UnixStream::connect(path).expect("connect");
        s.set_read_timeout(Some(EVENTUALLY)).unwrap();
        Wire {
            w: s.try_clone().unwrap(),
            r: BufReader::new(s),
        }
    }

    pub fn send(&mut self, args: &[Vec<u8>]) {
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            req.extend_from_slice(a);
            req.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&req).expect("send a command");
    }

    pub fn read(&mut self) -> Val {
        let mut line = Vec::new();
        self.r
            .read_until(b'\n', &mut line)
            .expect("read a reply (none came within the ceiling)");
        assert!(line.ends_with(b"\r\n"), "not a RESP line: {line:?}");
        line.truncate(line.len() - 2);
        let (t, rest) = (line[0], String::from_utf8_lossy(&line[1..]).into_owned());
        let n = || rest.parse::<i64>().expect("a length");
        match t {
            b'$' | b'=' | b'!' => {
                if n() < 0 {
                    return Val::Blob(t, None);
                }
                let mut data = vec![0; n() as usize + 2];
                self.r.read_exact(&mut data).expect("read a bulk");
                data.truncate(n() as usize);
                Val::Blob(t, Some(data))
            }
            b'*' | b'~' | b'>' | b'%' => {
                if n() < 0 {
                    return Val::Agg(t, None);
                }
                let count = if t == b'%' { 2 * n() } else { n() };
                Val::Agg(t, Some((0..count).map(|_| self.read()).collect()))
            }
            _ => Val::Line(t, rest),
        }
    }

    pub fn call(&mut self, args: &[&str]) -> Val {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        self.send(&args);
        self.read()
    }

    /// The value of INFO `section`'s line `field:value`.
    pub fn info(&mut self, section: &str, field: &str) -> String {
        let text = self.call(&["INFO", section]).text();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .unwrap_or_else(|| panic!("INFO {section} has no {field}:\n{text}"))
            .trim()
            .to_string()
    }

    /// A number of INFO `section`: the value of its line `field:value`.
    pub fn info_field(&mut self, section: &str, field: &str) -> i64 {
        let value = self.info(section, field);
        value
            .parse()
            .unwrap_or_else(|_| panic!("INFO {section} {field} is not a number: {value}"))
    }
}

/// The reply `+OK`.
pub fn ok() -> Val {
    Val::Line(b'+', "OK".into())
}

/// An integer reply.
pub fn int(n: i64) -> Val {
    Val::Line(b':', n.to_string())
}

/// A bulk string reply.
pub fn bulk(s: &str) -> Val {
    Val::Blob(b'$', Some(s.as_bytes().to_vec()))
}

/// A reply as text: each value with its RESP type byte, strings quoted.
pub fn show(v: &Val) -> String {
    match v {
        Val::Line(t, s) => format!("{}{s:?}", *t as char),
        Val::Blob(t, None) => format!("{}nil", *t as char),
        Val::Blob(t, Some(b)) => format!("{}{:?}", *t as char, String::from_utf8_lossy(b)),
        Val::Agg(t, None) => format!("{}nil", *t as char),
        Val::Agg(t, Some(items)) => format!(
            "{}[{}]",
            *t as char,
            items.iter().map(show).collect::<Vec<_>>().join(", ")
        ),
    }
}
