//! `vnio`: one binary, one subcommand per part. The parts compute and return;
//! this crate parses arguments and renders results.

use clap::{Parser, Subcommand};

mod cli;

#[derive(Parser)]
#[command(name = "vnio", version, about = "A latency-first virtual network for Linux/KVM, and the lab that proves it")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the far side of every workload.
    Agent(cli::measure::AgentArgs),
    /// Request-response latency over TCP or UDP (closed loop with bursts, or open loop).
    Rr(cli::measure::RrArgs),
    /// Audit, apply and revert latency settings on a host or guest.
    Tune(cli::tune::Args),
    /// The virtual switch daemon and its control commands.
    Switch(cli::switch::Args),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Agent(args) => cli::measure::agent(args),
        Command::Rr(args) => cli::measure::rr(args),
        Command::Tune(args) => cli::tune::run(args),
        Command::Switch(args) => cli::switch::run(args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("vnio: error: {e:#}");
            std::process::exit(1);
        }
    }
}
