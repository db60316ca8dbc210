//! Debian packages as guest ingredients: resolved with apt-cache,
//! downloaded with `apt-get download` and unpacked with `dpkg-deb -x` into
//! the cache. Nothing is installed on the host.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use crate::error::{Context, Error, Result};
use crate::tool::run;

/// One version of one binary package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageRef {
    /// Package name (`linux-image-6.1.0-56-amd64`).
    pub name: String,
    /// Debian version (`6.1.192-2`).
    pub version: String,
}

impl std::fmt::Display for PackageRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.name, self.version)
    }
}

impl PackageRef {
    /// A name safe as one path component (epochs have a colon).
    fn file_stem(&self) -> String {
        format!("{}_{}", self.name, self.version).replace([':', '/'], "_")
    }
}

/// The fields of the candidate version of `package` (`apt-cache show`).
fn show(package: &str) -> Result<Vec<(String, String)>> {
    let out = run(
        Command::new("apt-cache").args(["show", "--no-all-versions", package]),
        &format!("looking up {package} (is it in your apt sources? try `apt-get update`)"),
        "apt",
    )?;
    Ok(parse_fields(&String::from_utf8_lossy(&out.stdout)))
}

/// "Key: value" lines of a control stanza (continuations ignored).
pub(crate) fn parse_fields(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn field<'a>(fields: &'a [(String, String)], key: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The candidate version of `package`.
pub fn resolve(package: &str) -> Result<PackageRef> {
    let fields = show(package)?;
    let version = field(&fields, "Version")
        .ok_or_else(|| Error::Missing(format!("apt-cache shows no version of {package}")))?;
    Ok(PackageRef {
        name: package.to_string(),
        version: version.to_string(),
    })
}

/// The real kernel package a metapackage such as `linux-image-amd64`
/// depends on (the metapackage itself holds no kernel).
pub fn resolve_kernel(meta: &str) -> Result<PackageRef> {
    let fields = show(meta)?;
    let depends = field(&fields, "Depends").unwrap_or("");
    match kernel_dependency(depends) {
        Some(name) => resolve(&name),
        // Already a versioned kernel package.
        None if meta.starts_with("linux-image-") => resolve(meta),
        None => Err(Error::Invalid(format!(
            "{meta} depends on no linux-image package (Depends: {depends})"
        ))),
    }
}

/// The first `linux-image-*` name in a Depends field.
pub(crate) fn kernel_dependency(depends: &str) -> Option<String> {
    depends
        .split([',', '|'])
        .map(|d| d.split_whitespace().next().unwrap_or(""))
        .find(|name| name.starts_with("linux-image-"))
        .map(str::to_string)
}

/// Name and version of a local `.deb` file.
pub fn describe_deb(deb: &Path) -> Result<PackageRef> {
    let out = run(
        Command::new("dpkg-deb")
            .args(["-f"])
            .arg(deb)
            .args(["Package", "Version"]),
        &format!("reading {}", deb.display()),
        "dpkg",
    )?;
    let fields = parse_fields(&String::from_utf8_lossy(&out.stdout));
    match (field(&fields, "Package"), field(&fields, "Version")) {
        (Some(name), Some(version)) => Ok(PackageRef {
            name: name.into(),
            version: version.into(),
        }),
        _ => Err(Error::Invalid(format!(
            "{} is not a Debian package",
            deb.display()
        ))),
    }
}

/// Downloads `pkg` into `debs` (once); returns the `.deb` path.
pub fn download(pkg: &PackageRef, debs: &Path) -> Result<PathBuf> {
    let dest = debs.join(format!("{}.deb", pkg.file_stem()));
    if dest.exists() {
        return Ok(dest);
    }
    std::fs::create_dir_all(debs).ctx(|| format!("creating {}", debs.display()))?;
    // A private directory: apt-get download names files itself (epochs
    // become %3a), and a half-downloaded file must never look complete.
    let tmp = debs.join(crate::image::unique(".download"));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).ctx(|| format!("creating {}", tmp.display()))?;
    let result = (|| {
        run(
            Command::new("apt-get")
                .args(["download", "-q"])
                .arg(format!("{}={}", pkg.name, pkg.version))
                .current_dir(&tmp),
            &format!("downloading {pkg}"),
            "apt",
        )?;
        let got = std::fs::read_dir(&tmp)
            .ctx(|| format!("reading {}", tmp.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| p.extension().is_some_and(|x| x == "deb"))
            .ok_or_else(|| Error::Tool {
                what: format!("downloading {pkg}"),
                detail: "apt-get download left no .deb".into(),
            })?;
        std::fs::rename(&got, &dest).ctx(|| format!("moving {} into the cache", got.display()))
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    result.map(|()| dest)
}

/// Unpacks `deb` into `dir` (once: a `.complete` marker says it finished).
pub fn extract(deb: &Path, dir: &Path) -> Result<()> {
    if dir.join(".complete").exists() {
        return Ok(());
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).ctx(|| format!("creating {}", dir.display()))?;
    run(
        Command::new("dpkg-deb").arg("-x").arg(deb).arg(dir),
        &format!("unpacking {}", deb.display()),
        "dpkg",
    )?;
    std::fs::write(dir.join(".complete"), b"").ctx(|| format!("marking {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metapackage_names_the_real_kernel() {
        assert_eq!(
            kernel_dependency("linux-image-6.1.0-56-amd64 (= 6.1.192-2)").as_deref(),
            Some("linux-image-6.1.0-56-amd64")
        );
        assert_eq!(
            kernel_dependency("foo, linux-image-6.12.1-cloud-amd64 | bar").as_deref(),
            Some("linux-image-6.12.1-cloud-amd64")
        );
        assert_eq!(kernel_dependency("busybox"), None);
    }

    #[test]
    fn control_fields_parse() {
        let f =
            parse_fields("Package: busybox-static\nVersion: 1:1.35.0-4\nDescription: x\n more\n");
        assert_eq!(field(&f, "Version"), Some("1:1.35.0-4"));
        assert_eq!(f.len(), 3);
        let p = PackageRef {
            name: "busybox-static".into(),
            version: "1:1.35.0-4".into(),
        };
        assert_eq!(p.file_stem(), "busybox-static_1_1.35.0-4");
    }
}
