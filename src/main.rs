//! The `ebb` binary: parses arguments and calls the library ([`ebb::cli::main`]).
//! Built with the `cli` feature (on by default).

use clap::Parser;

fn main() -> std::process::ExitCode {
    ebb::cli::main(ebb::cli::Cli::parse())
}
