//! `vnio vm tls init DIR --host NAME...`: a directory of certificates for
//! the migration stream ([`super::tls`]), made with `rcgen`: a CA, one
//! server certificate naming every host given (DNS names and IP
//! addresses, as the source checks them against the address it sends
//! to), and one client certificate. The same directory, copied to each
//! host, lets any of them migrate to any other and no one else. Keys are
//! ECDSA P-256, written mode 0600; the CA's key (`ca-key.pem`) is only
//! needed to make the directory again with more hosts.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use super::tls::{CA_CERT, CLIENT, SERVER};
use crate::error::{Context, Error, Result};

/// The CA's private key.
pub const CA_KEY: &str = "ca-key.pem";

fn gen(e: rcgen::Error) -> Error {
    Error::Invalid(format!("making the certificates: {e}"))
}

/// The leaf certificates' key usage: QEMU (gnutls) wants a signature key
/// that may also encipher when the extension is present.
fn leaf(
    names: Vec<String>,
    cn: &str,
    purpose: ExtendedKeyUsagePurpose,
) -> Result<CertificateParams> {
    let mut p = CertificateParams::new(names).map_err(gen)?;
    p.distinguished_name.push(DnType::CommonName, cn);
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![purpose];
    Ok(p)
}

/// Checks the host names: DNS names or IP addresses, at least one.
pub fn check_hosts(hosts: &[String]) -> Result<()> {
    if hosts.is_empty() {
        return Err(Error::Invalid(
            "no --host: name each host by the name or address the source sends to (e.g. --host m1 --host 10.99.0.2)".into(),
        ));
    }
    for h in hosts {
        let ok = h.parse::<std::net::IpAddr>().is_ok()
            || (!h.is_empty()
                && h.len() <= 253
                && h.split('.').all(|l| {
                    !l.is_empty()
                        && l.len() <= 63
                        && !l.starts_with('-')
                        && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                }));
        if !ok {
            return Err(Error::Invalid(format!(
                "--host {h:?}: not a DNS name or an IP address"
            )));
        }
    }
    Ok(())
}

/// Writes a CA, a server certificate for `hosts` and a client certificate
/// into `dir` (made mode 0700 if missing; existing files are not
/// overwritten). Returns the files written.
pub fn init(dir: &Path, hosts: &[String]) -> Result<Vec<PathBuf>> {
    check_hosts(hosts)?;
    let names = [CA_CERT, CA_KEY, SERVER[0], SERVER[1], CLIENT[0], CLIENT[1]];
    if let Some(f) = names.iter().find(|f| dir.join(f).exists()) {
        return Err(Error::Invalid(format!(
            "{} exists: vnio vm tls init makes a new directory's certificates and overwrites none (remove the old ones first)",
            dir.join(f).display()
        )));
    }
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(gen)?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "vnio migration CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(gen)?).map_err(gen)?;
    let server_key = KeyPair::generate().map_err(gen)?;
    let server = leaf(
        hosts.to_vec(),
        &hosts[0],
        ExtendedKeyUsagePurpose::ServerAuth,
    )?
    .signed_by(&server_key, &ca)
    .map_err(gen)?;
    let client_key = KeyPair::generate().map_err(gen)?;
    let client = leaf(
        Vec::new(),
        "vnio migration source",
        ExtendedKeyUsagePurpose::ClientAuth,
    )?
    .signed_by(&client_key, &ca)
    .map_err(gen)?;
    if !dir.exists() {
        std::fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .ctx(|| format!("restricting {}", dir.display()))?;
    }
    let files = [
        (CA_CERT, ca.pem(), 0o644),
        (CA_KEY, ca.key().serialize_pem(), 0o600),
        (SERVER[0], server.pem(), 0o644),
        (SERVER[1], server_key.serialize_pem(), 0o600),
        (CLIENT[0], client.pem(), 0o644),
        (CLIENT[1], client_key.serialize_pem(), 0o600),
    ];
    let mut written = Vec::new();
    for (name, text, mode) in files {
        let p = dir.join(name);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&p)
            .ctx(|| format!("creating {}", p.display()))?;
        f.write_all(text.as_bytes())
            .ctx(|| format!("writing {}", p.display()))?;
        written.push(p);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_directory_of_certificates_for_qemu() {
        let tmp = vnio_topo::ssh::control_dir("vnio-certs-test-").unwrap();
        let dir = tmp.join("tls");
        let hosts = vec!["m1".to_string(), "10.99.0.2".to_string()];
        let files = init(&dir, &hosts).unwrap();
        assert_eq!(files.len(), 6);
        let mode = |f: &str| std::fs::metadata(dir.join(f)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("."), 0o700);
        for key in [CA_KEY, SERVER[1], CLIENT[1]] {
            assert_eq!(mode(key), 0o600, "{key}");
        }
        // Nothing is overwritten.
        let e = init(&dir, &hosts).unwrap_err().to_string();
        assert!(e.contains("exists"), "{e}");
        assert!(init(&tmp.join("x"), &[]).is_err());
        assert!(init(&tmp.join("x"), &["a b".into()]).is_err());
        // OpenSSL agrees: both certificates are the CA's, the server's
        // names both hosts, each has its purpose.
        if Command::new("openssl").arg("version").output().is_ok() {
            let ssl = |args: &[&str]| {
                let out = Command::new("openssl")
                    .args(args)
                    .current_dir(&dir)
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                String::from_utf8_lossy(&out.stdout).into_owned()
            };
            for (cert, purpose) in [(SERVER[0], "sslserver"), (CLIENT[0], "sslclient")] {
                let v = ssl(&["verify", "-purpose", purpose, "-CAfile", CA_CERT, cert]);
                assert!(v.contains(": OK"), "{v}");
            }
            let text = ssl(&["x509", "-in", SERVER[0], "-noout", "-text"]);
            assert!(text.contains("DNS:m1"), "{text}");
            assert!(text.contains("IP Address:10.99.0.2"), "{text}");
        }
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
