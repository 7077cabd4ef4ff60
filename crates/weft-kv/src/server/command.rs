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
        (flags::NOAUTH, "no_auth"),
        (flags::FAST, "fast"),
    ]
    .iter()
    .filter(|(bit, _)| bits & bit != 0)
    .map(|(_, name)| *name)
    .collect()
}

/// A command's ACL categories: from its flags and its group.
fn categories(name: &str, bits: u32) -> Vec<&'static str> {
    let mut cats = Vec::new();
    if bits & flags::READONLY != 0 {
        cats.push("@read");
    }
    if bits & flags::WRITE != 0 {
        cats.push("@write");
    }
    cats.push(match docs::doc(name).map(|d| d.group) {
        Some("string") => "@string",
        Some("hash") => "@hash",
        Some("list") => "@list",
        Some("set") => "@set",
        Some("geo") => "@geo",
        Some("stream") => "@stream",
        Some("hyperloglog") => "@hyperloglog",
        Some("bitmap") => "@bitmap",
        Some("generic") => "@keyspace",
        Some("connection") => "@connection",
        Some("scripting") => "@scripting",
        Some("transactions") => "@transaction",
        _ => "",
    });
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
    cats.retain(|c| !c.is_empty());
    cats
}

/// How a command uses its keys (a key specification's flags).
fn key_flags(c: &Command) -> &'static [&'static str] {
    match c.name {
        "del" | "unlink" => &["RM", "delete"],
        "getdel" => &["RW", "access", "delete"],
        "setnx" => &["OW", "insert"],
        "setex" | "psetex" | "mset" => &["OW", "update"],
        "set" | "getset" | "getex" | "incr" | "decr" | "incrby" | "decrby" | "incrbyfloat" => {
            &["RW", "access", "update"]
        }
        "append" => &["RW", "insert"],
        "lpush" | "rpush" | "lpushx" | "rpushx" | "linsert" => &["RW", "insert"],
        "lpop" | "rpop" | "lmpop" | "lmove" | "rpoplpush" => &["RW", "access", "delete"],
        "lrem" | "ltrim" => &["RW", "delete"],
        "touch" | "exists" | "type" | "ttl" | "pttl" | "expiretime" | "pexpiretime" => &["RO"],
        _ if c.flags & flags::WRITE != 0 => &["RW", "update"],
        _ => &["RO", "access"],
    }
}

/// The key specification of a command whose keys are at `first_key..=last_key`,
/// `step` apart.
fn key_specs(c: &Command) -> Reply {
    if c.first_key <= 0 {
        return Reply::Set(vec![]);
    }
    let last = if c.last_key < 0 {
        c.last_key
    } else {
        c.last_key - c.first_key
    };
    Reply::Set(vec![Reply::Map(vec![
        (
            bulk("flags"),
            Reply::Set(key_flags(c).iter().map(|f| simple(f)).collect()),
        ),
        (
            bulk("begin_search"),
            Reply::Map(vec![
                (bulk("type"), bulk("index")),
                (
                    bulk("spec"),
                    Reply::Map(vec![(bulk("index"), Reply::Int(c.first_key as i64))]),
                ),
            ]),
        ),
        (
            bulk("find_keys"),
            Reply::Map(vec![
                (bulk("type"), bulk("range")),
                (
                    bulk("spec"),
                    Reply::Map(vec![
                        (bulk("lastkey"), Reply::Int(last as i64)),
                        (bulk("keystep"), Reply::Int(c.step as i64)),
                        (bulk("limit"), Reply::Int(0)),
                    ]),
                ),
            ]),
        ),
    ])])
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
    entry(
        s.name,
        s.arity,
        s.flags,
        categories(s.name, s.flags),
        Reply::Set(vec![]),
    )
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
    fields[3] = Reply::Int(c.first_key as i64);
    fields[4] = Reply::Int(c.last_key as i64);
    fields[5] = Reply::Int(c.step as i64);
    fields[8] = key_specs(c);
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

/// The keys among `args` (a whole command line), by the table's key positions; the
/// errors of COMMAND GETKEYS.
fn keys_of(args: &[Vec<u8>]) -> Result<(&'static Command, Vec<Vec<u8>>), Reply> {
    let Some(c) = commands::lookup(&args[0]) else {
        return Err(Reply::err("ERR Invalid command specified"));
    };
    if !c.subs.is_empty() && args.len() > 1 && c.sub(args).is_none() {
        return Err(Reply::err("ERR Invalid command specified"));
    }
    if commands::check_arity(c, args).is_err() {
        return Err(Reply::err(
            "ERR Invalid number of arguments specified for command",
        ));
    }
    if c.first_key <= 0 {
        return Err(Reply::err("ERR The command has no key arguments"));
    }
    let last = if c.last_key < 0 {
        args.len() as i64 + c.last_key as i64
    } else {
        c.last_key as i64
    };
    let mut keys: Vec<Vec<u8>> = (c.first_key as i64..=last)
        .step_by(c.step.max(1) as usize)
        .filter_map(|i| args.get(i as usize).cloned())
        .collect();
    if c.name == "sort" {
        // SORT's STORE destination is a key too (the last STORE wins); the words
        // of the other options are skipped with their arguments.
        let (mut i, mut dest) = (2, None);
        while i < args.len() {
            let w = args[i].to_ascii_lowercase();
            i += match w.as_slice() {
                b"limit" => 3,
                b"by" | b"get" => 2,
                b"store" => {
                    dest = args.get(i + 1).cloned();
                    2
                }
                _ => 1,
            };
        }
        keys.extend(dest);
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
            Ok((_, keys)) if sub == b"getkeys" => {
                Reply::Array(keys.into_iter().map(Reply::Bulk).collect())
            }
            Ok((c, keys)) => Reply::Array(
                keys.into_iter()
                    .enumerate()
                    .map(|(i, k)| {
                        // LMOVE's and RPOPLPUSH's second key is where they insert.
                        let dst = i == 1 && matches!(c.name, "lmove" | "rpoplpush");
                        let fl = if dst {
                            &["RW", "insert"][..]
                        } else {
                            key_flags(c)
                        };
                        let fl = fl.iter().map(|f| simple(f)).collect();
                        Reply::Array(vec![Reply::Bulk(k), Reply::Set(fl)])
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
