//! `vnio vm`: guest images and the QEMU launcher. Rendering only;
//! `vnio_vm` does the work. `vnio vm run` is in `vm_run.rs`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Subcommand;
use vnio_vm::image::{self, ImageOptions};
use vnio_vm::launch;
use vnio_vm::plan::Status;
use vnio_vm::spec;
use vnio_vm::state::{self, VmDir};

use super::measure::parse_duration;

/// Arguments of `vnio vm`.
#[derive(clap::Args)]
pub struct Args {
    /// Directory of VM state directories [default: $VNIO_VM_DIR, /run/vnio/vm as root].
    #[arg(long, value_name = "DIR", global = true)]
    state_dir: Option<PathBuf>,
    /// Cache of images and KVM probe verdicts [default: $VNIO_CACHE_DIR, /var/cache/vnio as root, else ~/.cache/vnio].
    #[arg(long, value_name = "DIR", global = true)]
    cache: Option<PathBuf>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Guest images: a Debian kernel and an initramfs with busybox and the vnio agent.
    Image {
        #[command(subcommand)]
        command: ImageCmd,
    },
    /// Launch a VM (QEMU, daemonised) with a latency-sensitivity level.
    Run(super::vm_run::RunArgs),
    /// List VMs.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop VMs and remove everything they owned (QEMU, interfaces, sockets, state).
    Stop {
        /// VM names.
        #[arg(required_unless_present = "all")]
        names: Vec<String>,
        /// Every VM.
        #[arg(long, conflicts_with = "names")]
        all: bool,
    },
    /// Attach to a VM's serial console (Ctrl-] detaches), or print its log.
    Console {
        /// VM name.
        name: String,
        /// Print the console output so far and exit.
        #[arg(long)]
        log: bool,
    },
    /// Wait until a VM's agent answers; reports the time from launch.
    WaitAgent {
        /// VM name.
        name: String,
        /// Give up after this long.
        #[arg(long, value_parser = parse_duration, default_value = "300s")]
        timeout: Duration,
        /// The agent's address [default: the VM's first NIC address].
        #[arg(long)]
        address: Option<IpAddr>,
    },
    /// Run a command inside a VM (over its virtio-serial command channel).
    Exec {
        /// VM name.
        name: String,
        /// Kill the command after this long.
        #[arg(long, value_parser = parse_duration, default_value = "60s")]
        timeout: Duration,
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Live-migrate a running VM to a new QEMU process, here or on another machine (`--to HOST`); its NICs move to new switch ports.
    Migrate(super::vm_migrate::MigrateArgs),
    /// Certificates for migrating over TLS between hosts (docs/vm.md, "--to HOST").
    #[command(subcommand)]
    Tls(super::vm_migrate::TlsCmd),
    /// On a migration's destination host: its steps (run over SSH by `vnio vm migrate --to`).
    #[command(hide = true)]
    Incoming,
    /// Inside a guest: serve the command channel (started by the guest's init).
    #[command(hide = true)]
    GuestServe,
    /// Inside a guest: turn on a multiqueue NIC's queue pairs (`ethtool -L DEV combined N`).
    #[command(hide = true)]
    GuestChannels {
        /// The interface.
        dev: String,
        /// Queue pairs.
        count: u32,
    },
}

#[derive(Subcommand)]
enum ImageCmd {
    /// Build the guest image (or reuse the cached one when no input changed).
    Build(BuildArgs),
}

#[derive(clap::Args)]
struct BuildArgs {
    /// Kernel package resolved with apt (the metapackage names the real one).
    #[arg(long, default_value = image::KERNEL_PACKAGE)]
    kernel_package: String,
    /// Use this kernel .deb instead of downloading one.
    #[arg(long, value_name = "FILE")]
    kernel_deb: Option<PathBuf>,
    /// A static busybox [default: the host's /bin/busybox if static, else the busybox-static package].
    #[arg(long, value_name = "FILE")]
    busybox: Option<PathBuf>,
    /// The static (musl) vnio for the guest [default: found next to this program].
    #[arg(long, value_name = "FILE")]
    vnio: Option<PathBuf>,
    /// Print the manifest as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let root = args.state_dir.unwrap_or_else(state::runtime_root);
    let cache = args.cache.unwrap_or_else(image::cache_root);
    match args.command {
        Cmd::Image {
            command: ImageCmd::Build(a),
        } => image_build(a, cache),
        Cmd::Run(a) => super::vm_run::run_vm(a, root, cache),
        Cmd::List { json } => list(&root, json),
        Cmd::Stop { names, all } => stop(&root, names, all),
        Cmd::Console { name, log } => {
            spec::check_name(&name)?;
            let dir = VmDir::new(&root, &name);
            if log {
                vnio_tune::sys::default_sigpipe();
                print!("{}", vnio_vm::console::log(&dir)?);
            } else {
                eprintln!("vnio vm: console of {name} (Ctrl-] detaches)");
                vnio_vm::console::attach(&dir)?;
            }
            Ok(0)
        }
        Cmd::WaitAgent {
            name,
            timeout,
            address,
        } => {
            spec::check_name(&name)?;
            let stop = signal_flag()?;
            let ready =
                vnio_vm::agent::wait_agent(&VmDir::new(&root, &name), address, timeout, &stop)?;
            print_ready(&name, &ready);
            Ok(0)
        }
        Cmd::Exec {
            name,
            timeout,
            command,
        } => {
            spec::check_name(&name)?;
            let out = vnio_vm::exec::exec(&VmDir::new(&root, &name), &command, timeout)?;
            print!("{}", out.stdout);
            eprint!("{}", out.stderr);
            if out.timed_out {
                eprintln!("vnio vm exec: killed after {}", humantime(timeout));
                return Ok(124);
            }
            Ok(out.code.unwrap_or(128))
        }
        Cmd::Migrate(a) => super::vm_migrate::run(a, &root),
        Cmd::Incoming => super::vm_migrate::incoming(&root),
        Cmd::Tls(c) => super::vm_migrate::tls(c),
        Cmd::GuestServe => {
            vnio_vm::exec::serve()?;
            Ok(0)
        }
        Cmd::GuestChannels { dev, count } => {
            vnio_vm::set_combined_channels(&dev, count)
                .with_context(|| format!("setting {dev}'s combined channels to {count}"))?;
            Ok(0)
        }
    }
}

pub(super) fn signal_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, flag.clone()).context("installing signal handler")?;
    }
    Ok(flag)
}

fn humantime(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

fn image_build(a: BuildArgs, cache: PathBuf) -> anyhow::Result<i32> {
    let opts = ImageOptions {
        cache,
        kernel_package: a.kernel_package,
        kernel_deb: a.kernel_deb,
        busybox: a.busybox,
        vnio: a.vnio,
    };
    let built = image::build(&opts)?;
    let m = &built.image.manifest;
    if a.json {
        println!("{}", serde_json::to_string_pretty(m)?);
        return Ok(0);
    }
    println!(
        "vnio vm image: {} {}",
        if built.cached { "cached" } else { "built" },
        built.image.dir.display()
    );
    println!(
        "  kernel     {} ({}), {}",
        m.kernel_package,
        m.kernel_release,
        mib(m.kernel_bytes)
    );
    println!("  initramfs  {}", mib(m.initrd_bytes));
    println!("  busybox    {}", m.busybox);
    println!(
        "  vnio       {} (sha256 {})",
        m.vnio.display(),
        &m.vnio_sha256[..12]
    );
    println!("  modules    {}", m.modules.join(" "));
    println!("  total      {}", mib(m.kernel_bytes + m.initrd_bytes));
    Ok(0)
}

pub(super) fn print_ready(name: &str, r: &vnio_vm::agent::Ready) {
    let guest = r
        .guest_uptime
        .map(|u| format!(", guest init ready at {u:.2} s of guest uptime"))
        .unwrap_or_default();
    println!(
        "vnio vm: {name}: agent {} answered {} after launch (waited {}){guest}; reached through {}",
        r.addr,
        humantime(r.since_launch),
        humantime(r.waited),
        r.path
    );
}

fn list(root: &std::path::Path, json: bool) -> anyhow::Result<i32> {
    vnio_tune::sys::default_sigpipe();
    let vms = state::list(root);
    if json {
        let v: Vec<serde_json::Value> = vms
            .iter()
            .map(|(d, s)| match s {
                Ok(s) => serde_json::json!({
                    "name": d.name(),
                    "running": s.pid.is_some_and(|p| state::is_ours(p, d)),
                    "state": s,
                }),
                Err(e) => serde_json::json!({"name": d.name(), "error": e.to_string()}),
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    if vms.is_empty() {
        println!("no VMs (in {})", root.display());
        return Ok(0);
    }
    println!(
        "{:<16} {:<11} {:>8} {:<5} {:<7} {:>5} {:>7}  {:<20} NOT-HONOURED",
        "NAME", "STATUS", "PID", "ACCEL", "LATENCY", "VCPUS", "MEM", "ADDRESSES"
    );
    for (d, s) in &vms {
        match s {
            Ok(s) => {
                let running = s.pid.is_some_and(|p| state::is_ours(p, d));
                let status = match (running, s.phase) {
                    (true, state::Phase::Running) => "running",
                    (true, state::Phase::Starting) => "starting",
                    (false, _) => "dead",
                };
                let not: Vec<&str> = s
                    .settings
                    .iter()
                    .filter(|x| x.status != Status::Honoured)
                    .map(|x| x.name.as_str())
                    .collect();
                println!(
                    "{:<16} {:<11} {:>8} {:<5} {:<7} {:>5} {:>6}M  {:<20} {}",
                    d.name(),
                    status,
                    s.pid.map(|p| p.to_string()).unwrap_or("-".into()),
                    s.accel.accel.to_string(),
                    s.spec.latency.to_string(),
                    s.spec.vcpus,
                    s.spec.mem_mib,
                    s.addrs.join(","),
                    if not.is_empty() {
                        "-".to_string()
                    } else {
                        not.join(", ")
                    }
                );
            }
            Err(e) => println!("{:<16} unreadable: {e}", d.name()),
        }
    }
    Ok(0)
}

fn stop(root: &std::path::Path, names: Vec<String>, all: bool) -> anyhow::Result<i32> {
    let names: Vec<String> = if all {
        state::list(root)
            .into_iter()
            .map(|(d, _)| d.name())
            .collect()
    } else {
        names
    };
    if names.len() == 1 {
        // One VM: its error is the one line.
        let name = &names[0];
        let s = launch::stop(root, name)?;
        println!(
            "vnio vm: {name} {}; removed {}",
            if s.was_running {
                "stopped"
            } else {
                "was not running"
            },
            s.removed.join(", ")
        );
        if s.removed.iter().any(|r| r.contains("NOT")) {
            bail!("{name} was not stopped cleanly (see above)");
        }
        return Ok(0);
    }
    let mut failed = false;
    for name in names {
        match launch::stop(root, &name) {
            Ok(s) => {
                let left: Vec<&String> = s.removed.iter().filter(|r| r.contains("NOT")).collect();
                println!(
                    "vnio vm: {name} {}; removed {}",
                    if s.was_running {
                        "stopped"
                    } else {
                        "was not running"
                    },
                    s.removed.join(", ")
                );
                if !left.is_empty() {
                    failed = true;
                }
            }
            Err(e) => {
                eprintln!("vnio vm: {name}: {e}");
                failed = true;
            }
        }
    }
    if failed {
        bail!("some VMs were not stopped cleanly (see above)");
    }
    Ok(0)
}
