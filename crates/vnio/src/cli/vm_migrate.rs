//! `vnio vm migrate` and the destination's `vnio vm incoming`: arguments
//! and rendering; the migration itself is `vnio_vm::migrate`.

use std::io::Write;
use std::path::{Path, PathBuf};

use vnio_vm::migrate::incoming::{self, Line};
use vnio_vm::migrate::to_host::{self, Target, Transport, Where};
use vnio_vm::migrate::{certs, tls};

/// Arguments of `vnio vm migrate`.
#[derive(clap::Args)]
pub struct MigrateArgs {
    /// VM name.
    name: String,
    /// Migrate to another machine: an SSH destination (alias, host or user@host) with vnio's switch, QEMU and the guest's image (docs/vm.md, "--to HOST").
    #[arg(long, value_name = "HOST")]
    to: Option<String>,
    /// With --to: the SSH configuration file (ssh -F).
    #[arg(long, value_name = "FILE", requires = "to")]
    ssh_config: Option<String>,
    /// With --to: an SSH option, Key=Value (ssh -o); repeatable.
    #[arg(long, value_name = "OPT", requires = "to")]
    ssh_option: Vec<String>,
    /// With --to: the VMs' state root on HOST [default: HOST's vnio's].
    #[arg(long, value_name = "DIR", requires = "to")]
    remote_state_dir: Option<PathBuf>,
    /// With --to: HOST's switch control socket [default: the same path as the NICs' control= here].
    #[arg(long, value_name = "FILE", requires = "to")]
    remote_control: Option<PathBuf>,
    /// With --to: HOST's image cache; the guest's image is copied into DIR/images/KEY there if missing [default: HOST has it at the same paths].
    #[arg(long, value_name = "DIR", requires = "to")]
    remote_cache: Option<PathBuf>,
    /// With --to: the TLS certificates' directory here (ca-cert.pem, client-cert.pem, client-key.pem) [default: $VNIO_TLS_DIR, else /etc/vnio/tls].
    #[arg(long, value_name = "DIR", requires = "to")]
    tls_dir: Option<PathBuf>,
    /// With --to: the TLS certificates' directory on HOST (ca-cert.pem, server-cert.pem, server-key.pem) [default: the same path as --tls-dir].
    #[arg(long, value_name = "DIR", requires = "to", conflicts_with = "insecure")]
    remote_tls_dir: Option<PathBuf>,
    /// With --to: send the guest's memory in plain text, unauthenticated (a trusted lab network only).
    #[arg(long, requires = "to", conflicts_with = "tls_dir")]
    insecure: bool,
    /// With --to: the directory for this vnio's copy on HOST, private to the SSH user [default: /var/lib/vnio/bin].
    #[arg(long, value_name = "DIR", requires = "to")]
    remote_bin_dir: Option<PathBuf>,
    /// Print a JSON document (times in ms, pids, ports, host).
    #[arg(long)]
    json: bool,
}

/// Runs `vnio vm migrate`.
pub fn run(a: MigrateArgs, root: &Path) -> anyhow::Result<i32> {
    let to = match a.to {
        None => Where::Local,
        Some(dest) => {
            if dest.is_empty() || dest.starts_with('-') || dest.contains(char::is_whitespace) {
                anyhow::bail!("--to {dest:?}: not an SSH destination (alias, host or user@host)");
            }
            if let Some(o) = a.ssh_option.iter().find(|o| {
                !matches!(o.split_once('='), Some((k, _)) if !k.trim().is_empty() && !k.contains(char::is_whitespace))
            }) {
                anyhow::bail!("--ssh-option {o:?}: not Key=Value (an ssh -o option)");
            }
            let transport = if a.insecure {
                eprintln!(
                    "vnio vm: --insecure: the guest's memory crosses the network in plain text, and the destination takes the first stream that connects"
                );
                Transport::Insecure
            } else {
                let dir = tls::dir_or_default(a.tls_dir);
                Transport::Tls {
                    remote_dir: a.remote_tls_dir.unwrap_or_else(|| dir.clone()),
                    dir,
                }
            };
            Where::Host(Box::new(Target {
                dest,
                ssh_config: a.ssh_config,
                ssh_options: a.ssh_option,
                state_dir: a.remote_state_dir,
                control: a.remote_control,
                cache: a.remote_cache,
                bin_dir: a.remote_bin_dir,
                transport,
            }))
        }
    };
    let m = to_host::migrate(root, &a.name, &to)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&m)?);
        return Ok(0);
    }
    let on = m
        .host
        .as_ref()
        .map(|h| format!(" on {h}"))
        .unwrap_or_default();
    println!(
        "vnio vm: {} migrated from QEMU {} to QEMU {}{on}: total {} ms, downtime {} ms{}",
        m.name,
        m.old_pid,
        m.new_pid,
        m.total_ms,
        m.downtime_ms,
        m.ram_transferred
            .map(|b| format!(", {:.1} MiB of RAM sent", b as f64 / (1024.0 * 1024.0)))
            .unwrap_or_default()
    );
    for (old, new) in &m.ports {
        println!("vnio vm: switch port {old} -> {new}{on}");
    }
    for f in &m.copied {
        println!("vnio vm: copied {f}{on}");
    }
    println!(
        "vnio vm: {} ms from start to the new state saved",
        m.wall_ms
    );
    Ok(0)
}

/// Runs `vnio vm incoming` (the destination's steps, on its standard
/// input and output: a description in, `ready` and `done` lines out).
pub fn incoming(root: &Path) -> anyhow::Result<i32> {
    let input = std::io::BufReader::new(std::io::stdin());
    let done = incoming::serve(root, input, |r| {
        println!("{}", Line::Ready(r.clone()).render());
        let _ = std::io::stdout().flush();
    })?;
    println!("{}", Line::Done(done).render());
    Ok(0)
}

/// `vnio vm tls ...`.
#[derive(clap::Subcommand)]
pub enum TlsCmd {
    /// Make a CA, a server certificate naming each --host and a client certificate in DIR (copy DIR to each host).
    Init {
        /// The directory [default: $VNIO_TLS_DIR, else /etc/vnio/tls].
        dir: Option<PathBuf>,
        /// A name or address the source sends to (repeatable; each host's, e.g. --host m1 --host 10.99.0.2).
        #[arg(long = "host", value_name = "NAME", required = true)]
        hosts: Vec<String>,
    },
}

/// Runs `vnio vm tls`.
pub fn tls(c: TlsCmd) -> anyhow::Result<i32> {
    match c {
        TlsCmd::Init { dir, hosts } => {
            let dir = tls::dir_or_default(dir);
            let files = certs::init(&dir, &hosts)?;
            for f in &files {
                println!("vnio vm tls: wrote {}", f.display());
            }
            println!(
                "vnio vm tls: copy {} to each host (the same path, or --tls-dir/--remote-tls-dir); {} is needed only to make it again",
                dir.display(),
                certs::CA_KEY
            );
            Ok(0)
        }
    }
}
