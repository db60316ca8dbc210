//! `vnio tune`: owned by the tune part.

/// Arguments of `vnio tune`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs `vnio tune`; returns the process exit code.
pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("vnio tune is not built yet")
}
