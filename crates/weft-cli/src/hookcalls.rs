//! The system-call layer's counters in `weft ps PID` (and `weft ps PID --calls`): for
//! a process linked with weft-hook (or libweft-hook), the C library calls its green
//! threads made, per call: how many, how many parked the green thread, how many green
//! threads are parked in it now; and the blocking calls the layer does not cover, each
//! of which blocked its worker (`weft_runtime::hook::stats`, docs/hook.md).

use std::io::Write;
use weft_runtime::hook::stats::{self, CallStats};

/// The counters of `pid`, if it has made an overridden call on a green thread.
pub fn read(pid: i32) -> Option<stats::Stats> {
    stats::read(u32::try_from(pid).ok()?)
}

/// The table: covered calls made, then uncovered ones; calls never made are left out.
pub fn write_table(s: &stats::Stats, out: &mut impl Write) -> std::io::Result<()> {
    let made = |covered: bool| -> Vec<&CallStats> {
        s.calls
            .iter()
            .filter(|c| c.covered == covered && c.calls > 0)
            .collect()
    };
    writeln!(
        out,
        "system calls of green threads (weft-hook): {} asleep now, at most {} at once",
        s.asleep, s.asleep_max
    )?;
    writeln!(
        out,
        "{:<24} {:>14} {:>14} {:>11}",
        "CALL", "CALLS", "PARKED", "PARKED NOW"
    )?;
    for c in made(true) {
        writeln!(
            out,
            "{:<24} {:>14} {:>14} {:>11}",
            c.name, c.calls, c.parked, c.waiting
        )?;
    }
    let uncovered = made(false);
    if !uncovered.is_empty() {
        writeln!(
            out,
            "not covered (each call blocked its worker while it waited; docs/hook.md):"
        )?;
        for c in uncovered {
            writeln!(out, "{:<24} {:>14}", c.name, c.calls)?;
        }
    }
    Ok(())
}

/// One JSON object per call made: `{"pid","call","covered","calls","parked",
/// "parked_now"}`.
pub fn write_json(pid: i32, s: &stats::Stats, out: &mut impl Write) -> std::io::Result<()> {
    for c in s.calls.iter().filter(|c| c.calls > 0) {
        writeln!(
            out,
            "{{\"pid\":{pid},\"call\":{},\"covered\":{},\"calls\":{},\"parked\":{},\
             \"parked_now\":{}}}",
            serde_json::to_string(&c.name).unwrap_or_default(),
            c.covered,
            c.calls,
            c.parked,
            c.waiting
        )?;
    }
    Ok(())
}
