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
    /// The CNI plugin (spec 1.1.0): run by a container runtime with CNI_*
    /// variables and the network configuration on stdin; also what `vnio`
    /// does when installed as `vnio-cni` (docs/cluster.md).
    Cni,
}

fn main() {
    // Installed in a CNI bin directory under the plugin's name, the binary
    // is the plugin: runtimes run it with no arguments.
    let argv0 = std::env::args_os().next().unwrap_or_default();
    if std::path::Path::new(&argv0).file_name() == Some(cli::cni::PLUGIN_NAME.as_ref()) {
        finish(cli::cni::run());
    }
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
        Command::Cni => cli::cni::run(),
    };
    finish(result)
}

fn finish(result: anyhow::Result<i32>) -> ! {
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("vnio: error: {e:#}");
            std::process::exit(1);
        }
    }
}
