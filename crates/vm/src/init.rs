//! The guest's `/init`: a busybox shell script. It mounts the pseudo file
//! systems, loads the modules listed (in dependency order) in
//! `/etc/vnio/modules`, applies the `vnio.*` kernel command-line settings
//! (see [`crate::cmdline`]), starts the command channel and the agent, and
//! keeps a shell on the serial console. Console lines starting with
//! `vnio-guest:` are what the host watches for.

/// Printed by the acceleration probe's boot (before any module loads).
pub const PROBE_MARKER: &str = "vnio-guest: probe ok";
/// Printed once the agent listens (or, without an agent, once networking is up).
pub const READY_MARKER: &str = "vnio-guest: ready";

/// The script. Part of the image's cache key: changing it rebuilds images.
pub const INIT: &str = r#"#!/bin/busybox sh
# vnio guest init, written by `vnio vm image build`. Settings come from the
# kernel command line: vnio.hostname=NAME vnio.ip=MAC,ADDR/PREFIX (repeat)
# vnio.gw=ADDR vnio.route=DEST/PREFIX,VIA (repeat) vnio.agent=PORT (0: none)
# vnio.token=TOKEN vnio.queues=MAC,N (repeat: turn on N queue pairs of a
# multiqueue NIC) vnio.probe (print a marker and power off: accel probe).
/bin/busybox mkdir -p /proc /sys /dev /tmp /run /root /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
up() { cut -d' ' -f1 /proc/uptime; }

host=vnio-guest agent=7700 token= gw= ips= routes= queues= probe=
for a in $(cat /proc/cmdline); do
  case "$a" in
    vnio.probe) probe=1 ;;
    vnio.hostname=*) host=${a#*=} ;;
    vnio.ip=*) ips="$ips ${a#*=}" ;;
    vnio.gw=*) gw=${a#*=} ;;
    vnio.route=*) routes="$routes ${a#*=}" ;;
    vnio.queues=*) queues="$queues ${a#*=}" ;;
    vnio.agent=*) agent=${a#*=} ;;
    vnio.token=*) token=${a#*=} ;;
  esac
done
if [ -n "$probe" ]; then
  echo "vnio-guest: probe ok"
  poweroff -f
fi
echo "vnio-guest: init at $(up)s"

while read -r m; do
  insmod "/lib/modules/$m" || echo "vnio-guest: insmod $m failed"
done < /etc/vnio/modules
hostname "$host"
ip link set lo up
# The NIC with MAC $1, in $dev. By MAC: the kernel names NICs in probe
# order. A NIC appears once its driver has probed the device.
nic_by_mac() {
  dev= n=0
  while [ -z "$dev" ] && [ $n -lt 100 ]; do
    for d in /sys/class/net/*; do
      [ "$(cat "$d/address" 2>/dev/null)" = "$1" ] && dev=${d##*/}
    done
    [ -z "$dev" ] && { usleep 50000; n=$((n+1)); }
  done
  [ -n "$dev" ] || echo "vnio-guest: no NIC with MAC $1"
}
# A multiqueue NIC starts with as many queue pairs as vCPUs: all of them
# on (`ethtool -L DEV combined N`, busybox has no ethtool).
for q in $queues; do
  nic_by_mac "${q%%,*}"
  [ -n "$dev" ] && { vnio vm guest-channels "$dev" "${q#*,}" || echo "vnio-guest: cannot set $dev's queues to ${q#*,}"; }
done
for i in $ips; do
  mac=${i%%,*} cidr=${i#*,}
  nic_by_mac "$mac"
  [ -z "$dev" ] && continue
  { ip link set "$dev" up && ip addr add "$cidr" dev "$dev"; } || echo "vnio-guest: cannot configure $dev with $cidr"
done
[ -n "$gw" ] && { ip route add default via "$gw" || echo "vnio-guest: cannot add default route via $gw"; }
for r in $routes; do
  ip route add "${r%%,*}" via "${r#*,}" || echo "vnio-guest: cannot add route $r"
done

vnio vm guest-serve > /tmp/guest-serve.log 2>&1 &
if [ "$agent" != 0 ]; then
  if [ -n "$token" ]; then
    vnio agent --listen "0.0.0.0:$agent" --token "$token" > /tmp/agent.log 2>&1 &
  else
    vnio agent --listen "0.0.0.0:$agent" > /tmp/agent.log 2>&1 &
  fi
  n=0
  while ! netstat -ltn 2>/dev/null | grep -q ":$agent "; do
    n=$((n+1))
    if [ $n -gt 400 ]; then echo "vnio-guest: agent not listening:"; cat /tmp/agent.log; break; fi
    usleep 50000
  done
fi
echo "vnio-guest: ready at $(up)s host $host addrs$ips agent $agent"

# A shell on the serial console for `vnio vm console` (PID 1 must never exit).
while true; do
  setsid cttyhack sh -l
  sleep 1
done
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_markers_are_in_the_script() {
        assert!(INIT.contains(&format!("echo \"{PROBE_MARKER}\"")));
        assert!(INIT.contains(&format!("echo \"{READY_MARKER} at")));
        assert!(INIT.starts_with("#!/bin/busybox sh\n"));
    }

    #[test]
    fn the_script_parses_as_shell() {
        // `sh -n` reads without running; any POSIX shell will do here.
        let Ok(out) = std::process::Command::new("sh")
            .args(["-n", "-c", INIT])
            .output()
        else {
            return;
        };
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
