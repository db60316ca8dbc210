//! TCP streams from a guest, to another guest or to a listener here,
//! checked byte for byte against the md5 the sender printed.

use std::io::Read;
use std::net::TcpListener;
use std::time::Duration;

use super::sh;
use crate::state::VmDir;

/// Makes `kib` KiB of random bytes in guest `from` and sends them with
/// busybox nc (`nc_args`: options, address, port), within `t`; their md5 as
/// `md5sum` prints it.
fn send_random(from: &VmDir, kib: u32, nc_args: &str, t: Duration, what: &str) -> String {
    let send = format!(
        "dd if=/dev/urandom of=/tmp/out bs=1024 count={kib} 2>/dev/null && md5sum < /tmp/out && nc {nc_args} < /tmp/out"
    );
    let out = crate::exec::exec(from, &sh(&send), t).unwrap();
    assert!(
        out.success(),
        "{what}: sending {kib} KiB (nc {nc_args}): {out:?}"
    );
    out.stdout
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string()
}

/// Sends `kib` KiB of random bytes over TCP from guest `from` to guest `to`
/// (listening at `to_ip`:`port`; busybox nc at both ends) and asserts that
/// all of them arrived with the sender's md5. `what` names the transfer in a
/// failure.
pub fn tcp_transfer(from: &VmDir, to: &VmDir, to_ip: &str, port: u16, kib: u32, what: &str) {
    let t = Duration::from_secs(120);
    let file = format!("/tmp/recv{port}");
    // busybox nc stops at the end of its stdin: feed it a pipe that stays open.
    let listen = format!("(sleep 600 | nc -l -p {port} > {file} 2>/dev/null) > /dev/null 2>&1 &");
    let out = crate::exec::exec(to, &sh(&listen), t).unwrap();
    assert!(out.success(), "{what}: listener: {out:?}");
    let sent = send_random(from, kib, &format!("-w 10 {to_ip} {port}"), t, what);
    let bytes = u64::from(kib) * 1024;
    let wait = format!(
        "n=0; while [ \"$(wc -c < {file})\" -lt {bytes} ] && [ $n -lt 300 ]; do usleep 100000; n=$((n+1)); done; md5sum < {file}; wc -c < {file}"
    );
    let out = crate::exec::exec(to, &sh(&wait), t).unwrap();
    let got: Vec<&str> = out.stdout.split_whitespace().collect();
    assert_eq!(
        (got.first().copied(), got.last().copied()),
        (Some(sent.as_str()), Some(bytes.to_string().as_str())),
        "{what}: the TCP stream arrived intact"
    );
}

/// The md5 of `data`, as `md5sum` prints it (what the guests' busybox
/// prints for the bytes they sent).
fn md5(data: &[u8]) -> String {
    let mut child = std::process::Command::new("md5sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("md5sum");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), data).unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_string()
}

/// Sends `kib` KiB of random bytes over TCP from guest `from` to
/// `listener` (in the host or a namespace: the address it is bound to is
/// where the guest connects) and asserts that all of them arrived with the
/// sender's md5. `what` names the transfer in a failure.
pub fn tcp_to_listener(from: &VmDir, listener: TcpListener, kib: u32, what: &str) {
    let to = listener.local_addr().expect("the listener's address");
    let receiver = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        let mut data = Vec::new();
        conn.read_to_end(&mut data).unwrap();
        data
    });
    let sent = send_random(
        from,
        kib,
        &format!("{} {}", to.ip(), to.port()),
        Duration::from_secs(180),
        what,
    );
    let data = receiver.join().expect("the receiver");
    assert_eq!(
        data.len(),
        kib as usize * 1024,
        "{what}: bytes that arrived"
    );
    assert_eq!(md5(&data), sent, "{what}: the stream arrived intact");
}
