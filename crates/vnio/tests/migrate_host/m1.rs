//! Machine m1 and the migrations toward it: m1's switch, `vnio` over SSH,
//! the `vnio vm migrate --to m1` command lines, and what runs where (ports,
//! processes, namespaces, the migration stream).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use vnio_switch::control::{Client, Request};
use vnio_vm::testkit::alive;

use crate::machines::MACHINES;
use crate::{text, Reaped, HERE, M1, VNI, VNIO};

/// The machines' SSH configuration (scripts/lab-machines).
pub fn ssh_config() -> String {
    format!("{MACHINES}/ssh_config")
}

/// `vnio ARGS` on m1, over SSH.
pub fn on_m1(args: &[&str]) -> Output {
    let script: Vec<String> = std::iter::once(VNIO)
        .chain(args.iter().copied())
        .map(|a| format!("'{a}'"))
        .collect();
    Command::new("ssh")
        .args(["-F", &ssh_config(), "-o", "BatchMode=yes", "m1", "--"])
        .arg(script.join(" "))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// m1's vnio switch, in namespace vnio-m1, with its VXLAN port toward here.
pub fn m1_switch(dir: &Path) -> Reaped {
    let d = dir.display();
    let cfg = dir.join("switch.toml");
    std::fs::write(
        &cfg,
        format!(
            "[switch]\ncontrol = \"{d}/control.sock\"\nidle_polls = 4\n\
             [[port]]\nname = \"vx\"\nkind = \"vxlan\"\nvni = {VNI}\nlocal = \"{M1}\"\nremotes = [\"{HERE}\"]\n"
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("switch.log")).unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", "vnio-m1", VNIO, "switch", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let sw = Reaped(child);
    let end = Instant::now() + Duration::from_secs(20);
    while !dir.join("control.sock").exists() {
        assert!(
            Instant::now() < end,
            "m1's switch did not start: {}",
            std::fs::read_to_string(dir.join("switch.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    sw
}

/// The names of the ports of the switch at `control`.
pub fn ports(control: &Path) -> Vec<String> {
    let list = Client::connect(control)
        .unwrap()
        .request(&Request::PortList)
        .unwrap();
    let mut out: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str().map(String::from))
        .collect();
    out.sort();
    out
}

/// Processes whose command line mentions `needle` (other than this one).
pub fn processes_with(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for p in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = p.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) || pid == std::process::id().to_string() {
            continue;
        }
        let cmd = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
        let cmd = text(&cmd).replace('\0', " ");
        if cmd.contains(needle) && alive(pid.parse().unwrap()) {
            out.push(format!("{pid}: {cmd}"));
        }
    }
    out
}

/// The network namespace of `pid` (its inode).
pub fn netns_of(pid: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(pid).map(|m| m.ino()).unwrap_or(0)
}

/// Whether a TCP connection from this host to QEMU `pid` (not SSH's) is
/// established in its namespace: the migration stream.
pub fn stream_open(pid: u32) -> bool {
    // 10.99.0.1 as /proc/net/tcp prints it (little-endian hex).
    let here = "0100630A:";
    std::fs::read_to_string(format!("/proc/{pid}/net/tcp"))
        .unwrap_or_default()
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .any(|f| f.len() > 3 && f[3] == "01" && f[2].starts_with(here) && !f[1].ends_with(":0016"))
}

/// Sets `p`'s permission bits.
pub fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Runs `cmd` (a `vnio vm migrate --to`) to its end; asserts that its SSH
/// connection master and that one's directory (`vnio-migrate-PID-XXXXXX`,
/// made by mkdtemp) are gone.
pub fn finished(mut cmd: Command) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let master = format!("vnio-migrate-{pid}-");
    let end = Instant::now() + Duration::from_secs(5);
    while !processes_with(&master).is_empty() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(processes_with(&master), Vec::<String>::new(), "SSH master");
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&master))
        .collect();
    assert!(left.is_empty(), "control directory left: {left:?}");
    out
}

/// The directories every migration of this test uses: the certificates
/// (the same directory serves both sides: the file system is shared) and
/// vnio's copy on m1 (a name with a space, a quote, `$` and `;`).
pub struct Paths {
    pub tls: PathBuf,
    pub bin: PathBuf,
}

/// `vnio vm migrate NAME --to m1` with the test's remote directories, its
/// result as JSON.
pub fn migrate_cmd(root: &Path, name: &str, remote_root: &Path, control: &Path) -> Command {
    let p = paths(remote_root);
    let mut c = Command::new(VNIO);
    c.arg("vm")
        .arg("--state-dir")
        .arg(root)
        .args(["migrate", name, "--to", "m1", "--ssh-config", &ssh_config()])
        .arg("--remote-state-dir")
        .arg(remote_root)
        .arg("--remote-control")
        .arg(control)
        .arg("--remote-bin-dir")
        .arg(&p.bin)
        .arg("--json")
        .stdin(Stdio::null());
    c
}

/// `migrate_cmd` over TLS with the test's certificates.
pub fn tls_cmd(root: &Path, name: &str, remote_root: &Path, control: &Path) -> Command {
    let mut c = migrate_cmd(root, name, remote_root, control);
    c.arg("--tls-dir").arg(paths(remote_root).tls);
    c
}

/// The test's [`Paths`], beside m1's state root `remote_root`.
pub fn paths(remote_root: &Path) -> Paths {
    let m1 = remote_root.parent().unwrap();
    Paths {
        tls: m1.join("tls"),
        bin: m1.join("vnio bin 'q' $HOME; x"),
    }
}

/// The pid of the destination QEMU of a migration into `remote_root`, once it runs.
pub fn destination_qemu(remote_root: &Path, within: Duration) -> Option<u32> {
    let end = Instant::now() + within;
    while Instant::now() < end {
        let found = processes_with(&remote_root.display().to_string())
            .into_iter()
            .find(|p| p.contains("qemu-system") && p.contains("-incoming"));
        if let Some(p) = found {
            return p.split(':').next()?.parse().ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}
