//! Running the external tools the image build relies on (apt-get,
//! dpkg-deb, depmod): one place that turns "not installed" and "failed"
//! into clear errors.

use std::io::ErrorKind;
use std::process::{Command, Output, Stdio};

use crate::error::{Error, Result};

/// Runs `cmd` to completion; `what` names the step in errors, `package`
/// the Debian package that provides the program.
pub(crate) fn run(cmd: &mut Command, what: &str, package: &str) -> Result<Output> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| {
        if e.kind() == ErrorKind::NotFound {
            Error::Missing(format!(
                "{what}: {program} not found (Debian package {package})"
            ))
        } else {
            Error::Io {
                what: format!("{what}: running {program}"),
                source: e,
            }
        }
    })?;
    if !out.status.success() {
        return Err(Error::Tool {
            what: what.to_string(),
            detail: format!("{program} {}: {}", out.status, tail(&out.stderr)),
        });
    }
    Ok(out)
}

/// The last few lines of a tool's error output, for a one-line message.
pub(crate) fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(3);
    lines[start..].join(" / ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_programs_name_their_package() {
        let err = run(
            &mut Command::new("vnio-no-such-tool"),
            "fetching x",
            "vnio-pkg",
        )
        .unwrap_err();
        assert!(matches!(err, Error::Missing(_)));
        assert!(err.to_string().contains("Debian package vnio-pkg"), "{err}");
    }

    #[test]
    fn failures_carry_the_end_of_stderr() {
        let err = run(
            Command::new("sh").args(["-c", "echo one >&2; echo two >&2; exit 3"]),
            "step",
            "dash",
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("step: sh"), "{msg}");
        assert!(msg.contains("one / two"), "{msg}");
    }
}
