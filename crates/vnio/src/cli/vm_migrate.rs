//! `vnio vm migrate`: arguments and rendering; the migration itself is
//! `vnio_vm::migrate`.

use std::path::Path;

/// Arguments of `vnio vm migrate`.
#[derive(clap::Args)]
pub struct MigrateArgs {
    /// VM name.
    name: String,
    /// Migrate to another machine (not implemented yet: refused).
    #[arg(long, value_name = "HOST")]
    to: Option<String>,
    /// Print a JSON document (times in ms, pids, ports).
    #[arg(long)]
    json: bool,
}

/// Runs `vnio vm migrate`.
pub fn run(a: MigrateArgs, root: &Path) -> anyhow::Result<i32> {
    if let Some(host) = a.to {
        anyhow::bail!(
            "--to {host}: migrating to another machine is not implemented yet (docs/vm.md says how it will work); without --to the VM moves to a new QEMU on this host"
        );
    }
    let m = vnio_vm::migrate::migrate(root, &a.name)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&m)?);
        return Ok(0);
    }
    println!(
        "vnio vm: {} migrated from QEMU {} to QEMU {}: total {} ms, downtime {} ms{}",
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
        println!("vnio vm: switch port {old} -> {new}");
    }
    println!(
        "vnio vm: {} ms from start to the new state saved",
        m.wall_ms
    );
    Ok(0)
}
