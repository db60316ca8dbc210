//! The plugin's record of each attachment, one JSON file per port in the
//! data directory: written before anything is created (so that a crash
//! mid-ADD leaves something GC and DEL can find), completed with the
//! result at the end of ADD (so that an ADD repeated answers the same),
//! removed by DEL. It keeps what DEL and GC need when the runtime no
//! longer has it: the namespace, the socket directory, the IPAM call.

use crate::error::CniError;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// One attachment.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Record {
    /// The network's name.
    pub network: String,
    /// CNI_CONTAINERID.
    pub container_id: String,
    /// CNI_IFNAME.
    pub ifname: String,
    /// CNI_NETNS.
    pub netns: String,
    /// The switch port.
    pub port: String,
    /// vhost-user: the pod's socket directory (removed by DEL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_dir: Option<PathBuf>,
    /// vhost-user: the device-info file written (removed by DEL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_info: Option<PathBuf>,
    /// The configuration ADD got (IPAM's DEL gets it again).
    pub conf: serde_json::Value,
    /// CNI_PATH at ADD.
    pub cni_path: String,
    /// The result, once ADD finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
}

/// The data directory.
pub struct Records(pub PathBuf);

impl Records {
    fn file(&self, port: &str) -> PathBuf {
        self.0.join(format!("{port}.json"))
    }

    /// The record of `port`, if there is one (an unreadable one is none).
    pub fn get(&self, port: &str) -> Option<Record> {
        let t = std::fs::read(self.file(port)).ok()?;
        serde_json::from_slice(&t).ok()
    }

    /// Writes the record atomically (temporary file, fsync, rename).
    pub fn put(&self, r: &Record) -> Result<(), CniError> {
        let err = |e: std::io::Error| CniError::io(format!("writing the record of {}", r.port), &e);
        std::fs::create_dir_all(&self.0).map_err(err)?;
        let path = self.file(&r.port);
        let tmp = self.0.join(format!(".{}.tmp", r.port));
        let body = serde_json::to_vec(r).map_err(|e| CniError::io("encoding a record", &e))?;
        let mut f = std::fs::File::create(&tmp).map_err(err)?;
        f.write_all(&body).map_err(err)?;
        f.sync_all().map_err(err)?;
        std::fs::rename(&tmp, &path).map_err(err)
    }

    /// Forgets `port`.
    pub fn remove(&self, port: &str) -> Result<(), CniError> {
        match std::fs::remove_file(self.file(port)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(CniError::io(format!("removing the record of {port}"), &e))
            }
            _ => Ok(()),
        }
    }

    /// Every record of network `network`.
    pub fn of_network(&self, network: &str) -> Vec<Record> {
        let Ok(rd) = std::fs::read_dir(&self.0) else {
            return Vec::new();
        };
        rd.filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
            .filter_map(|e| std::fs::read(e.path()).ok())
            .filter_map(|t| serde_json::from_slice::<Record>(&t).ok())
            .filter(|r| r.network == network)
            .collect()
    }
}

/// The switch port of an attachment: `cni-` and 16 hex digits of a hash of
/// the network, the container and the interface (unique per attachment,
/// the same on every call, short enough for a port name and a directory).
pub fn port_name(network: &str, container_id: &str, ifname: &str) -> String {
    // FNV-1a, 64 bits: stable across builds and platforms (std's hasher is not).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in network
        .bytes()
        .chain([0])
        .chain(container_id.bytes())
        .chain([0])
        .chain(ifname.bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("cni-{h:016x}")
}

/// True for the directory and files this plugin may remove under `dir`.
pub fn is_under(dir: &Path, p: &Path) -> bool {
    p.starts_with(dir) && p != dir
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_distinct_and_short() {
        let a = port_name("n", "c1", "eth0");
        assert_eq!(a, port_name("n", "c1", "eth0"));
        assert_ne!(a, port_name("n", "c1", "eth1"));
        assert_ne!(a, port_name("n", "c1e", "th0"));
        assert_ne!(a, port_name("m", "c1", "eth0"));
        assert_eq!(a.len(), 20);
        let names: std::collections::HashSet<_> = (0..10000)
            .map(|i| port_name("n", &format!("c{i}"), "eth0"))
            .collect();
        assert_eq!(names.len(), 10000);
    }
}
