//! Redis's glob (`stringmatchlen`), for KEYS and SCAN's MATCH.
//!
//! Syntax: `*` any run of bytes, `?` one byte, `[abc]` a class, `[^a]` a negated class,
//! `[a-z]` a range (the ends may come in either order), `\x` the byte `x` (inside a
//! class too). An unterminated class takes the rest of the pattern as its members, a
//! trailing `\` is a literal backslash, as in Redis.
//!
//! # Design
//! Redis matches recursively (one level per `*`, with a nesting limit of 1000 and a
//! "skip longer matches" cut). This matcher is iterative instead: it remembers only
//! the last `*` seen and, on a mismatch, lets that star absorb one more byte. That is
//! the classic wildcard algorithm: O(pattern × string) in the worst case, constant
//! stack, so a pattern like `a*a*a*a*…b` costs no more than a few passes (and cannot
//! exhaust a green thread's small stack). Matching with only the last star is exact:
//! whatever an earlier star could absorb, the later star can absorb instead.
//!
//! Redis's nesting limit is kept as a rule: a pattern with more than 1000 runs of
//! stars followed by something else matches nothing (Redis's recursion gives up that
//! deep), whatever the string.
//!
//! One quirk of Redis is kept: a non-empty pattern never matches the empty string
//! (Redis's loop runs only while both are non-empty), so `*` does not match the key
//! `""`. (KEYS and SCAN special-case the pattern `*` to mean "everything", as Redis
//! does; see [`super::Keyspace::keys`].)

/// The byte at `i`, or 0 past the end (Redis reads the string's terminating NUL).
#[inline]
fn at(p: &[u8], i: usize) -> u8 {
    p.get(i).copied().unwrap_or(0)
}

/// Matches one non-star pattern element starting at `p` against the byte `c`:
/// whether it matches and where the next element starts.
fn match_one(pat: &[u8], mut p: usize, c: u8) -> (bool, usize) {
    match pat[p] {
        b'?' => (true, p + 1),
        b'[' => {
            // A literal port of Redis's class loop (positions instead of pointers).
            p += 1;
            let not = at(pat, p) == b'^';
            if not {
                p += 1;
            }
            let mut matched = false;
            loop {
                let left = pat.len().saturating_sub(p);
                if at(pat, p) == b'\\' && left >= 2 {
                    p += 1;
                    if pat[p] == c {
                        matched = true;
                    }
                } else if left > 0 && pat[p] == b']' {
                    break;
                } else if left == 0 {
                    // Unterminated class: the last byte ends it.
                    p -= 1;
                    break;
                } else if left >= 3 && pat[p + 1] == b'-' {
                    let (mut start, mut end) = (pat[p], pat[p + 2]);
                    if start > end {
                        std::mem::swap(&mut start, &mut end);
                    }
                    p += 2;
                    if c >= start && c <= end {
                        matched = true;
                    }
                } else if pat[p] == c {
                    matched = true;
                }
                p += 1;
            }
            (matched != not, p + 1)
        }
        b'\\' if pat.len() - p >= 2 => (pat[p + 1] == c, p + 2),
        lit => (lit == c, p + 1),
    }
}

/// Redis's nesting limit: its matcher recurses once per run of stars, and gives up
/// (no match) past this depth.
const MAX_NESTED_STARS: usize = 1000;

/// The runs of stars of `pat` that have some other element after them: how deep
/// Redis's recursion goes to match the whole pattern (a run that ends the pattern
/// matches at once, without recursing).
fn nested_stars(pat: &[u8]) -> usize {
    let (mut p, mut runs, mut pending) = (0, 0, 0);
    while p < pat.len() {
        if pat[p] == b'*' {
            while p < pat.len() && pat[p] == b'*' {
                p += 1;
            }
            pending += 1;
        } else {
            runs += pending;
            pending = 0;
            p = match_one(pat, p, 0).1;
        }
    }
    runs
}

/// Whether `s` matches the glob `pat` (Redis's `stringmatchlen`, case-sensitive).
pub fn glob_match(pat: &[u8], s: &[u8]) -> bool {
    if s.is_empty() {
        return pat.is_empty();
    }
    // Each such run needs two bytes of pattern: only long patterns can pass the limit.
    if pat.len() > 2 * MAX_NESTED_STARS && nested_stars(pat) > MAX_NESTED_STARS {
        return false;
    }
    let (mut p, mut i) = (0usize, 0usize);
    // After the last star: the pattern position after it and the string position
    // it has absorbed up to.
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < pat.len() && pat[p] == b'*' {
            while p < pat.len() && pat[p] == b'*' {
                p += 1;
            }
            if p == pat.len() {
                return true;
            }
            star = Some((p, i));
            continue;
        }
        if p < pat.len() {
            let (ok, next) = match_one(pat, p, s[i]);
            if ok {
                p = next;
                i += 1;
                continue;
            }
        }
        match star {
            Some((sp, si)) => {
                p = sp;
                i = si + 1;
                star = Some((sp, si + 1));
            }
            None => return false,
        }
    }
    while p < pat.len() && pat[p] == b'*' {
        p += 1;
    }
    p == pat.len()
}

#[cfg(test)]
mod tests {
    use super::glob_match as m;

    #[test]
    fn basics() {
        assert!(m(b"*", b"abc"));
        assert!(!m(b"*", b""));
        assert!(m(b"", b""));
        assert!(m(b"h?llo", b"hello"));
        assert!(!m(b"h?llo", b"hllo"));
        assert!(m(b"h*llo", b"hllo"));
        assert!(m(b"h*llo", b"heeeello"));
        assert!(m(b"h[ae]llo", b"hallo"));
        assert!(!m(b"h[ae]llo", b"hillo"));
        assert!(m(b"h[^e]llo", b"hallo"));
        assert!(!m(b"h[^e]llo", b"hello"));
        assert!(m(b"h[a-b]llo", b"hbllo"));
        assert!(m(b"h[b-a]llo", b"hallo"));
        assert!(!m(b"h[a-b]llo", b"hcllo"));
        assert!(m(b"a\\*b", b"a*b"));
        assert!(!m(b"a\\*b", b"axb"));
        assert!(m(b"[\\]]", b"]"));
        // Redis's nesting limit: 1000 runs of stars with something after them match,
        // 1001 do not; a last run of stars does not count.
        let key = vec![b'a'; 3000];
        assert!(m(&b"*?".repeat(1000), &key[..1000]));
        assert!(!m(&b"*?".repeat(1001), &key[..1001]));
        assert!(m(&[b"*?".repeat(1000), b"*".to_vec()].concat(), &key));
        assert!(!m(&b"*?".repeat(50000), &vec![b'a'; 50000]));
        assert!(m(
            &[b"\\*".repeat(1500), b"*".to_vec()].concat(),
            &b"*".repeat(1500)
        ));
        assert!(m(b"a\\", b"a\\"));
        assert!(m(b"[abc", b"c"));
        assert!(m(b"[abc", b"a"));
        assert!(!m(b"[abc", b"d"));
        assert!(m(b"a*", b"a"));
        assert!(m(b"*a*b*", b"xxaxxbxx"));
        assert!(!m(b"*a*b*", b"xxbxxaxx"));
        assert!(m(b"user:*:name", b"user:42:name"));
    }

    #[test]
    fn pathological_pattern_is_fast() {
        // 1000 runs of stars (Redis's limit): every one tried against 5000 bytes.
        let pat = b"a*"
            .repeat(1000)
            .into_iter()
            .chain(*b"b")
            .collect::<Vec<u8>>();
        let s = vec![b'a'; 5000];
        assert!(!m(&pat, &s));
        let mut s2 = vec![b'a'; 5000];
        s2.push(b'b');
        assert!(m(&pat, &s2));
        // Past the limit Redis gives up, and so does this matcher.
        let deeper = [b"a*".repeat(2000), b"b".to_vec()].concat();
        assert!(!m(&deeper, &s2));
    }
}
