//! Shared by the tests that run their own test binary again in a child process.

use std::process::Command;

/// A command that runs this test binary, through the emulator when the tests run under
/// one (`WEFT_TEST_RUNNER`, set by .cargo/config.toml for aarch64 under qemu).
pub fn self_command() -> Command {
    let exe = std::env::current_exe().expect("the test binary's path");
    match std::env::var("WEFT_TEST_RUNNER") {
        Ok(runner) if !runner.trim().is_empty() => {
            let mut words = runner.split_whitespace();
            let mut cmd = Command::new(words.next().expect("non-empty runner"));
            cmd.args(words).arg(exe);
            cmd
        }
        _ => Command::new(exe),
    }
}
