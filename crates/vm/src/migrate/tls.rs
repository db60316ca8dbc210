//! The migration stream of `--to HOST` over TLS: QEMU's `tls-creds-x509`
//! object on both sides, from a directory of certificates in the layout
//! QEMU reads (`ca-cert.pem`; `server-cert.pem` and `server-key.pem` for
//! the destination; `client-cert.pem` and `client-key.pem` for the
//! source). Both sides verify the other: the source checks that the
//! destination's certificate is the CA's and names the address it sends
//! to (`tls-hostname`), the destination (`verify-peer`) that the source
//! holds a client certificate of the same CA, so whoever reaches the
//! listening port first cannot feed QEMU a stream.
//!
//! [`super::certs`] makes such a directory (`vnio vm tls init`).

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::error::{Error, Result};
use crate::qmp::Qmp;

/// The certificates' directory when none is given.
pub const DEFAULT_DIR: &str = "/etc/vnio/tls";
/// The environment variable naming it instead.
pub const DIR_ENV: &str = "VNIO_TLS_DIR";
/// The QOM id of the credentials object in QEMU.
const CREDS_ID: &str = "vnio-migrate-tls";

/// The CA's certificate (both sides).
pub const CA_CERT: &str = "ca-cert.pem";
/// The destination's certificate and key.
pub const SERVER: [&str; 2] = ["server-cert.pem", "server-key.pem"];
/// The source's certificate and key.
pub const CLIENT: [&str; 2] = ["client-cert.pem", "client-key.pem"];

/// Which end of the stream a QEMU is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The source (connects).
    Client,
    /// The destination (listens).
    Server,
}

impl End {
    fn name(self) -> &'static str {
        match self {
            End::Client => "client",
            End::Server => "server",
        }
    }

    /// The files this end reads.
    pub fn files(self) -> [&'static str; 3] {
        let [c, k] = match self {
            End::Client => CLIENT,
            End::Server => SERVER,
        };
        [CA_CERT, c, k]
    }
}

/// The directory given, else `$VNIO_TLS_DIR`, else [`DEFAULT_DIR`].
pub fn dir_or_default(given: Option<PathBuf>) -> PathBuf {
    given
        .or_else(|| std::env::var_os(DIR_ENV).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
}

/// The files `end` needs that `dir` lacks.
pub fn missing(dir: &Path, end: End) -> Vec<&'static str> {
    end.files()
        .into_iter()
        .filter(|f| !dir.join(f).is_file())
        .collect()
}

/// Refuses, in one line with the fix, a source whose `dir` lacks its files.
pub fn check_source(dir: &Path) -> Result<()> {
    let m = missing(dir, End::Client);
    if m.is_empty() {
        return Ok(());
    }
    let d = dir.display();
    Err(Error::Missing(format!(
        "the migration stream is TLS unless --insecure, and {d} has no {}: create the certificates with `vnio vm tls init {d} --host HOST` (HOST: the destination's name and address) and copy {d} to each host, or pass --tls-dir DIR, or --insecure for a plain-text stream on a trusted lab network",
        m.join(", ")
    )))
}

/// Refuses, in one line with the fix, a destination whose `dir` lacks its files.
pub fn check_destination(dir: &Path) -> Result<()> {
    let m = missing(dir, End::Server);
    if m.is_empty() {
        return Ok(());
    }
    let d = dir.display();
    Err(Error::Missing(format!(
        "no TLS certificates for the migration stream here: {d} has no {} (copy the directory made by `vnio vm tls init` here, or pass --remote-tls-dir DIR)",
        m.join(", ")
    )))
}

/// QMP `object-add`'s arguments for `end`'s credentials from `dir`.
pub fn creds(dir: &Path, end: End) -> serde_json::Value {
    json!({
        "qom-type": "tls-creds-x509",
        "id": CREDS_ID,
        "dir": dir.display().to_string(),
        "endpoint": end.name(),
        "verify-peer": true,
    })
}

/// Gives the QEMU of `qmp` the credentials of `end` from `dir` and makes
/// its migrations use them; the source also checks that the destination's
/// certificate names `hostname`.
pub fn enable(qmp: &mut Qmp, dir: &Path, end: End, hostname: Option<&str>) -> Result<()> {
    // A leftover of an attempt that died half-way would clash.
    disable(qmp);
    qmp.execute("object-add", Some(creds(dir, end)))?;
    let mut params = json!({ "tls-creds": CREDS_ID });
    if let Some(h) = hostname {
        params["tls-hostname"] = json!(h);
    }
    qmp.execute("migrate-set-parameters", Some(params))?;
    Ok(())
}

/// Back to no TLS (a later local migration needs none), best effort.
pub fn disable(qmp: &mut Qmp) {
    let _ = qmp.execute(
        "migrate-set-parameters",
        Some(json!({ "tls-creds": "", "tls-hostname": "" })),
    );
    let _ = qmp.execute("object-del", Some(json!({ "id": CREDS_ID })));
}
