//! The `ebb` binary: parses arguments and calls the library (`ebb::cli::run`).

use std::io::IsTerminal;

use clap::Parser;

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = ebb::cli::Cli::parse();
    match actix_rt::System::new().block_on(ebb::cli::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ebb: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
