//! `vnio cni`, and `vnio` installed as `vnio-cni` in a runtime's CNI bin
//! directory: the CNI plugin. Reads the CNI_* environment and the network
//! configuration on stdin, prints the result (or the error result) on
//! stdout; `vnio_cni` does the work.

use std::io::{Read, Write};

/// The name the binary answers to as a plugin (the network config's `type`).
pub const PLUGIN_NAME: &str = "vnio-cni";

/// Runs the plugin; returns the exit code.
pub fn run() -> anyhow::Result<i32> {
    let env = vnio_cni::conf::Env::from_vars(|k| std::env::var(k).ok());
    let mut stdin = Vec::new();
    // Without CNI_COMMAND this is not a runtime calling: say so at once
    // rather than wait for a configuration on a terminal.
    if std::env::var_os("CNI_COMMAND").is_some() {
        std::io::stdin().read_to_end(&mut stdin)?;
    }
    let out = vnio_cni::run(env, &stdin);
    let mut o = std::io::stdout().lock();
    o.write_all(out.stdout.as_bytes())?;
    o.flush()?;
    Ok(out.code)
}
