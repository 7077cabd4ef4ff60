//! Fuzz target: the request parser on arbitrary bytes, fed whole and in pieces.
//!
//! The first input byte picks the piece size (1..=256) and whether small limits are
//! used; the rest is the stream. Properties: no panic, and the outcome (the commands,
//! then the error or nothing) is the same however the bytes arrive.
#![no_main]

use libfuzzer_sys::fuzz_target;
use weft_kv::resp::{Limits, Parser, ProtocolError};

type Outcome = (Vec<Vec<Vec<u8>>>, Option<ProtocolError>);

fn run(limits: Limits, input: &[u8], piece: usize) -> Outcome {
    let mut parser = Parser::new(limits);
    let mut buf = Vec::new();
    let mut commands = Vec::new();
    for chunk in input.chunks(piece) {
        buf.extend_from_slice(chunk);
        loop {
            match parser.parse(&buf) {
                Ok(Some((args, n))) => {
                    assert!(!args.is_empty() && n > 0 && n <= buf.len());
                    commands.push(args);
                    buf.drain(..n);
                }
                Ok(None) => {
                    let k = parser.take_consumed();
                    buf.drain(..k);
                    break;
                }
                Err(e) => return (commands, Some(e)),
            }
        }
    }
    (commands, None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, input)) = data.split_first() else {
        return;
    };
    let limits = if control & 0x80 != 0 {
        Limits {
            max_bulk: 64,
            max_args: 8,
            max_inline: 64,
        }
    } else {
        Limits::default()
    };
    let piece = (control & 0x7f) as usize + 1;
    let whole = run(limits, input, input.len().max(1));
    assert_eq!(whole, run(limits, input, piece));
});
