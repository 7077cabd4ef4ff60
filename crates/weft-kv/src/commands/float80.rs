//! The arithmetic of INCRBYFLOAT: x87 extended precision (C's `long double` on x86-64
//! Linux: a 64-bit significand, exponents down to 2^-16445 and up to about 1.19e4932),
//! parsed, added and printed exactly as Redis does it with the C library.
//!
//! Redis reads both numbers with `strtold`, adds them in `long double` and prints the
//! sum with `"%.17Lf"`, then drops trailing zeros (and a trailing point, and the sign of
//! a "-0"). An `f64` computation gives other answers (`-84 + 0.1` is
//! `-83.90000000000001` in `f64` and `-83.9` in extended precision; `2^63 - 1.25` is
//! `9223372036854775806` only with a 64-bit significand), so this module computes in
//! the extended format itself, with correct rounding everywhere:
//!
//! - [`parse`] accepts what Redis's `string2ld` accepts: decimal and hexadecimal
//!   (`0x1p3`, `0x10`) numbers, `inf`/`infinity`; it refuses NaN, a leading space,
//!   anything left over, texts of 5120 bytes or more, and a number whose rounding
//!   overflows to infinity or underflows to zero (`strtold`'s ERANGE). Decimal texts
//!   are rounded exactly (a big-integer division, whatever the number of digits).
//! - [`add`] rounds the exact sum to 64 bits, to nearest, ties to even.
//! - [`format`] prints the exact binary value rounded to 17 decimals, ties to even (as
//!   glibc's printf does), then trims as Redis does.
//!
//! The results were compared with the C library's `long double` on millions of random
//! inputs (and the weft-kv tests compare them with redis-server).

use std::cmp::Ordering;

/// Significand bits.
const BITS: i64 = 64;
/// The exponent (of the significand's lowest bit) of the smallest numbers: denormals
/// and the smallest normal number, 2^-16382 = 2^63 · 2^EMIN.
const EMIN: i64 = -16445;
/// The exponent of the largest finite number, (2^64 - 1) · 2^EMAX.
const EMAX: i64 = 16320;
/// Redis refuses a number of this many bytes or more (`MAX_LONG_DOUBLE_CHARS`).
pub const MAX_CHARS: usize = 5 * 1024;

/// A number in extended precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F80 {
    /// Zero, with its sign.
    Zero(bool),
    /// `(-1)^neg · m · 2^e`: `m` has its top bit set, except denormals (`e == EMIN`).
    Finite { neg: bool, m: u64, e: i32 },
    /// An infinity, with its sign.
    Inf(bool),
}

impl F80 {
    /// Whether the number is an infinity.
    pub fn is_inf(self) -> bool {
        matches!(self, F80::Inf(_))
    }
}

/// Rounds `(-1)^neg · mant · 2^exp`, plus less than one unit of `mant`'s lowest bit
/// when `sticky`, to the nearest extended number (ties to even).
fn round(neg: bool, mant: u128, exp: i64, sticky: bool) -> F80 {
    if mant == 0 {
        return F80::Zero(neg);
    }
    let bits = 128 - mant.leading_zeros() as i64;
    let mut shift = bits - BITS;
    if exp + shift < EMIN {
        shift = EMIN - exp;
    }
    let (mut m, mut e) = if shift <= 0 {
        ((mant << (-shift) as u32) as u64 as u128, exp + shift)
    } else {
        let q = if shift >= 128 { 0 } else { mant >> shift };
        let half = if shift > 128 {
            false
        } else {
            (mant >> (shift - 1)) & 1 == 1
        };
        let below = shift > 1 && {
            let lost = shift.min(128) as u32 - 1;
            let mask = if lost >= 128 {
                u128::MAX
            } else {
                (1u128 << lost) - 1
            };
            mant & mask != 0
        };
        let up = half && (below || sticky || q & 1 == 1);
        (q + up as u128, exp + shift)
    };
    if m >> BITS != 0 {
        m >>= 1;
        e += 1;
    }
    if m == 0 {
        F80::Zero(neg)
    } else if e > EMAX {
        F80::Inf(neg)
    } else {
        F80::Finite {
            neg,
            m: m as u64,
            e: e as i32,
        }
    }
}

/// `a + b`, rounded to nearest (ties to even). An infinity plus the opposite infinity
/// is not a number: `None` (as for Redis, whose answer is then an error).
pub fn add(a: F80, b: F80) -> Option<F80> {
    use F80::*;
    Some(match (a, b) {
        (Inf(x), Inf(y)) if x != y => return None,
        (Inf(x), _) | (_, Inf(x)) => Inf(x),
        (Zero(x), Zero(y)) => Zero(x && y),
        (Zero(_), v) | (v, Zero(_)) => v,
        (
            Finite {
                neg: na,
                m: ma,
                e: ea,
            },
            Finite {
                neg: nb,
                m: mb,
                e: eb,
            },
        ) => {
            // The larger magnitude first (normalized numbers order by (e, m)).
            let ((na, ma, ea), (nb, mb, eb)) = if (ea, ma) >= (eb, mb) {
                ((na, ma, ea), (nb, mb, eb))
            } else {
                ((nb, mb, eb), (na, ma, ea))
            };
            // 63 guard bits below the larger significand; what shifts out of the
            // smaller one below them only counts as "something".
            let x = (ma as u128) << 63;
            let d = (ea - eb) as u32;
            let yfull = (mb as u128) << 63;
            let (y, sticky) = if d >= 127 {
                (0, true)
            } else {
                (yfull >> d, yfull & ((1u128 << d) - 1) != 0)
            };
            let exp = ea as i64 - 63;
            if na == nb {
                round(na, x + y, exp, sticky)
            } else if sticky {
                // x - (y + δ) with 0 < δ < 1 is (x - y - 1) + (1 - δ).
                round(na, x - y - 1, exp, true)
            } else if x == y {
                Zero(false)
            } else {
                round(na, x - y, exp, false)
            }
        }
    })
}

/// An unsigned big integer, 64-bit limbs, least significant first, no leading zero
/// limbs.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Big(Vec<u64>);

impl Big {
    fn from_u128(v: u128) -> Big {
        let mut b = Big(vec![v as u64, (v >> 64) as u64]);
        b.trim();
        b
    }
    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }
    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }
    fn bits(&self) -> i64 {
        match self.0.last() {
            None => 0,
            Some(top) => self.0.len() as i64 * 64 - top.leading_zeros() as i64,
        }
    }
    /// `self = self · k + add`.
    fn mul_add(&mut self, k: u64, add: u64) {
        let mut carry = add as u128;
        for limb in &mut self.0 {
            let v = *limb as u128 * k as u128 + carry;
            *limb = v as u64;
            carry = v >> 64;
        }
        if carry != 0 {
            self.0.push(carry as u64);
        }
    }
    /// `self · 10^n`.
    fn mul_pow10(&mut self, mut n: u64) {
        while n >= 19 {
            self.mul_add(10u64.pow(19), 0);
            n -= 19;
        }
        if n > 0 {
            self.mul_add(10u64.pow(n as u32), 0);
        }
    }
    fn shl(&mut self, n: u64) {
        if self.is_zero() {
            return;
        }
        let (limbs, bits) = ((n / 64) as usize, (n % 64) as u32);
        if bits > 0 {
            let mut carry = 0;
            for limb in &mut self.0 {
                let v = *limb;
                *limb = (v << bits) | carry;
                carry = v >> (64 - bits);
            }
            if carry != 0 {
                self.0.push(carry);
            }
        }
        self.0.splice(0..0, std::iter::repeat_n(0, limbs));
    }
    fn shr1(&mut self) {
        let mut carry = 0;
        for limb in self.0.iter_mut().rev() {
            let v = *limb;
            *limb = (v >> 1) | carry;
            carry = v << 63;
        }
        self.trim();
    }
    fn cmp(&self, o: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&o.0.len())
            .then_with(|| self.0.iter().rev().cmp(o.0.iter().rev()))
    }
    /// `self -= o` (`o` is not larger).
    fn sub(&mut self, o: &Big) {
        let mut borrow = false;
        for (i, limb) in self.0.iter_mut().enumerate() {
            let r = o.0.get(i).copied().unwrap_or(0);
            let (v, b1) = limb.overflowing_sub(r);
            let (v, b2) = v.overflowing_sub(borrow as u64);
            *limb = v;
            borrow = b1 || b2;
        }
        self.trim();
    }
    /// Bits `from..from + n` (n ≤ 128) as a number, and whether any bit below `from`
    /// is set.
    fn bits_at(&self, from: u64, n: u32) -> (u128, bool) {
        let bit = |i: u64| -> u128 {
            let limb = self.0.get((i / 64) as usize).copied().unwrap_or(0);
            ((limb >> (i % 64)) & 1) as u128
        };
        let mut v = 0u128;
        for i in (0..n as u64).rev() {
            v = (v << 1) | bit(from + i);
        }
        let full = (from / 64) as usize;
        let below = self.0[..full.min(self.0.len())].iter().any(|&l| l != 0)
            || (!from.is_multiple_of(64)
                && self
                    .0
                    .get(full)
                    .is_some_and(|&l| l & ((1u64 << (from % 64)) - 1) != 0));
        (v, below)
    }
    /// The decimal digits.
    fn to_decimal(&self) -> String {
        let mut n = self.clone();
        let mut chunks = Vec::new();
        while !n.is_zero() {
            // Divide by 10^19, keeping the remainder.
            let mut rem: u128 = 0;
            for limb in n.0.iter_mut().rev() {
                let cur = (rem << 64) | *limb as u128;
                *limb = (cur / 10u128.pow(19)) as u64;
                rem = cur % 10u128.pow(19);
            }
            n.trim();
            chunks.push(rem as u64);
        }
        let mut s = chunks.pop().map_or("0".to_string(), |c| c.to_string());
        for c in chunks.iter().rev() {
            s.push_str(&format!("{c:019}"));
        }
        s
    }
}

/// Rounds `(-1)^neg · n · 2^exp` to an extended number.
fn round_big(neg: bool, n: &Big, exp: i64) -> F80 {
    let bits = n.bits();
    if bits <= 120 {
        let (v, _) = n.bits_at(0, 120);
        return round(neg, v, exp, false);
    }
    let from = (bits - 120) as u64;
    let (v, below) = n.bits_at(from, 120);
    round(neg, v, exp + from as i64, below)
}

/// `(-1)^neg · d / 10^k`, rounded.
fn round_quotient(neg: bool, mut d: Big, k: u64) -> F80 {
    let mut b = Big::from_u128(1);
    b.mul_pow10(k);
    // Scale so the quotient has 66 or 67 bits, then divide bit by bit.
    let t = d.bits() - b.bits() - 66;
    if t >= 0 {
        b.shl(t as u64);
    } else {
        d.shl((-t) as u64);
    }
    let mut q: u128 = 0;
    b.shl(68);
    for _ in 0..68 {
        b.shr1();
        q <<= 1;
        if d.cmp(&b) != Ordering::Less {
            d.sub(&b);
            q |= 1;
        }
    }
    round(neg, q, t, !d.is_zero())
}

/// Why a text is not a number Redis accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NotFloat;

/// Parses `text` as Redis's `string2ld` (`strtold` in the C locale, the whole text,
/// no leading space, no NaN, no overflow to infinity or underflow to zero).
pub fn parse(text: &[u8]) -> Result<F80, NotFloat> {
    if text.is_empty() || text.len() >= MAX_CHARS || b" \t\n\x0b\x0c\r".contains(&text[0]) {
        return Err(NotFloat);
    }
    let (neg, rest) = match text[0] {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = rest.to_ascii_lowercase();
    if lower == b"inf" || lower == b"infinity" {
        return Ok(F80::Inf(neg));
    }
    let v = if lower.starts_with(b"0x") {
        parse_hex(neg, &lower[2..])?
    } else {
        parse_dec(neg, &lower)?
    };
    match v {
        // A number that was not zero but rounds to zero or infinity: ERANGE.
        F80::Inf(_) => Err(NotFloat),
        v => Ok(v),
    }
}

/// Splits `digits[.digits]` (at least one digit) off the front of `s`: the digits,
/// how many came after the point, and the rest.
fn mantissa(s: &[u8], hex: bool) -> Result<(Vec<u8>, usize, &[u8]), NotFloat> {
    let is_digit = |c: u8| {
        if hex {
            c.is_ascii_hexdigit()
        } else {
            c.is_ascii_digit()
        }
    };
    let int_len = s.iter().take_while(|&&c| is_digit(c)).count();
    let mut digits = s[..int_len].to_vec();
    let mut rest = &s[int_len..];
    let mut frac = 0;
    if rest.first() == Some(&b'.') {
        let n = rest[1..].iter().take_while(|&&c| is_digit(c)).count();
        digits.extend_from_slice(&rest[1..1 + n]);
        frac = n;
        rest = &rest[1 + n..];
    }
    if digits.is_empty() {
        return Err(NotFloat);
    }
    Ok((digits, frac, rest))
}

/// An exponent `[+-]digits` that must be all of `s`, saturated far beyond any range.
fn exponent(s: &[u8]) -> Result<i64, NotFloat> {
    let (neg, d) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if d.is_empty() || !d.iter().all(u8::is_ascii_digit) {
        return Err(NotFloat);
    }
    let v = d
        .iter()
        .fold(0i64, |v, &c| (v * 10 + (c - b'0') as i64).min(1 << 40));
    Ok(if neg { -v } else { v })
}

fn parse_dec(neg: bool, s: &[u8]) -> Result<F80, NotFloat> {
    let (digits, frac, rest) = mantissa(s, false)?;
    let exp10 = match rest {
        [] => 0,
        [b'e', e @ ..] => exponent(e)?,
        _ => return Err(NotFloat),
    };
    let lead = digits.iter().take_while(|&&c| c == b'0').count();
    let digits = &digits[lead..];
    let trail = digits.iter().rev().take_while(|&&c| c == b'0').count();
    let digits = &digits[..digits.len() - trail];
    if digits.is_empty() {
        return Ok(F80::Zero(neg));
    }
    // value = int(digits) · 10^e10, digits without leading or trailing zeros.
    let e10 = exp10 - frac as i64 + trail as i64;
    let top = e10 + digits.len() as i64; // value < 10^top, ≥ 10^(top-1)
    if top - 1 > 4933 {
        return Ok(F80::Inf(neg));
    }
    if top < -4951 {
        return Err(NotFloat);
    }
    let mut n = Big(Vec::new());
    for chunk in digits.chunks(19) {
        let v = chunk.iter().fold(0u64, |v, &c| v * 10 + (c - b'0') as u64);
        n.mul_add(10u64.pow(chunk.len() as u32), v);
    }
    let v = if e10 >= 0 {
        n.mul_pow10(e10 as u64);
        round_big(neg, &n, 0)
    } else {
        round_quotient(neg, n, (-e10) as u64)
    };
    match v {
        F80::Zero(_) => Err(NotFloat),
        v => Ok(v),
    }
}

fn parse_hex(neg: bool, s: &[u8]) -> Result<F80, NotFloat> {
    let (digits, frac, rest) = mantissa(s, true)?;
    let exp2 = match rest {
        [] => 0,
        [b'p', e @ ..] => exponent(e)?,
        _ => return Err(NotFloat),
    };
    let mut n = Big(Vec::new());
    for &c in &digits {
        let d = (c as char).to_digit(16).expect("a hex digit") as u64;
        n.mul_add(16, d);
    }
    if n.is_zero() {
        return Ok(F80::Zero(neg));
    }
    match round_big(neg, &n, exp2 - 4 * frac as i64) {
        F80::Zero(_) => Err(NotFloat),
        v => Ok(v),
    }
}

/// The text INCRBYFLOAT stores and answers for a finite `v`: C's `"%.17Lf"` (the exact
/// value rounded to 17 decimals, ties to even), trailing zeros and a trailing point
/// removed, and "-0" written "0".
pub fn format(v: F80) -> String {
    let (neg, m, e) = match v {
        F80::Zero(_) => return "0".into(),
        F80::Inf(neg) => return if neg { "-inf" } else { "inf" }.into(),
        F80::Finite { neg, m, e } => (neg, m, e as i64),
    };
    let text = if e >= 0 {
        // An integer: no decimals to print.
        let mut n = Big::from_u128(m as u128);
        n.shl(e as u64);
        n.to_decimal()
    } else {
        // round(m · 10^17 / 2^-e), m · 10^17 < 2^121.
        let n = m as u128 * 10u128.pow(17);
        let shift = -e;
        let q = if shift >= 128 {
            0
        } else {
            let q = n >> shift;
            let rem = n & ((1u128 << shift) - 1);
            let half = 1u128 << (shift - 1);
            q + (rem > half || (rem == half && q & 1 == 1)) as u128
        };
        let digits = format!("{q:018}");
        let (int, frac) = digits.split_at(digits.len() - 17);
        let frac = frac.trim_end_matches('0');
        if frac.is_empty() {
            int.to_string()
        } else {
            format!("{int}.{frac}")
        }
    };
    if neg && text != "0" {
        format!("-{text}")
    } else {
        text
    }
}
