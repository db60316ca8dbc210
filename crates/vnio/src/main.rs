//! `vnio`: one binary, one subcommand per part. The parts compute and return;
//! this crate parses arguments and renders results.

// Doc comments in this crate are clap's help text, where `[,opt]` means an
// optional part, not a rustdoc link.
#![allow(rustdoc::broken_intra_doc_links)]

use clap::{Parser, Subcommand};

mod cli;

#[derive(Parser)]
#[command(
    name = "vnio",
    version,
    about = "A latency-first virtual network for Linux/KVM, and the lab that proves it"
)]
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
    /// ICMP echo latency, answered by the target's kernel.
    Ping(cli::measure::PingArgs),
    /// TCP or UDP bulk transfer in either direction; paced UDP.
    Stream(cli::measure::StreamArgs),
    /// Audit, apply and revert latency settings on a host or guest.
    Tune(cli::tune::Args),
    /// The virtual switch daemon and its control commands.
    Switch(cli::switch::Args),
    /// A poll-mode endpoint on a switch port answering ARP, ping and UDP echo.
    Endpoint(cli::endpoint::Args),
    /// Scenarios of the studies' experiments: run, store, report, compare.
    Lab(cli::lab::Args),
    /// Guests: build the image, launch and manage QEMU VMs.
    Vm(cli::vm::Args),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Agent(args) => cli::measure::agent(args),
        Command::Rr(args) => cli::measure::rr(args),
        Command::Ping(args) => cli::measure::ping(args),
        Command::Stream(args) => cli::measure::stream(args),
        Command::Tune(args) => cli::tune::run(args),
        Command::Switch(args) => cli::switch::run(args),
        Command::Endpoint(args) => cli::endpoint::run(args),
        Command::Lab(args) => cli::lab::run(args),
        Command::Vm(args) => cli::vm::run(args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("vnio: error: {e:#}");
            std::process::exit(1);
        }
    }
}
