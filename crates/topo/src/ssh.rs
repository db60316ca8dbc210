//! OpenSSH command lines for one machine: `ssh` as installed (files travel on its input),
//! the user's keys and SSH configuration, never prompting (`BatchMode`),
//! one connection master per machine (`ControlMaster`/`ControlPersist`: a
//! run's many commands pay the handshake once), and timeouts so a dead
//! machine fails a command instead of hanging it. The lab drives its
//! machines with it, and `vnio vm migrate --to HOST` its destination.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the connection master outlives its last client.
const PERSIST: &str = "60";

/// Everything needed to reach one machine again (also from `vnio lab
/// clean`, long after the run that wrote it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ssh {
    /// The destination.
    pub dest: String,
    /// `-F` file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// `-o` options (a scenario's, a command line's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// The directory of the connection master's socket (local).
    pub control_dir: PathBuf,
}

impl Ssh {
    /// Destination `dest` (`[user@]host` or a `Host` of the SSH
    /// configuration), with `-F config` and `-o options` if given, its
    /// connection master's socket in `control_dir`.
    pub fn new(
        dest: &str,
        config: Option<String>,
        options: Vec<String>,
        control_dir: &Path,
    ) -> Ssh {
        Ssh {
            dest: dest.to_owned(),
            config,
            options,
            control_dir: control_dir.to_path_buf(),
        }
    }

    /// Options of every `ssh` command. The caller's come first: for
    /// each option OpenSSH keeps the first value it is given.
    fn options(&self, cmd: &mut Command) {
        if let Some(f) = &self.config {
            cmd.arg("-F").arg(f);
        }
        for o in &self.options {
            cmd.arg("-o").arg(o);
        }
        let control = self.control_dir.join("%C");
        for o in [
            "BatchMode=yes".to_owned(),
            format!("ConnectTimeout={}", CONNECT_TIMEOUT.as_secs()),
            "ServerAliveInterval=5".to_owned(),
            "ServerAliveCountMax=3".to_owned(),
            "ControlMaster=auto".to_owned(),
            format!("ControlPath={}", control.display()),
            format!("ControlPersist={PERSIST}"),
        ] {
            cmd.arg("-o").arg(o);
        }
    }

    /// `ssh DEST -- SCRIPT`: the remote shell runs `script`.
    pub fn command(&self, script: &str) -> Command {
        let mut cmd = Command::new("ssh");
        self.options(&mut cmd);
        // No terminal: the far process sees our pipes, and ends when they
        // close.
        cmd.arg("-T").arg(&self.dest).arg("--").arg(script);
        cmd.stdin(Stdio::null());
        cmd
    }

    /// Run `script` there; its standard output, or a one-line error.
    pub fn run(&self, script: &str, what: &str) -> Result<String, String> {
        let out = self.command(script).output().map_err(|e| {
            format!(
                "{}: running ssh: {e} (is OpenSSH's client installed?)",
                self.dest
            )
        })?;
        checked(out, &self.dest, what)
    }

    /// Copy local `from` to `to` on the machine, readable by its owner
    /// only. The file travels on `ssh`'s input into `cat`, and `to` is
    /// quoted for the remote shell ([`quote`]): unlike `scp HOST:PATH`,
    /// no remote path is ever read by a shell as anything but one word.
    pub fn copy(&self, from: &Path, to: &str) -> Result<(), String> {
        let file =
            std::fs::File::open(from).map_err(|e| format!("reading {}: {e}", from.display()))?;
        let mut cmd = self.command(&format!("umask 077 && cat > {}", quote(to)));
        let out = cmd
            .stdin(file)
            .output()
            .map_err(|e| format!("{}: running ssh: {e}", self.dest))?;
        checked(out, &self.dest, &format!("copying {}", from.display())).map(|_| ())
    }

    /// Copy `from` to `to` there so that `to` appears whole or not at all:
    /// to `TO.part` first, then renamed (a half-copied file is never run).
    /// The copy keeps the owner's permission bits of `from` (an
    /// executable stays one) and gives none to group or others.
    pub fn install(&self, from: &Path, to: &str, what: &str) -> Result<(), String> {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(from)
            .map_err(|e| format!("reading {}: {e}", from.display()))?
            .permissions()
            .mode()
            & 0o700;
        let part = format!("{to}.part");
        self.copy(from, &part)?;
        self.run(
            &format!(
                "chmod {mode:o} {p} && mv -f {p} {t}",
                p = quote(&part),
                t = quote(to)
            ),
            what,
        )
        .map(|_| ())
    }

    /// End the connection master, if one runs.
    pub fn exit_master(&self) {
        let mut cmd = Command::new("ssh");
        self.options(&mut cmd);
        let _ = cmd
            .arg("-O")
            .arg("exit")
            .arg(&self.dest)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn checked(out: Output, dest: &str, what: &str) -> Result<String, String> {
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err
        .lines()
        .rfind(|l| !l.trim().is_empty())
        .unwrap_or("no message");
    Err(format!("{dest}: {what}: {} ({})", last.trim(), out.status))
}

/// `word` quoted for a POSIX shell: one word whatever it holds (spaces,
/// quotes, `$`, `;`, newlines), since nothing inside single quotes is
/// special and a single quote is closed, escaped and reopened.
pub fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// A new directory for connection masters' sockets, made by `mkdtemp(3)`
/// under the system's temporary directory: a fresh name with random
/// characters, created mode 0700 by this call or not at all (a directory
/// someone made beforehand under a predictable name is never used).
pub fn control_dir(prefix: &str) -> Result<PathBuf, String> {
    let template = std::env::temp_dir().join(format!("{prefix}XXXXXX"));
    nix::unistd::mkdtemp(&template)
        .map_err(|e| format!("creating a directory {}: {e}", template.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    /// Each word, quoted, reaches a real shell's `printf` as one argument,
    /// unchanged, and runs nothing (the `;`/`$(...)` would create a file).
    #[test]
    fn quoted_words_reach_the_shell_whole() {
        let dir = control_dir("vnio-quote-test-").unwrap();
        let canary = dir.join("ran");
        let c = canary.display();
        let words = [
            "plain".to_owned(),
            "/var/lib/vnio bin/with space".to_owned(),
            "it's \"quoted\"".to_owned(),
            "$HOME and ${PATH} and `id`".to_owned(),
            format!("x; touch {c}"),
            format!("$(touch {c})"),
            format!("'; touch {c}; echo '"),
            "new\nline\tand \\ backslash".to_owned(),
            String::new(),
        ];
        for w in &words {
            let out = Command::new("sh")
                .arg("-c")
                .arg(format!("printf '%s|' {}", quote(w)))
                .output()
                .unwrap();
            assert!(out.status.success());
            assert_eq!(String::from_utf8_lossy(&out.stdout), format!("{w}|"));
        }
        assert!(!canary.exists(), "a quoted word ran a command");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn control_dirs_are_fresh_and_private() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let a = control_dir("vnio-ctl-test-").unwrap();
        let b = control_dir("vnio-ctl-test-").unwrap();
        assert_ne!(a, b);
        for d in [&a, &b] {
            let m = std::fs::metadata(d).unwrap();
            assert_eq!(m.permissions().mode() & 0o7777, 0o700, "{}", d.display());
            assert_eq!(m.uid(), nix::unistd::geteuid().as_raw());
            assert!(std::fs::read_dir(d).unwrap().next().is_none(), "empty");
            let name = d.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                name.starts_with("vnio-ctl-test-") && name.len() == 20,
                "{name}"
            );
        }
        std::fs::remove_dir_all(&a).unwrap();
        std::fs::remove_dir_all(&b).unwrap();
    }

    #[test]
    fn the_callers_options_come_first() {
        let ssh = Ssh::new(
            "root@m1",
            Some("/x/config".into()),
            vec!["ConnectTimeout=3".into()],
            Path::new("/run/c"),
        );
        let cmd = ssh.command("true");
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let pos = |s: &str| args.iter().position(|a| a == s).unwrap();
        assert_eq!(args[0..2], ["-F", "/x/config"]);
        assert!(pos("ConnectTimeout=3") < pos("ConnectTimeout=10"));
        assert!(args.contains(&"BatchMode=yes".to_owned()));
        assert!(args.contains(&"ControlPath=/run/c/%C".to_owned()));
        assert_eq!(args[args.len() - 3..], ["root@m1", "--", "true"]);
    }
}
