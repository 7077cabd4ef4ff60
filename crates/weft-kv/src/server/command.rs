//! COMMAND and its subcommands (COUNT, DOCS, GETKEYS, GETKEYSANDFLAGS, INFO, LIST,
//! HELP), answered from the command table as Redis 7 answers them: each command
//! described by ten fields (name, arity, flags, first key, last key, step, ACL
//! categories, tips, key specifications, subcommands).

use crate::commands::{self, docs, flags, Command, Sub};
use crate::keyspace::glob_match;
use crate::resp::Reply;

fn bulk(s: &str) -> Reply {
    Reply::Bulk(s.as_bytes().to_vec())
}

fn simple(s: &str) -> Reply {
    Reply::Simple(s.to_string().into())
}

fn eq(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

/// A command's flags, as COMMAND names them.
fn flag_names(bits: u32) -> Vec<&'static str> {
    [
        (flags::WRITE, "write"),
        (flags::READONLY, "readonly"),
        (flags::DENYOOM, "denyoom"),
        (flags::ADMIN, "admin"),
        (flags::BLOCKING, "blocking"),
        (flags::FAST, "fast"),
        (flags::NOAUTH, "no_auth"),
    ]
    .iter()
    .filter(|(bit, _)| bits & bit != 0)
    .map(|(_, name)| *name)
    .collect()
}

/// The ACL categories in the order Redis lists them.
const CATEGORY_ORDER: [&str; 21] = [
    "@keyspace",
    "@read",
    "@write",
    "@set",
    "@sortedset",
    "@list",
    "@hash",
    "@string",
    "@bitmap",
    "@hyperloglog",
    "@geo",
    "@stream",
    "@pubsub",
    "@admin",
    "@fast",
    "@slow",
    "@blocking",
    "@dangerous",
    "@connection",
    "@transaction",
    "@scripting",
];

/// A command's ACL categories, as Redis lists them: from its flags (`@read`, `@write`,
/// `@fast` or `@slow`, `@admin` and `@dangerous`, `@blocking`), its group, and those
/// Redis gives some commands besides.
fn categories(name: &str, bits: u32) -> Vec<&'static str> {
    let group = docs::doc(name).map(|d| d.group);
    let mut cats = vec![match group {
        Some("string") => "@string",
        Some("hash") => "@hash",
        Some("list") => "@list",
        Some("set") => "@set",
        Some("sorted-set" | "sorted_set") => "@sortedset",
        Some("geo") => "@geo",
        Some("stream") => "@stream",
        Some("hyperloglog") => "@hyperloglog",
        Some("bitmap") => "@bitmap",
        Some("pubsub") if name != "pubsub|help" => "@pubsub",
        Some("generic") if !matches!(name, "wait" | "sort" | "sort_ro") => "@keyspace",
        Some("connection") => "@connection",
        Some("scripting") => "@scripting",
        Some("transactions") => "@transaction",
        _ => "",
    }];
    // (Scripts are not counted as reads.)
    if bits & flags::READONLY != 0 && group != Some("scripting") {
        cats.push("@read");
    }
    if bits & flags::WRITE != 0 {
        cats.push("@write");
    }
    cats.push(if bits & flags::FAST != 0 {
        "@fast"
    } else {
        "@slow"
    });
    if bits & flags::ADMIN != 0 {
        cats.extend(["@admin", "@dangerous"]);
    }
    if bits & flags::BLOCKING != 0 {
        cats.push("@blocking");
    }
    cats.extend(match name {
        "info" | "keys" | "restore" => &["@dangerous"][..],
        "flushdb" | "flushall" | "swapdb" => &["@keyspace", "@dangerous"],
        "dbsize" => &["@keyspace"],
        "lastsave" | "role" => &["@admin", "@dangerous"],
        _ if name == "wait"
            || name == "command"
            || name.starts_with("command|")
            || name.starts_with("client|") =>
        {
            &["@connection"]
        }
        "sort" | "sort_ro" => &["@set", "@sortedset", "@list", "@dangerous"],
        _ => &[],
    });
    CATEGORY_ORDER
        .into_iter()
        .filter(|c| cats.contains(c))
        .collect()
}

/// The ten fields of a keyless entry (a subcommand, or a container).
fn entry(name: &str, arity: i32, bits: u32, cats: Vec<&str>, subs: Reply) -> Reply {
    Reply::Array(vec![
        bulk(name),
        Reply::Int(arity as i64),
        Reply::Set(flag_names(bits).into_iter().map(simple).collect()),
        Reply::Int(0),
        Reply::Int(0),
        Reply::Int(0),
        Reply::Set(cats.into_iter().map(simple).collect()),
        Reply::Set(vec![]),
        Reply::Set(vec![]),
        subs,
    ])
}

fn sub_info(s: &Sub) -> Reply {
    let mut e = entry(
        s.name,
        s.arity,
        s.flags,
        categories(s.name, s.flags),
        Reply::Set(vec![]),
    );
    if let (Reply::Array(fields), Some(_)) = (&mut e, super::keyspecs::sub_key(s.name)) {
        fields[3] = Reply::Int(2);
        fields[4] = Reply::Int(2);
        fields[5] = Reply::Int(1);
        fields[8] = super::keyspecs::sub_reply(s.name);
    }
    e
}

/// A command's entry in COMMAND / COMMAND INFO.
pub fn info(c: &Command) -> Reply {
    if !c.subs.is_empty() && c.name != "command" {
        // A container: described by its subcommands.
        return entry(
            c.name,
            c.arity,
            0,
            vec!["@slow"],
            Reply::Array(c.subs.iter().map(sub_info).collect()),
        );
    }
    let Reply::Array(mut fields) = entry(
        c.name,
        c.arity,
        c.flags,
        categories(c.name, c.flags),
        Reply::Set(vec![]),
    ) else {
        unreachable!("entry() builds an array")
    };
    if movable(c.name) {
        if let Reply::Set(f) = &mut fields[2] {
            f.push(simple("movablekeys"));
        }
    }
    fields[3] = Reply::Int(c.first_key as i64);
    fields[4] = Reply::Int(c.last_key as i64);
    fields[5] = Reply::Int(c.step as i64);
    fields[8] = super::keyspecs::reply(c);
    if !c.subs.is_empty() {
        fields[9] = Reply::Array(c.subs.iter().map(sub_info).collect());
    }
    Reply::Array(fields)
}

/// The command or subcommand a COMMAND INFO / DOCS name says (`get`, `client|list`).
fn find(name: &[u8]) -> Option<(&'static Command, Option<&'static Sub>)> {
    let text = String::from_utf8_lossy(name).to_ascii_lowercase();
    match text.split_once('|') {
        None => commands::lookup(name).map(|c| (c, None)),
        Some((container, sub)) => {
            let c = commands::lookup(container.as_bytes())?;
            let s = c.sub(&[container, sub])?;
            Some((c, Some(s)))
        }
    }
}

fn doc_map(name: &str, subs: &[Sub]) -> Reply {
    let mut fields = Vec::new();
    if let Some(d) = docs::doc(name) {
        fields.extend([
            (bulk("summary"), bulk(d.summary)),
            (bulk("since"), bulk(d.since)),
            (bulk("group"), bulk(d.group)),
            (bulk("complexity"), bulk(d.complexity)),
        ]);
    }
    if !subs.is_empty() {
        fields.push((
            bulk("subcommands"),
            Reply::Map(
                subs.iter()
                    .map(|s| (bulk(s.name), doc_map(s.name, &[])))
                    .collect(),
            ),
        ));
    }
    Reply::Map(fields)
}

/// Whether a command's keys move (Redis's `movablekeys`): where they are depends on
/// its other arguments (a count of keys, a STORE option), not only on its key range.
fn movable(name: &str) -> bool {
    matches!(
        name,
        "zunion"
            | "zinter"
            | "zdiff"
            | "zintercard"
            | "sintercard"
            | "lmpop"
            | "zmpop"
            | "blmpop"
            | "bzmpop"
            | "zunionstore"
            | "zinterstore"
            | "zdiffstore"
            | "sort"
            | "sort_ro"
            | "georadius"
            | "georadiusbymember"
            | "xread"
            | "xreadgroup"
    ) || SCRIPTED.contains(&name)
}

/// The scripting commands: their keys follow a count of keys, which may be 0.
const SCRIPTED: [&str; 6] = [
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];

/// C's `atoi` as Redis's key finders read a count of keys: leading blanks, a sign,
/// the digits up to the first other byte (saturated).
fn atoi(b: &[u8]) -> i64 {
    let mut i = 0;
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    let neg = i < b.len() && b[i] == b'-';
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    let mut n: i64 = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        n = n.saturating_mul(10).saturating_add((b[i] - b'0') as i64);
        i += 1;
    }
    if neg {
        -n
    } else {
        n
    }
}

/// The positions of `count` keys that start at `first`, `count` being the argument at
/// `at`: none when the count is below 1 or names more keys than there are arguments.
fn counted<A: AsRef<[u8]>>(args: &[A], at: usize, first: usize) -> Vec<usize> {
    let Some(n) = args.get(at).map(|a| atoi(a.as_ref())) else {
        return Vec::new();
    };
    if n < 1 || n > args.len().saturating_sub(first) as i64 {
        return Vec::new();
    }
    (first..first + n as usize).collect()
}

/// The position of the argument after the first `word` (case-insensitive) at
/// positions `from` to the one before the last (Redis's keyword search), if any.
fn after_word<A: AsRef<[u8]>>(args: &[A], from: usize, word: &str) -> Option<usize> {
    (from..args.len().saturating_sub(1)).find_map(|i| eq(args[i].as_ref(), word).then_some(i + 1))
}

/// The positions of the keys in a whole command line `args` (`args[0]` the command's
/// name), in Redis's order, as Redis finds them: the table's key range, or for a
/// command whose keys move, its count of keys (ZUNION, LMPOP, EVAL, ...), its STORE
/// option (SORT: the last STORE; GEORADIUS: STORE and STOREDIST). Empty when the
/// count says no keys or more than are given.
pub(crate) fn key_indexes<A: AsRef<[u8]>>(c: &Command, args: &[A]) -> Vec<usize> {
    match c.name {
        "zunion" | "zinter" | "zdiff" | "zintercard" | "sintercard" | "lmpop" | "zmpop" => {
            counted(args, 1, 2)
        }
        "blmpop" | "bzmpop" => counted(args, 2, 3),
        name if SCRIPTED.contains(&name) => counted(args, 2, 3),
        "zunionstore" | "zinterstore" | "zdiffstore" => {
            let keys = counted(args, 2, 3);
            if keys.is_empty() {
                return keys;
            }
            std::iter::once(1).chain(keys).collect()
        }
        "sort" => {
            // The last STORE with a value; LIMIT, GET and BY skip their arguments.
            let mut store = None;
            let mut i = 2;
            while i < args.len() {
                let a = args[i].as_ref();
                if eq(a, "limit") {
                    i += 2;
                } else if eq(a, "get") || eq(a, "by") {
                    i += 1;
                } else if eq(a, "store") && i + 1 < args.len() {
                    store = Some(i + 1);
                }
                i += 1;
            }
            std::iter::once(1).chain(store).collect()
        }
        "georadius" | "georadiusbymember" => {
            let from = if c.name == "georadius" { 6 } else { 5 };
            std::iter::once(1)
                .chain(after_word(args, from, "store"))
                .chain(after_word(args, from, "storedist"))
                .collect()
        }
        "xread" | "xreadgroup" => {
            // The first STREAMS (from the fourth argument for XREADGROUP), then half
            // of what follows: the keys, before their ids.
            let from = if c.name == "xread" { 1 } else { 4 };
            let Some(first) = after_word(args, from, "streams") else {
                return Vec::new();
            };
            (first..first + (args.len() - first) / 2).collect()
        }
        "memory" if args.len() > 2 && eq(args[1].as_ref(), "usage") => vec![2],
        _ if c.first_key <= 0 => Vec::new(),
        _ => {
            let last = if c.last_key < 0 {
                args.len() as i64 + c.last_key as i64
            } else {
                c.last_key as i64
            };
            (c.first_key as i64..=last)
                .step_by(c.step.max(1) as usize)
                .map(|i| i as usize)
                .filter(|&i| i < args.len())
                .collect()
        }
    }
}

/// The keys among `args` (a whole command line) with their positions; the errors of
/// COMMAND GETKEYS, in Redis's order.
fn keys_of(args: &[Vec<u8>]) -> Result<(&'static Command, Vec<usize>), Reply> {
    let Some(c) = commands::lookup(&args[0]) else {
        return Err(Reply::err("ERR Invalid command specified"));
    };
    if !c.subs.is_empty() && args.len() > 1 && c.sub(args).is_none() {
        return Err(Reply::err("ERR Invalid command specified"));
    }
    let memory_usage = c.name == "memory" && args.len() > 1 && eq(&args[1], "usage");
    if c.first_key <= 0 && !movable(c.name) && !memory_usage {
        return Err(Reply::err("ERR The command has no key arguments"));
    }
    if commands::check_arity(c, args).is_err() {
        return Err(Reply::err(
            "ERR Invalid number of arguments specified for command",
        ));
    }
    let keys = key_indexes(c, args);
    if keys.is_empty() && !SCRIPTED.contains(&c.name) {
        return Err(Reply::err("ERR Invalid arguments specified for command"));
    }
    Ok((c, keys))
}

/// COMMAND [COUNT | DOCS [name ...] | GETKEYS cmd arg ... | GETKEYSANDFLAGS cmd arg
/// ... | INFO [name ...] | LIST [FILTERBY MODULE m | ACLCAT c | PATTERN p] | HELP]
/// (arity and the subcommand checked by the caller).
pub fn command(args: &[Vec<u8>]) -> Reply {
    let table = commands::table();
    let Some(sub) = args.get(1) else {
        return Reply::Array(table.iter().map(info).collect());
    };
    let sub = sub.to_ascii_lowercase();
    match sub.as_slice() {
        b"count" => Reply::Int(table.len() as i64),
        b"info" if args.len() == 2 => Reply::Array(table.iter().map(info).collect()),
        b"info" => Reply::Array(
            args[2..]
                .iter()
                .map(|n| match find(n) {
                    Some((_, Some(s))) => sub_info(s),
                    Some((c, None)) => info(c),
                    None => Reply::Nil,
                })
                .collect(),
        ),
        b"docs" => {
            let mut out = Vec::new();
            if args.len() == 2 {
                out.extend(
                    table
                        .iter()
                        .map(|c| (bulk(c.name), doc_map(c.name, c.subs))),
                );
            }
            for n in &args[2..] {
                match find(n) {
                    Some((_, Some(s))) => out.push((bulk(s.name), doc_map(s.name, &[]))),
                    Some((c, None)) => out.push((bulk(c.name), doc_map(c.name, c.subs))),
                    None => {}
                }
            }
            Reply::Map(out)
        }
        b"getkeys" | b"getkeysandflags" => match keys_of(&args[2..]) {
            Err(e) => e,
            Ok((_, keys)) if sub == b"getkeys" => Reply::Array(
                keys.into_iter()
                    .map(|i| Reply::Bulk(args[2 + i].clone()))
                    .collect(),
            ),
            Ok((c, keys)) => Reply::Array(
                keys.into_iter()
                    .map(|i| {
                        let fl = super::keyspecs::flags_at(c, &args[2..], i);
                        let fl = fl.iter().map(|f| simple(f)).collect();
                        Reply::Array(vec![Reply::Bulk(args[2 + i].clone()), Reply::Set(fl)])
                    })
                    .collect(),
            ),
        },
        b"list" => list(args),
        b"help" => Reply::Array(
            [
                "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "(no subcommand)",
                "    Every command, each described by ten fields.",
                "COUNT",
                "    The number of commands.",
                "INFO [<name> ...]",
                "    The description of the commands named (all if none).",
                "DOCS [<name> ...]",
                "    What the commands named do (all if none).",
                "GETKEYS <command> [<arg> ...]",
                "    The keys of a whole command line.",
                "GETKEYSANDFLAGS <command> [<arg> ...]",
                "    The keys of a whole command line, with how it uses each.",
                "LIST [FILTERBY (MODULE <module>|ACLCAT <category>|PATTERN <pattern>)]",
                "    The names of the commands and subcommands.",
                "HELP",
                "    This text.",
            ]
            .iter()
            .map(|l| simple(l))
            .collect(),
        ),
        _ => Reply::error(format!(
            "ERR unknown subcommand '{}'. Try COMMAND HELP.",
            String::from_utf8_lossy(&args[1])
        )),
    }
}

/// COMMAND LIST [FILTERBY MODULE m | ACLCAT c | PATTERN p].
fn list(args: &[Vec<u8>]) -> Reply {
    let mut names: Vec<(&str, u32)> = Vec::new();
    for c in commands::table() {
        names.push((c.name, c.flags));
        names.extend(c.subs.iter().map(|s| (s.name, s.flags)));
    }
    type Keep = Box<dyn Fn(&str, u32) -> bool>;
    let keep: Keep = match args.len() {
        2 => Box::new(|_, _| true),
        5 if eq(&args[2], "filterby") => {
            let v = args[4].clone();
            if eq(&args[3], "module") {
                Box::new(|_, _| false)
            } else if eq(&args[3], "aclcat") {
                let cat = format!("@{}", String::from_utf8_lossy(&v).to_ascii_lowercase());
                Box::new(move |n, f| categories(n, f).contains(&cat.as_str()))
            } else if eq(&args[3], "pattern") {
                Box::new(move |n, _| glob_match(&v.to_ascii_lowercase(), n.as_bytes()))
            } else {
                return commands::SYNTAX_ERR;
            }
        }
        _ => return commands::SYNTAX_ERR,
    };
    Reply::Array(
        names
            .into_iter()
            .filter(|(n, f)| keep(n, *f))
            .map(|(n, _)| bulk(n))
            .collect(),
    )
}
