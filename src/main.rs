//! The `capcard` binary: parse arguments, call the library, exit with its
//! status ([`capcard::cli::Exit`]: 0 success, 1 invalid input or usage, 2 a
//! run could not be carried out or was interrupted, 3 `diff
//! --fail-on-regression` found one, 4 `run` measured but at least one run
//! was invalid).

use std::process::ExitCode;

use clap::Parser;

use capcard::cli::{Cli, Exit};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // `--help` and `--version` are no errors; a usage error is.
            let exit = if e.use_stderr() {
                Exit::Invalid
            } else {
                Exit::Success
            };
            let _ = e.print();
            return exit.into();
        }
    };
    capcard::cli::execute(cli).into()
}
