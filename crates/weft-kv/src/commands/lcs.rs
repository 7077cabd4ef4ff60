//! LCS (Redis 7.0's lcsCommand in t_string.c): the longest common subsequence of two
//! strings, or its length, or the ranges of its matching runs.
//!
//! [`lcs`] is the command on one keyspace; when its two keys are on different shards
//! the server reads both under one transaction and answers with [`lcs_reply`]
//! (`commands/across.rs`).

use super::{arg_i64, Ctx, MAX_STRING, SYNTAX_ERR};
use crate::keyspace::Keyspace;
use crate::resp::Reply;

/// Redis's reply when a key holds another type than a string.
pub const NOT_STRINGS: Reply = Reply::err("ERR The specified keys must contain string values");

/// `LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]`: see [`lcs_reply`]. A
/// missing key is an empty string; a key of another type is `ERR The specified keys
/// must contain string values` (before the options are read).
pub fn lcs(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let mut values: [&[u8]; 2] = [&[], &[]];
    for (v, key) in values.iter_mut().zip(&args[1..3]) {
        match ks.peek(key, ctx.now_ms) {
            Some(e) if !e.is_string() => return NOT_STRINGS,
            Some(e) => *v = e.value(),
            None => {}
        }
    }
    lcs_reply(values[0], values[1], &args[3..])
}

/// The reply of LCS over `a` and `b` with the options `opts`:
///
/// - no option: the common subsequence itself (a bulk string);
/// - LEN: its length;
/// - IDX: a map (a flat array in RESP2) `matches` → the runs of neighbouring matched
///   bytes, last first, each `[[a_start, a_end], [b_start, b_end]]` (with WITHMATCHLEN
///   a third element, the run's length), only those at least MINMATCHLEN long; and
///   `len` → the length.
///
/// Errors: an unknown option, or MINMATCHLEN without its number, `ERR syntax error`;
/// MINMATCHLEN not an integer (a negative one counts as 0); LEN with IDX: `ERR If you
/// want both the length and indexes, please just use IDX.`; a table of more than 512
/// MB (4 bytes per pair of positions): `ERR Insufficient memory, transient memory for
/// LCS exceeds proto-max-bulk-len`.
pub fn lcs_reply(a: &[u8], b: &[u8], opts: &[&[u8]]) -> Reply {
    let (mut len_only, mut idx, mut with_len, mut min_len) = (false, false, false, 0i64);
    let mut j = 0;
    while j < opts.len() {
        let opt = opts[j];
        if opt.eq_ignore_ascii_case(b"idx") {
            idx = true;
        } else if opt.eq_ignore_ascii_case(b"len") {
            len_only = true;
        } else if opt.eq_ignore_ascii_case(b"withmatchlen") {
            with_len = true;
        } else if opt.eq_ignore_ascii_case(b"minmatchlen") && j + 1 < opts.len() {
            match arg_i64(opts[j + 1]) {
                Ok(n) => min_len = n.max(0),
                Err(e) => return e,
            }
            j += 1;
        } else {
            return SYNTAX_ERR;
        }
        j += 1;
    }
    if len_only && idx {
        return Reply::err("ERR If you want both the length and indexes, please just use IDX.");
    }
    let (alen, blen) = (a.len(), b.len());
    let cells = (alen as u64 + 1) * (blen as u64 + 1);
    if cells.saturating_mul(4) > MAX_STRING {
        return Reply::err(
            "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        );
    }
    // table[i * (blen + 1) + j]: the LCS length of a[..i] and b[..j].
    let w = blen + 1;
    let mut table = vec![0u32; cells as usize];
    for i in 1..=alen {
        for j in 1..=blen {
            table[i * w + j] = if a[i - 1] == b[j - 1] {
                table[(i - 1) * w + j - 1] + 1
            } else {
                table[(i - 1) * w + j].max(table[i * w + j - 1])
            };
        }
    }
    let total = table[alen * w + blen];
    if len_only {
        return Reply::Int(total as i64);
    }
    // Walk back from the end, collecting the subsequence and its runs.
    let mut seq = vec![0u8; total as usize];
    let mut fill = total as usize;
    let mut matches = Vec::new();
    // The run being followed: (a_start, a_end, b_start, b_end).
    let mut run: Option<(usize, usize, usize, usize)> = None;
    let (mut i, mut j) = (alen, blen);
    let emit = |r: (usize, usize, usize, usize), matches: &mut Vec<Reply>| {
        let n = r.1 - r.0 + 1;
        if min_len == 0 || n as i64 >= min_len {
            let pair =
                |s: usize, e: usize| Reply::Array(vec![Reply::Int(s as i64), Reply::Int(e as i64)]);
            let mut m = vec![pair(r.0, r.1), pair(r.2, r.3)];
            if with_len {
                m.push(Reply::Int(n as i64));
            }
            matches.push(Reply::Array(m));
        }
    };
    while i > 0 && j > 0 {
        if a[i - 1] == b[j - 1] {
            fill -= 1;
            seq[fill] = a[i - 1];
            run = match run {
                None => Some((i - 1, i - 1, j - 1, j - 1)),
                Some(r) if r.0 == i && r.2 == j => Some((r.0 - 1, r.1, r.2 - 1, r.3)),
                Some(r) => {
                    emit(r, &mut matches);
                    Some((i - 1, i - 1, j - 1, j - 1))
                }
            };
            i -= 1;
            j -= 1;
            // A run that reached the start of either string ends here.
            if let Some(r) = run.filter(|r| r.0 == 0 || r.2 == 0) {
                emit(r, &mut matches);
                run = None;
            }
        } else {
            if table[(i - 1) * w + j] > table[i * w + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            if let Some(r) = run.take() {
                emit(r, &mut matches);
            }
        }
    }
    if !idx {
        return Reply::Bulk(seq);
    }
    Reply::Map(vec![
        (Reply::bulk(b"matches"), Reply::Array(matches)),
        (Reply::bulk(b"len"), Reply::Int(total as i64)),
    ])
}
