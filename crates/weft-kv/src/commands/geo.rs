//! The geo commands (Redis 7.0's geo.c, for behaviour): GEOADD, GEODIST, GEOHASH,
//! GEOPOS, GEOSEARCH, GEOSEARCHSTORE, GEORADIUS, GEORADIUSBYMEMBER and their `_RO`
//! forms.
//!
//! A geo set is a sorted set (`keyspace/zset.rs`) whose scores are 52-bit geohashes,
//! encoded exactly as Redis encodes them, so a geo key answers ZRANGE WITHSCORES with
//! the same scores as in Redis, and GEOPOS, GEOHASH, GEODIST and the searches print the
//! same digits. A point's geohash interleaves 26 bits of its latitude's place in
//! [-85.05112878, 85.05112878] (the even bits, from bit 0) with 26 bits of its
//! longitude's place in [-180, 180] (the odd bits); the score is that integer. A score
//! decodes to the centre of its cell, which is where GEOPOS puts the point and what
//! distances are measured from. Distances are on a sphere of radius 6372797.560856 m
//! (the haversine formula, as Redis).
//!
//! GEOADD is ZADD of the encoded scores (it logs and fires events as ZADD does). A
//! search looks where Redis looks: the cell of the centre at a size fitted to the
//! area, and its eight neighbours (those not wholly outside the area's bounding box),
//! each a range of scores, in Redis's order (centre, N, S, E, W, NE, NW, SE, SW); it
//! keeps the points within the circle or box, so it finds the members Redis finds
//! (and misses those Redis misses, near the poles), in the same order when unsorted,
//! and COUNT ANY keeps the same first ones. The STORE forms
//! (GEORADIUS ... STORE/STOREDIST, GEORADIUSBYMEMBER ... STORE/STOREDIST,
//! GEOSEARCHSTORE) run as one transaction over the source's and the destination's
//! shards ([`run_multi`]): the search on the source's shard, then the destination
//! replaced by a sorted set of the results and logged as its whole state
//! (`zsets::store`), or removed if there is none.

use super::zsets::{self, parse_score};
use super::{parse_i64, Command, Ctx, NOT_FLOAT, SYNTAX_ERR, WRONGTYPE};
use crate::exec::{Acks, ShardSet};
use crate::keyspace::{zset, Keyspace, Type};
use crate::resp::Reply;
use crate::route::shard_of;

/// The latitudes a geohash can hold (Web Mercator's limits, as Redis).
const LAT_MIN: f64 = -85.05112878;
const LAT_MAX: f64 = 85.05112878;
const LON_MIN: f64 = -180.0;
const LON_MAX: f64 = 180.0;
/// Bits per coordinate.
const STEP: u32 = 26;
/// The Earth's radius in metres that distances use (as Redis).
const EARTH_RADIUS: f64 = 6372797.560856;
/// GEOHASH's alphabet (base 32 without a, i, l, o).
const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";

/// Spreads the 32 bits of `x` to the even bits of the result.
fn spread(x: u32) -> u64 {
    let mut x = x as u64;
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// The even bits of `x`, gathered into 32 bits.
fn squash(x: u64) -> u32 {
    let mut x = x & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    ((x | (x >> 16)) & 0x0000_0000_FFFF_FFFF) as u32
}

/// The 52-bit geohash of a point (longitude, latitude) with the latitude taken in
/// `[lat_min, lat_max]`: each coordinate's place in its range, scaled to 2^26 and cut
/// to an integer; latitude on the even bits, longitude on the odd.
fn encode(lon: f64, lat: f64, lat_min: f64, lat_max: f64) -> u64 {
    let scale = (1u64 << STEP) as f64;
    let lat_off = (lat - lat_min) / (lat_max - lat_min) * scale;
    let lon_off = (lon - LON_MIN) / (LON_MAX - LON_MIN) * scale;
    spread(lat_off as u32) | (spread(lon_off as u32) << 1)
}

/// A score as C's `(uint64_t)` cast makes it on x86-64, which Redis's decoding does:
/// any score may be in a sorted set (ZADD), and one outside 0..2^64 has the value the
/// processor's conversion gives (a negative score wraps around; an out-of-range one is
/// 2^63), where Rust's `as` would saturate.
fn c_u64(d: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if d >= TWO_63 {
        let x = d - TWO_63;
        let i = if x >= TWO_63 { i64::MIN } else { x as i64 };
        (i as u64) ^ (1 << 63)
    } else if d.is_nan() {
        1 << 63
    } else {
        // Truncates toward zero; below -2^63 Rust saturates to i64::MIN, which is the
        // processor's "indefinite" value too.
        (d as i64) as u64
    }
}

/// The centre (longitude, latitude) of the cell of a geo score, kept inside the
/// limits a point can have.
pub fn decode(score: f64) -> (f64, f64) {
    let bits = c_u64(score);
    let (ilat, ilon) = (squash(bits) as f64, squash(bits >> 1) as f64);
    let scale = (1u64 << STEP) as f64;
    let (lat_span, lon_span) = (LAT_MAX - LAT_MIN, LON_MAX - LON_MIN);
    let lat_lo = LAT_MIN + (ilat / scale) * lat_span;
    let lat_hi = LAT_MIN + ((ilat + 1.0) / scale) * lat_span;
    let lon_lo = LON_MIN + (ilon / scale) * lon_span;
    let lon_hi = LON_MIN + ((ilon + 1.0) / scale) * lon_span;
    let lon = ((lon_lo + lon_hi) / 2.0).clamp(LON_MIN, LON_MAX);
    let lat = ((lat_lo + lat_hi) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (lon, lat)
}

/// The distance in metres between two points (haversine, as Redis's
/// geohashGetDistance).
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let (lat1r, lon1r) = (lat1.to_radians_c(), lon1.to_radians_c());
    let (lat2r, lon2r) = (lat2.to_radians_c(), lon2.to_radians_c());
    let u = ((lat2r - lat1r) / 2.0).sin();
    let v = ((lon2r - lon1r) / 2.0).sin();
    2.0 * EARTH_RADIUS * (u * u + lat1r.cos() * lat2r.cos() * v * v).sqrt().asin()
}

/// Degrees to radians as C's `x * (M_PI / 180.0)` (one rounding fewer than
/// `f64::to_radians` may take).
trait Radians {
    fn to_radians_c(self) -> f64;
    fn to_degrees_c(self) -> f64;
}

impl Radians for f64 {
    fn to_radians_c(self) -> f64 {
        self * (std::f64::consts::PI / 180.0)
    }
    /// Radians to degrees as C's `x * (180.0 / M_PI)`.
    fn to_degrees_c(self) -> f64 {
        self * (180.0 / std::f64::consts::PI)
    }
}

/// A unit's metres (`m`, `km`, `ft`, `mi`, any case), or Redis's error.
fn unit(b: &[u8]) -> Result<f64, Reply> {
    let u = b.to_ascii_lowercase();
    Ok(match u.as_slice() {
        b"m" => 1.0,
        b"km" => 1000.0,
        b"ft" => 0.3048,
        b"mi" => 1609.34,
        _ => {
            return Err(Reply::err(
                "ERR unsupported unit provided. please use M, KM, FT, MI",
            ))
        }
    })
}

/// A longitude and latitude argument pair: numbers (`ERR value is not a valid
/// float`) within the limits a geohash holds.
fn lon_lat(lon: &[u8], lat: &[u8]) -> Result<(f64, f64), Reply> {
    let lon = parse_score(lon).ok_or(NOT_FLOAT)?;
    let lat = parse_score(lat).ok_or(NOT_FLOAT)?;
    if !(LON_MIN..=LON_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return Err(Reply::error(format!(
            "ERR invalid longitude,latitude pair {lon:.6},{lat:.6}"
        )));
    }
    Ok((lon, lat))
}

/// A distance as Redis's addReplyDoubleDistance writes it: a bulk string of `%.4f`.
fn distance_reply(d: f64) -> Reply {
    Reply::Bulk(format!("{d:.4}").into_bytes())
}

/// The geo set in `key` (`None` if missing), or WRONGTYPE.
fn geo_of<'a>(
    ks: &'a mut Keyspace,
    key: &[u8],
    now_ms: u64,
) -> Result<Option<&'a crate::keyspace::Entry>, Reply> {
    match ks.get(key, now_ms) {
        Some(e) if e.kind() != Type::ZSet => Err(WRONGTYPE),
        e => Ok(e),
    }
}

/// `GEOADD key [NX|XX] [CH] longitude latitude member [...]`: adds the members at
/// their points (ZADD of their geohashes, with the same NX, XX and CH), answers how
/// many were added (with CH: added or moved).
///
/// Errors, before anything changes: the triples not whole or NX with XX, `ERR syntax
/// error`; a coordinate not a number, `ERR value is not a valid float`; one outside
/// the limits (longitude -180..180, latitude -85.05112878..85.05112878), `ERR invalid
/// longitude,latitude pair` and the pair (`%f`); then WRONGTYPE.
pub fn geoadd(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let mut i = 2;
    let (mut nx, mut xx) = (false, false);
    while i < args.len() {
        let a = args[i];
        if a.eq_ignore_ascii_case(b"nx") {
            nx = true;
        } else if a.eq_ignore_ascii_case(b"xx") {
            xx = true;
        } else if !a.eq_ignore_ascii_case(b"ch") {
            break;
        }
        i += 1;
    }
    let rest = &args[i..];
    if !rest.len().is_multiple_of(3) || (nx && xx) {
        return SYNTAX_ERR;
    }
    let mut scores = Vec::with_capacity(rest.len() / 3);
    for t in rest.chunks_exact(3) {
        match lon_lat(t[0], t[1]) {
            Ok((lon, lat)) => scores.push(encode(lon, lat, LAT_MIN, LAT_MAX).to_string()),
            Err(e) => return e,
        }
    }
    let mut zargs: Vec<&[u8]> = Vec::with_capacity(i + 2 * scores.len());
    zargs.extend_from_slice(&args[..i]);
    for (t, s) in rest.chunks_exact(3).zip(&scores) {
        zargs.push(s.as_bytes());
        zargs.push(t[2]);
    }
    zsets::zadd(ks, &zargs, ctx)
}

/// `GEODIST key member1 member2 [M|KM|FT|MI]`: the distance between two members in
/// the unit (metres by default), a bulk string with four decimals; nil if the key or
/// either member is missing. Errors: more arguments, `ERR syntax error`; another unit,
/// `ERR unsupported unit provided. please use M, KM, FT, MI`; then WRONGTYPE.
pub fn geodist(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let to_m = match args.len() {
        4 => 1.0,
        5 => match unit(args[4]) {
            Ok(u) => u,
            Err(e) => return e,
        },
        _ => return SYNTAX_ERR,
    };
    let e = match geo_of(ks, args[1], ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return Reply::Nil,
        Ok(Some(e)) => e,
    };
    match (zset::score(e, args[2]), zset::score(e, args[3])) {
        (Some(a), Some(b)) => {
            let ((lon1, lat1), (lon2, lat2)) = (decode(a), decode(b));
            distance_reply(distance(lon1, lat1, lon2, lat2) / to_m)
        }
        _ => Reply::Nil,
    }
}

/// Each of `args[2..]` (members of the geo set `args[1]`) answered by `found` with its
/// point, or `missing` if it (or the key) is not there; WRONGTYPE for another type.
fn per_member(
    ks: &mut Keyspace,
    args: &[&[u8]],
    ctx: &Ctx<'_>,
    missing: Reply,
    found: impl Fn(f64, f64) -> Reply,
) -> Reply {
    let e = match geo_of(ks, args[1], ctx.now_ms) {
        Err(e) => return e,
        Ok(e) => e,
    };
    Reply::Array(
        args[2..]
            .iter()
            .map(|m| match e.and_then(|e| zset::score(e, m)) {
                None => missing.clone(),
                Some(s) => {
                    let (lon, lat) = decode(s);
                    found(lon, lat)
                }
            })
            .collect(),
    )
}

/// `GEOPOS key [member ...]`: each member's [longitude, latitude] (its cell's centre,
/// in Redis's human form: RESP3 doubles, RESP2 bulk strings), or a nil array for a
/// member (or key) that is missing. WRONGTYPE for another type.
pub fn geopos(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    per_member(ks, args, ctx, Reply::NilArray, |lon, lat| {
        Reply::Array(vec![Reply::HumanDouble(lon), Reply::HumanDouble(lat)])
    })
}

/// `GEOHASH key [member ...]`: each member's standard 11-character geohash (its
/// point re-encoded with latitudes in [-90, 90]; the 11th character is always `0`, as
/// Redis's 52 bits leave it), or nil for a member (or key) that is missing.
/// WRONGTYPE for another type.
pub fn geohash(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    per_member(ks, args, ctx, Reply::Nil, |lon, lat| {
        let bits = encode(lon, lat, -90.0, 90.0);
        Reply::Bulk(
            (0..11)
                .map(|i| {
                    let idx = if i == 10 {
                        0
                    } else {
                        (bits >> (52 - (i + 1) * 5)) & 0x1f
                    };
                    ALPHABET[idx as usize]
                })
                .collect(),
        )
    })
}

/// The area a search looks in.
#[derive(Clone, Copy)]
enum Shape {
    /// A circle of this radius in metres.
    Radius(f64),
    /// A box of this width and height in metres, centred on the centre.
    Box(f64, f64),
}

/// Where a search is centred: a point, or a member of the source (looked up once the
/// arguments are read).
enum From<'a> {
    Point(f64, f64),
    Member(&'a [u8]),
}

/// Which command's syntax the arguments follow.
#[derive(Clone, Copy, PartialEq)]
enum Form {
    /// GEORADIUS (`store`: the STORE options allowed).
    Radius { store: bool },
    /// GEORADIUSBYMEMBER.
    ByMember { store: bool },
    /// GEOSEARCH; GEOSEARCHSTORE (`store`).
    Search { store: bool },
}

/// A search's arguments once read.
struct Search<'a> {
    src: &'a [u8],
    from: From<'a>,
    shape: Shape,
    /// The unit's metres (distances are answered in the unit).
    to_m: f64,
    withdist: bool,
    withhash: bool,
    withcoord: bool,
    /// `Some(true)`: ascending distance; `Some(false)`: descending.
    asc: Option<bool>,
    count: usize,
    any: bool,
    /// The destination of a STORE form, and whether it stores distances.
    store: Option<&'a [u8]>,
    storedist: bool,
}

/// A radius and its unit (`ERR need numeric radius`, `ERR radius cannot be negative`).
fn radius(r: &[u8], u: &[u8]) -> Result<(f64, f64), Reply> {
    let r = parse_score(r).ok_or(Reply::err("ERR need numeric radius"))?;
    if r < 0.0 {
        return Err(Reply::err("ERR radius cannot be negative"));
    }
    Ok((r, unit(u)?))
}

/// What a search's source is, as the argument checks need it (Redis's georadiusGeneric
/// looks the key up first).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The key is missing: GEORADIUSBYMEMBER's radius is then not read (its options
    /// still are), and the answer is empty.
    Missing,
    /// The key holds a sorted set; for GEORADIUSBYMEMBER, whether it has the member.
    Present { member: bool },
}

/// The source of a search in `ks` (WRONGTYPE if the key holds another type).
fn source_of(ks: &Keyspace, args: &[&[u8]], form: Form, now_ms: u64) -> Result<Source, Reply> {
    let key = args[if form == (Form::Search { store: true }) {
        2
    } else {
        1
    }];
    Ok(match ks.peek(key, now_ms) {
        Some(e) if e.kind() != Type::ZSet => return Err(WRONGTYPE),
        None => Source::Missing,
        Some(e) => Source::Present {
            member: !matches!(form, Form::ByMember { .. })
                || zset::view(e).score(args[2]).is_some(),
        },
    })
}

/// Reads a search's arguments as Redis's georadiusGeneric does, in its order. (A
/// missing source is not an error here.)
fn parse<'a>(args: &[&'a [u8]], form: Form, src: Source) -> Result<Search<'a>, Reply> {
    let name = String::from_utf8_lossy(args[0]).to_ascii_lowercase();
    let mut s = Search {
        src: args[1],
        from: From::Point(0.0, 0.0),
        shape: Shape::Radius(0.0),
        to_m: 1.0,
        withdist: false,
        withhash: false,
        withcoord: false,
        asc: None,
        count: 0,
        any: false,
        store: None,
        storedist: false,
    };
    let base = match form {
        Form::Radius { .. } => {
            let (lon, lat) = lon_lat(args[2], args[3])?;
            s.from = From::Point(lon, lat);
            let (r, u) = radius(args[4], args[5])?;
            s.shape = Shape::Radius(r);
            s.to_m = u;
            6
        }
        Form::ByMember { .. } => {
            s.from = From::Member(args[2]);
            match src {
                // Redis reads no radius for a missing key.
                Source::Missing => {}
                Source::Present { member: false } => {
                    return Err(Reply::err("ERR could not decode requested zset member"))
                }
                Source::Present { member: true } => {
                    let (r, u) = radius(args[3], args[4])?;
                    s.shape = Shape::Radius(r);
                    s.to_m = u;
                }
            }
            5
        }
        Form::Search { store: true } => {
            s.src = args[2];
            s.store = Some(args[1]);
            3
        }
        Form::Search { store: false } => 2,
    };
    let search = matches!(form, Form::Search { .. });
    let may_store = matches!(
        form,
        Form::Radius { store: true } | Form::ByMember { store: true }
    );
    let (mut from_set, mut shape_set) = (false, false);
    let rest = &args[base..];
    let mut i = 0;
    while i < rest.len() {
        let a = rest[i].to_ascii_lowercase();
        let left = rest.len() - i - 1;
        match a.as_slice() {
            b"withdist" => s.withdist = true,
            b"withhash" => s.withhash = true,
            b"withcoord" => s.withcoord = true,
            b"any" => s.any = true,
            b"asc" => s.asc = Some(true),
            b"desc" => s.asc = Some(false),
            b"count" if left >= 1 => {
                let c = parse_i64(rest[i + 1]).ok_or(super::NOT_INT)?;
                if c <= 0 {
                    return Err(Reply::err("ERR COUNT must be > 0"));
                }
                s.count = c as usize;
                i += 1;
            }
            b"store" | b"storedist" if left >= 1 && may_store => {
                s.store = Some(rest[i + 1]);
                s.storedist = a == b"storedist";
                i += 1;
            }
            b"storedist" if form == (Form::Search { store: true }) => s.storedist = true,
            b"frommember" if left >= 1 && search && !from_set => {
                s.from = From::Member(rest[i + 1]);
                from_set = true;
                i += 1;
            }
            b"fromlonlat" if left >= 2 && search && !from_set => {
                let (lon, lat) = lon_lat(rest[i + 1], rest[i + 2])?;
                s.from = From::Point(lon, lat);
                from_set = true;
                i += 2;
            }
            b"byradius" if left >= 2 && search && !shape_set => {
                let (r, u) = radius(rest[i + 1], rest[i + 2])?;
                s.shape = Shape::Radius(r);
                s.to_m = u;
                shape_set = true;
                i += 2;
            }
            b"bybox" if left >= 3 && search && !shape_set => {
                let w = parse_score(rest[i + 1]).ok_or(Reply::err("ERR need numeric width"))?;
                let h = parse_score(rest[i + 2]).ok_or(Reply::err("ERR need numeric height"))?;
                if w < 0.0 || h < 0.0 {
                    return Err(Reply::err("ERR height or width cannot be negative"));
                }
                s.to_m = unit(rest[i + 3])?;
                s.shape = Shape::Box(w, h);
                shape_set = true;
                i += 3;
            }
            _ => return Err(SYNTAX_ERR),
        }
        i += 1;
    }
    if s.store.is_some() && (s.withdist || s.withhash || s.withcoord) {
        return Err(Reply::err(if search {
            "ERR GEOSEARCHSTORE is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        } else {
            "ERR STORE option in GEORADIUS is not compatible with WITHDIST, WITHHASH and \
             WITHCOORD options"
        }));
    }
    if search && !from_set {
        return Err(Reply::error(format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        )));
    }
    if search && !shape_set {
        return Err(Reply::error(format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {name}"
        )));
    }
    if s.any && s.count == 0 {
        return Err(Reply::err("ERR the ANY argument requires COUNT argument"));
    }
    if s.count != 0 && s.asc.is_none() && !s.any {
        s.asc = Some(true);
    }
    Ok(s)
}

/// The cell of (`lon`, `lat`) at `step` bits per coordinate (latitudes in Redis's
/// range), as (bits, step).
fn cell_of(lon: f64, lat: f64, step: u32) -> (u64, u32) {
    let scale = (1u64 << step) as f64;
    let lat_off = (lat - LAT_MIN) / (LAT_MAX - LAT_MIN) * scale;
    let lon_off = (lon - LON_MIN) / (LON_MAX - LON_MIN) * scale;
    (spread(lat_off as u32) | (spread(lon_off as u32) << 1), step)
}

/// The bounds of a cell: (lon_min, lon_max, lat_min, lat_max).
fn cell_area((bits, step): (u64, u32)) -> (f64, f64, f64, f64) {
    let scale = (1u64 << step) as f64;
    let (ilat, ilon) = (squash(bits) as f64, squash(bits >> 1) as f64);
    let (lat_span, lon_span) = (LAT_MAX - LAT_MIN, LON_MAX - LON_MIN);
    (
        LON_MIN + (ilon / scale) * lon_span,
        LON_MIN + ((ilon + 1.0) / scale) * lon_span,
        LAT_MIN + (ilat / scale) * lat_span,
        LAT_MIN + ((ilat + 1.0) / scale) * lat_span,
    )
}

/// The cell `dx` cells east (or west, below 0) and `dy` north (or south) of `cell`,
/// wrapping around at the edges of the grid.
fn moved((bits, step): (u64, u32), dx: i32, dy: i32) -> (u64, u32) {
    let shift = 64 - 2 * step;
    let one = |bits: u64, mask: u64, d: i32| -> u64 {
        let own = bits & mask;
        let zz = !mask >> shift;
        let v = match d {
            0 => return own,
            1.. => own.wrapping_add(zz.wrapping_add(1)),
            _ => (own | zz).wrapping_sub(zz.wrapping_add(1)),
        };
        v & (mask >> shift)
    };
    const ODD: u64 = 0xaaaa_aaaa_aaaa_aaaa;
    const EVEN: u64 = 0x5555_5555_5555_5555;
    (one(bits, ODD, dx) | one(bits, EVEN, dy), step)
}

/// The cells a search looks in, as Redis chooses them (its
/// geohashCalculateAreasByShapeWGS84 and membersOfAllNeighbors): the centre's cell at
/// a step fitted to the area's size, then its neighbours north, south, east, west,
/// north-east, north-west, south-east and south-west; `None` for a neighbour that
/// lies wholly outside the area's bounding box.
fn cells(lon: f64, lat: f64, s: &Search<'_>) -> [Option<(u64, u32)>; 9] {
    let (half_h, half_w, radius) = match s.shape {
        Shape::Radius(r) => (r, r, r),
        Shape::Box(w, h) => (
            h / 2.0,
            w / 2.0,
            ((w / 2.0) * (w / 2.0) + (h / 2.0) * (h / 2.0)).sqrt(),
        ),
    };
    let (height, width) = (half_h * s.to_m, half_w * s.to_m);
    let lat_delta = (height / EARTH_RADIUS).to_degrees_c();
    let lon_top = (width / EARTH_RADIUS / (lat + lat_delta).to_radians_c().cos()).to_degrees_c();
    let lon_bottom = (width / EARTH_RADIUS / (lat - lat_delta).to_radians_c().cos()).to_degrees_c();
    let lon_delta = if lat < 0.0 { lon_bottom } else { lon_top };
    let (min_lon, max_lon) = (lon - lon_delta, lon + lon_delta);
    let (min_lat, max_lat) = (lat - lat_delta, lat + lat_delta);
    let mut step = steps_for(radius * s.to_m, lat);
    let around = |step: u32| {
        let c = cell_of(lon, lat, step);
        [
            c,
            moved(c, 0, 1),
            moved(c, 0, -1),
            moved(c, 1, 0),
            moved(c, -1, 0),
            moved(c, 1, 1),
            moved(c, -1, 1),
            moved(c, 1, -1),
            moved(c, -1, -1),
        ]
    };
    let mut n = around(step);
    let too_big = cell_area(n[1]).3 < max_lat
        || cell_area(n[2]).2 > min_lat
        || cell_area(n[3]).1 < max_lon
        || cell_area(n[4]).0 > min_lon;
    if step > 1 && too_big {
        step -= 1;
        n = around(step);
    }
    let mut out = n.map(Some);
    if step >= 2 {
        let (a_lon_min, a_lon_max, a_lat_min, a_lat_max) = cell_area(n[0]);
        // 1 north, 2 south, 3 east, 4 west, 5 NE, 6 NW, 7 SE, 8 SW.
        let mut drop = |which: [usize; 3]| which.iter().for_each(|&i| out[i] = None);
        if a_lat_min < min_lat {
            drop([2, 8, 7]);
        }
        if a_lat_max > max_lat {
            drop([1, 5, 6]);
        }
        if a_lon_min < min_lon {
            drop([4, 8, 6]);
        }
        if a_lon_max > max_lon {
            drop([3, 7, 5]);
        }
    }
    out
}

/// The bits per coordinate of the cells for a search of this radius (metres) at this
/// latitude, as Redis's geohashEstimateStepsByRadius: halving the world's Mercator
/// width until under the radius, two steps coarser, one or two more near the poles.
fn steps_for(mut range: f64, lat: f64) -> u32 {
    const MERCATOR_MAX: f64 = 20037726.37;
    if range == 0.0 {
        return 26;
    }
    let mut step: i32 = 1;
    while range < MERCATOR_MAX {
        range *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u32
}

/// A point found: member, score, distance in metres from the centre.
type Found<'a> = (&'a [u8], f64, f64);

/// The members of the geo set `e` within the search's area, sorted and cut as it asks.
fn find<'a>(e: &'a crate::keyspace::Entry, s: &Search<'_>) -> Result<Vec<Found<'a>>, Reply> {
    let view = zset::view(e);
    let (clon, clat) = match s.from {
        From::Point(lon, lat) => (lon, lat),
        From::Member(m) => match view.score(m) {
            Some(sc) => decode(sc),
            None => return Err(Reply::err("ERR could not decode requested zset member")),
        },
    };
    let mut found: Vec<Found<'a>> = Vec::new();
    let mut last: Option<(u64, u32)> = None;
    for cell in cells(clon, clat, s).into_iter().flatten() {
        // Huge areas can make neighbouring cells the same: each is searched once.
        if last == Some(cell) {
            continue;
        }
        if s.any && !found.is_empty() && found.len() >= s.count {
            break;
        }
        last = Some(cell);
        let (bits, step) = cell;
        let min = (bits << (52 - 2 * step)) as f64;
        let max = ((bits + 1) << (52 - 2 * step)) as f64;
        let from = view.count_before(|sc, _| sc < min);
        let to = view.count_before(|sc, _| sc < max);
        for (m, sc) in view.range(from, to, false) {
            let (lon, lat) = decode(sc);
            let inside = match s.shape {
                Shape::Radius(r) => {
                    let d = distance(clon, clat, lon, lat);
                    (d <= r * s.to_m).then_some(d)
                }
                Shape::Box(w, h) => {
                    let lon_d = distance(lon, lat, clon, lat);
                    let lat_d = distance(lon, lat, lon, clat);
                    (lon_d <= w * s.to_m / 2.0 && lat_d <= h * s.to_m / 2.0)
                        .then(|| distance(clon, clat, lon, lat))
                }
            };
            if let Some(d) = inside {
                found.push((m, sc, d));
                if s.any && found.len() >= s.count {
                    break;
                }
            }
        }
    }
    match s.asc {
        Some(true) => found.sort_by(|a, b| a.2.total_cmp(&b.2)),
        Some(false) => found.sort_by(|a, b| b.2.total_cmp(&a.2)),
        None => {}
    }
    if s.count != 0 {
        found.truncate(s.count);
    }
    Ok(found)
}

/// The search's reply to the client (no STORE): members, or [member, distance, hash,
/// [longitude, latitude]] with the WITH options asked.
fn search_reply(ks: &mut Keyspace, s: &Search<'_>, now: u64) -> Reply {
    let e = match geo_of(ks, s.src, now) {
        Err(e) => return e,
        Ok(None) => return Reply::Array(vec![]),
        Ok(Some(e)) => e,
    };
    let found = match find(e, s) {
        Ok(f) => f,
        Err(e) => return e,
    };
    let with = s.withdist || s.withhash || s.withcoord;
    Reply::Array(
        found
            .into_iter()
            .map(|(m, sc, d)| {
                if !with {
                    return Reply::bulk(m);
                }
                let mut item = vec![Reply::bulk(m)];
                if s.withdist {
                    item.push(distance_reply(d / s.to_m));
                }
                if s.withhash {
                    item.push(Reply::Int(sc as i64));
                }
                if s.withcoord {
                    let (lon, lat) = decode(sc);
                    item.push(Reply::Array(vec![
                        Reply::HumanDouble(lon),
                        Reply::HumanDouble(lat),
                    ]));
                }
                Reply::Array(item)
            })
            .collect(),
    )
}

/// Runs a search of `form` without STORE on this shard.
fn search_cmd(ks: &mut Keyspace, args: &[&[u8]], ctx: &Ctx<'_>, form: Form) -> Reply {
    let src = match source_of(ks, args, form, ctx.now_ms) {
        Ok(src) => src,
        Err(e) => return e,
    };
    match parse(args, form, src) {
        Ok(s) => search_reply(ks, &s, ctx.now_ms),
        Err(e) => e,
    }
}

/// `GEOSEARCH key FROMMEMBER member|FROMLONLAT lon lat BYRADIUS r unit|BYBOX w h unit
/// [ASC|DESC] [COUNT n [ANY]] [WITHCOORD] [WITHDIST] [WITHHASH]`: the members within
/// the circle or box around the member or point. Errors as Redis's, checked in its
/// order: WRONGTYPE first; a coordinate or radius that is not a number or out of
/// range; a missing FROM or BY (`ERR exactly one of ...`); ANY without COUNT; a
/// FROMMEMBER member missing, `ERR could not decode requested zset member`. A missing
/// key answers an empty array.
pub fn geosearch(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    search_cmd(ks, args, ctx, Form::Search { store: false })
}

/// `GEORADIUS_RO key lon lat radius unit [options]`: GEOSEARCH FROMLONLAT BYRADIUS in
/// the older syntax.
pub fn georadius_ro(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    search_cmd(ks, args, ctx, Form::Radius { store: false })
}

/// `GEORADIUSBYMEMBER_RO key member radius unit [options]`: GEOSEARCH FROMMEMBER
/// BYRADIUS in the older syntax.
pub fn georadiusbymember_ro(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    search_cmd(ks, args, ctx, Form::ByMember { store: false })
}

/// The form of a command that may store.
fn form_of(name: &str) -> Form {
    match name {
        "georadius" => Form::Radius { store: true },
        "georadiusbymember" => Form::ByMember { store: true },
        _ => Form::Search { store: true },
    }
}

/// A STORE form's search on the source's shard (not a command of the table; `args`
/// are the command's own): the results to store as member, 8-byte score bulks (the
/// geohash, or with STOREDIST the distance in the unit); empty if the source is
/// missing.
pub fn store_read(ks: &mut Keyspace, args: &[&[u8]], ctx: &mut Ctx<'_>) -> Reply {
    let name = String::from_utf8_lossy(args[0]).to_ascii_lowercase();
    let form = form_of(&name);
    let src = match source_of(ks, args, form, ctx.now_ms) {
        Ok(src) => src,
        Err(e) => return e,
    };
    let s = match parse(args, form, src) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let e = match geo_of(ks, s.src, ctx.now_ms) {
        Err(e) => return e,
        Ok(None) => return Reply::Array(vec![]),
        Ok(Some(e)) => e,
    };
    match find(e, &s) {
        Err(e) => e,
        Ok(found) => Reply::Array(
            found
                .into_iter()
                .flat_map(|(m, sc, d)| {
                    let score = if s.storedist { d / s.to_m } else { sc };
                    [Reply::bulk(m), Reply::bulk(&zset::score_bytes(score))]
                })
                .collect(),
        ),
    }
}

/// GEORADIUS, GEORADIUSBYMEMBER and GEOSEARCHSTORE, run by the server: without a
/// STORE option, the search on the source's shard; with one, a transaction over the
/// source's and the destination's shards that stores the results (answering their
/// count). `None` for another command.
pub fn run_multi(
    set: &impl ShardSet,
    cmd: &Command,
    args: &[Vec<u8>],
    db: u8,
    acks: &mut Acks,
) -> Option<Reply> {
    let form = match cmd.name {
        "georadius" | "georadiusbymember" | "geosearchstore" => form_of(cmd.name),
        _ => return None,
    };
    let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let n = set.count();
    let src_at = if form == (Form::Search { store: true }) {
        2
    } else {
        1
    };
    let src = argv[src_at];
    // The source is looked up first (WRONGTYPE before argument errors, and what the
    // arguments checks need), as in Redis; the search itself looks again under the
    // transaction's gates.
    let state = set.with(shard_of(src, n), |sh| {
        source_of(sh.db(db), &argv, form, crate::shard::now_ms())
    });
    let dst = match state.and_then(|st| parse(&argv, form, st)) {
        Ok(s) => s.store,
        Err(e) => return Some(e),
    };
    let (ss, ds) = (shard_of(src, n), dst.map(|d| shard_of(d, n)));
    if let Some(s) = ds {
        if let Some(r) = set.refuses_writes(s) {
            return Some(r);
        }
    }
    let mut shards = vec![ss];
    shards.extend(ds);
    shards.sort_unstable();
    shards.dedup();
    let now = crate::shard::now_ms();
    let event: &[u8] = if form == (Form::Search { store: true }) {
        b"geosearchstore"
    } else {
        b"georadiusstore"
    };
    let reply = set.atomically(&shards, |held| {
        let step = |f: super::ShardFn, s: usize, a: &[&[u8]], acks: &mut Acks| {
            let mut out = None;
            held.with(s, &mut |sh| out = Some(sh.run(f, db, a, now, None)));
            let (reply, lsn) = out.expect("the step ran");
            acks.note(s, lsn);
            reply
        };
        let Some(dst) = dst else {
            let f: super::ShardFn = match form {
                Form::Radius { .. } => georadius_ro,
                Form::ByMember { .. } => georadiusbymember_ro,
                Form::Search { .. } => geosearch,
            };
            return step(f, ss, &argv, acks);
        };
        let read = match step(store_read, ss, &argv, acks) {
            Reply::Array(items) => items,
            e => return e,
        };
        let mut sargs: Vec<&[u8]> = vec![event, dst];
        for r in &read {
            if let Reply::Bulk(b) = r {
                sargs.push(b);
            }
        }
        step(zsets::store, ds.expect("a destination"), &sargs, acks)
    });
    Some(reply)
}

/// What COMMAND DOCS says of a geo command (`None` for another).
pub fn doc(name: &str) -> Option<super::docs::Doc> {
    const MEMBERS: &str = "O(log(N)) for each member given, N the size of the geo set";
    const SEARCH: &str =
        "O(N+log(M)) where N is the number of members in the cells searched and M the size of the geo set";
    let (summary, since, complexity) = match name {
        "geoadd" => (
            "Adds members at points of a geo set, making it if missing",
            "3.2.0",
            MEMBERS,
        ),
        "geodist" => (
            "Returns the distance between two members of a geo set",
            "3.2.0",
            MEMBERS,
        ),
        "geohash" => (
            "Returns members' positions as standard geohash strings",
            "3.2.0",
            MEMBERS,
        ),
        "geopos" => (
            "Returns members' longitudes and latitudes",
            "3.2.0",
            MEMBERS,
        ),
        "geosearch" => (
            "Returns the members of a geo set within a circle or box",
            "6.2.0",
            SEARCH,
        ),
        "geosearchstore" => (
            "Stores the members of a geo set within a circle or box in a key",
            "6.2.0",
            SEARCH,
        ),
        "georadius" => (
            "Returns (or stores) the members within a radius of a point",
            "3.2.0",
            SEARCH,
        ),
        "georadius_ro" => (
            "Returns the members within a radius of a point",
            "3.2.10",
            SEARCH,
        ),
        "georadiusbymember" => (
            "Returns (or stores) the members within a radius of a member",
            "3.2.0",
            SEARCH,
        ),
        "georadiusbymember_ro" => (
            "Returns the members within a radius of a member",
            "3.2.10",
            SEARCH,
        ),
        _ => return None,
    };
    Some(super::docs::Doc {
        summary,
        since,
        group: "geo",
        complexity,
    })
}
