//! `vnio vm run`: the launch request's arguments, what `--print-qemu` and
//! `--print-libvirt` show instead of launching, and the launched VM's
//! state with each latency setting and whether it is honoured. Separate
//! from the other `vnio vm` commands because the launch request is most of
//! the command line and its report most of the output.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use vnio_vm::addr::Cidr;
use vnio_vm::launch::{self, LaunchOptions};
use vnio_vm::plan::{self, Setting, Status};
use vnio_vm::spec::{self, AccelChoice, Latency, Nic, VmSpec};
use vnio_vm::state::{self, State, VmDir};

use super::measure::parse_duration;
use super::vm::{print_ready, signal_flag};

fn parse_route(s: &str) -> Result<(Cidr, IpAddr), String> {
    let (dest, via) = s
        .split_once(',')
        .ok_or_else(|| format!("not a route: {s:?} (try 10.9.0.0/16,10.0.0.1)"))?;
    Ok((
        dest.parse()?,
        via.parse()
            .map_err(|_| format!("not an address: {via:?}"))?,
    ))
}

#[derive(clap::Args)]
pub struct RunArgs {
    /// VM name (letters, digits, '-', '_').
    #[arg(long)]
    name: String,
    /// vCPUs.
    #[arg(long, default_value_t = 1)]
    vcpus: u32,
    /// Memory: 256M, 1G.
    #[arg(long, value_parser = spec::parse_mem, default_value = "256M")]
    mem: u64,
    /// A NIC (repeat for more): vhost-user:SOCK[,server][,control=SWITCH_CTL] |
    /// tap[:IFNAME][,bridge=BR | ,host-ip=ADDR/PREFIX] |
    /// macvtap:IFNAME[,mode=bridge|vepa|private|passthru] | e1000[:IFNAME][,bridge=BR];
    /// each with [,ip=ADDR/PREFIX][,mac=MAC][,model=virtio|e1000][,guest-offloads=off][,packed=on]
    /// (vhost-user also [,queues=N]: N queue pairs, 1-8).
    #[arg(long = "nic", value_name = "KIND[,OPTS]")]
    nics: Vec<Nic>,
    /// Latency sensitivity: normal, or high (dedicated pinned cores, preallocated locked
    /// memory, hugepages, cpu-pm, switch port latency-high; what the host cannot do is listed).
    #[arg(long, default_value = "normal")]
    latency: Latency,
    /// Accelerator: auto probes whether KVM really boots a stock guest, else TCG.
    #[arg(long, default_value = "auto")]
    accel: AccelChoice,
    /// Probe KVM again instead of using the cached verdict.
    #[arg(long)]
    reprobe: bool,
    /// Refuse to launch if any latency setting cannot be honoured.
    #[arg(long)]
    strict: bool,
    /// Default gateway in the guest.
    #[arg(long)]
    gateway: Option<IpAddr>,
    /// A guest route DEST/PREFIX,VIA (repeat for more).
    #[arg(long = "route", value_parser = parse_route)]
    routes: Vec<(Cidr, IpAddr)>,
    /// The guest agent's control port (0: no agent).
    #[arg(long, default_value_t = vnio_vm::cmdline::AGENT_PORT)]
    agent_port: u16,
    /// Token the guest agent requires.
    #[arg(long)]
    agent_token: Option<String>,
    /// Image directory [default: the last one built].
    #[arg(long, value_name = "DIR")]
    image: Option<PathBuf>,
    /// Stay in the foreground; stop the VM on SIGINT/SIGTERM.
    #[arg(long)]
    foreground: bool,
    /// After launching, wait until the agent answers (up to this long) and report the time.
    #[arg(long, value_name = "TIMEOUT", value_parser = parse_duration, num_args = 0..=1, default_missing_value = "300s")]
    wait_agent: Option<Duration>,
    /// Print the QEMU command line (and host actions) instead of launching.
    #[arg(long, conflicts_with = "print_libvirt")]
    print_qemu: bool,
    /// Print the equivalent libvirt domain XML instead of launching.
    #[arg(long)]
    print_libvirt: bool,
    /// Print the VM's state as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run_vm(a: RunArgs, root: PathBuf, cache: PathBuf) -> anyhow::Result<i32> {
    let spec = VmSpec {
        name: a.name.clone(),
        vcpus: a.vcpus,
        mem_mib: a.mem,
        nics: a.nics,
        latency: a.latency,
        accel: a.accel,
        gateway: a.gateway,
        routes: a.routes,
        agent_port: a.agent_port,
        agent_token: a.agent_token,
        strict: a.strict,
    };
    let interrupt = signal_flag()?;
    let opts = LaunchOptions {
        root,
        cache,
        image: a.image,
        reprobe: a.reprobe,
        interrupt: interrupt.clone(),
        start_timeout: Duration::from_secs(60),
        // `vnio vm` keeps its own state; the lab's journal is for lab runs.
        journal: None,
    };
    if a.print_qemu || a.print_libvirt {
        return print_plan(&spec, &opts, a.print_libvirt);
    }

    let launched = launch::launch(&spec, &opts)?;
    let st = &launched.state;
    if a.json {
        println!("{}", serde_json::to_string_pretty(st)?);
    } else {
        print_state(&launched.dir, st, true);
    }
    let mut code = 0;
    if let Some(timeout) = a.wait_agent {
        match vnio_vm::agent::wait_agent(&launched.dir, None, timeout, &interrupt) {
            Ok(r) => print_ready(&spec.name, &r),
            Err(e) => {
                eprintln!("vnio vm: {}: {e}", spec.name);
                code = 1;
            }
        }
    }
    if a.foreground {
        eprintln!(
            "vnio vm: {} in the foreground; SIGINT/SIGTERM stops it",
            spec.name
        );
        let how = launch::supervise(&launched.dir, launched.child, &interrupt)?;
        println!("vnio vm: {}: {how}; removed everything it owned", spec.name);
    }
    Ok(code)
}

/// `--print-qemu` and `--print-libvirt`: the plan instead of a launch,
/// as libvirt domain XML (`libvirt`) or as the QEMU command line with
/// what the launcher does on the host and what this host cannot honour.
fn print_plan(spec: &VmSpec, opts: &LaunchOptions, libvirt: bool) -> anyhow::Result<i32> {
    vnio_tune::sys::default_sigpipe();
    let p = launch::prepare(spec, opts)?;
    if libvirt {
        let dir = VmDir::new(&opts.root, &spec.name);
        print!(
            "{}",
            vnio_vm::libvirt::domain_xml(
                spec,
                &p.plan,
                p.accel.accel,
                &p.image.kernel,
                &p.image.initrd,
                &dir
            )
        );
        return Ok(0);
    }
    println!("# accel {}: {}", p.accel.accel, p.accel.why);
    if let Some(pin) = &p.plan.pinning {
        for (i, c) in pin.vcpus.iter().enumerate() {
            println!(
                "# host: vCPU {i} thread -> CPU {c} (QMP query-cpus-fast + sched_setaffinity)"
            );
        }
        println!(
            "# host: other QEMU threads -> CPUs {}",
            vnio_vm::host::format_cpu_list(&pin.housekeeping)
        );
    }
    for n in &p.plan.nics {
        if let (
            true,
            spec::Backend::VhostUser {
                control: Some(c),
                socket,
                ..
            },
        ) = (n.switch_latency_high, &n.backend)
        {
            println!(
                "# host: switch port of {} set to latency high via {} at launch (port_set; the switch may refuse)",
                socket.display(),
                c.display()
            );
        }
        if let Some(fd) = n.fd {
            println!(
                "# host: fd {fd} = /dev/tapN of macvtap {} (created by the launcher)",
                n.host_ifname.as_deref().unwrap_or("?")
            );
        }
    }
    super::vm_passthrough::print_passthrough(spec);
    for s in p.plan.not_honoured() {
        println!("# not honoured: {}: {}", s.name, s.detail);
    }
    println!("{}", plan::shell_line(&p.plan.argv));
    Ok(0)
}

fn print_state(dir: &VmDir, st: &State, launched: bool) {
    let s = &st.spec;
    let running = st.pid.is_some_and(|p| state::is_ours(p, dir));
    println!(
        "vnio vm: {} {} (pid {}), state {}",
        s.name,
        if launched || running {
            "running"
        } else {
            "not running"
        },
        st.pid.map(|p| p.to_string()).unwrap_or("-".into()),
        dir.path().display()
    );
    println!("  accel    {}: {}", st.accel.accel, st.accel.why);
    println!(
        "  size     {} vCPU, {} MiB; image {}",
        s.vcpus, s.mem_mib, st.image
    );
    for (i, n) in s.nics.iter().enumerate() {
        let host = match &n.backend {
            spec::Backend::VhostUser { socket, server, .. } => format!(
                "vhost-user {}{}",
                socket.display(),
                if *server { " (QEMU listens)" } else { "" }
            ),
            spec::Backend::Tap { bridge, .. } => format!(
                "tap {}{}",
                st.host_ifnames[i].as_deref().unwrap_or("?"),
                bridge
                    .as_ref()
                    .map(|b| format!(" on bridge {b}"))
                    .unwrap_or_default()
            ),
            spec::Backend::Macvtap { parent, mode } => format!(
                "macvtap {} on {parent} ({mode})",
                st.host_ifnames[i].as_deref().unwrap_or("?")
            ),
            spec::Backend::Vfio { addr } => format!("passthrough {addr} (VFIO)"),
            spec::Backend::Sriov { pf, vf } => {
                format!("passthrough VF {vf} of {pf} (SR-IOV, VFIO)")
            }
        };
        println!(
            "  nic{i}     {host}, {:?}, mac {}{}",
            n.model,
            s.mac(i),
            n.ip.map(|c| format!(", guest {c}")).unwrap_or_default()
        );
    }
    println!("  latency  {}", s.latency);
    print_settings(&st.settings, "    ");
    for n in &st.notes {
        println!("  note     {n}");
    }
    println!(
        "  use      vnio vm console {0} | vnio vm wait-agent {0} | vnio vm exec {0} -- CMD | vnio vm stop {0}",
        s.name
    );
}

fn status_word(s: Status) -> &'static str {
    match s {
        Status::Honoured => "honoured",
        Status::Partial => "partial",
        Status::NotHonoured => "NOT honoured",
    }
}

fn print_settings(settings: &[Setting], prefix: &str) {
    if settings.is_empty() {
        println!("{prefix}latency normal: no reservations (shared cores, memory on demand)");
        return;
    }
    let w = settings.iter().map(|s| s.name.len()).max().unwrap_or(0);
    for s in settings {
        println!(
            "{prefix}{:<12}  {:<w$}  {}: {}",
            status_word(s.status),
            s.name,
            s.mechanism,
            s.detail
        );
    }
    let not: Vec<&Setting> = settings
        .iter()
        .filter(|s| s.status != Status::Honoured)
        .collect();
    if !not.is_empty() {
        println!(
            "{prefix}not (fully) honoured on this host: {}",
            not.iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}
