//! `vnio switch`: owned by the switch part.

/// Arguments of `vnio switch`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `vnio switch`; returns the process exit code.
pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("vnio switch is not built yet")
}
