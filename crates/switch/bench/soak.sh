#!/usr/bin/env bash
# Soak: a live switch and a live agent under mixed traffic, port churn,
# resets and hostile input for DURATION seconds (default 3600), their RSS
# and open descriptors sampled every EVERY seconds (default 10). Not in CI.
#
#   crates/switch/bench/soak.sh                 # one hour
#   DURATION=300 crates/switch/bench/soak.sh    # five minutes
#
# What runs at once:
# - through the switch: `vnio rr --via` (a poll-mode driver on p2, sleeping
#   on calls) against `vnio endpoint` (UDP echo on p3), 30 s runs back to
#   back, each a new front-end on p2 (a reconnect every 30 s);
# - hostile front-ends on p1 and p4 (examples/hostile_frontend.rs: every case
#   of the hostile-frontend suite, round after round);
# - port churn: p5 added and removed over the control socket every second,
#   a front-end connecting to it in between;
# - garbage on the control socket (random lines, over-long lines);
# - on the agent: TCP and UDP request-response and a UDP stream, 20 s runs
#   back to back, plus random bytes and half-open connections on its port.
# Every sample is a CSV row (results/soak-<date>.csv); the end compares the
# median of the first 10 minutes after a 60 s warm-up with the median of the
# last 10 minutes: RSS and descriptors grown by at most 5%, both processes alive.
# Exits non-zero otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
dur=${DURATION:-3600}
every=${EVERY:-10}
warm=${WARMUP:-60}
cargo build --release --locked -q -p vnio
cargo build --release --locked -q -p vnio-switch --example hostile_frontend
vnio=$root/target/release/vnio
hostile=$root/target/release/examples/hostile_frontend
run=$(mktemp -d /tmp/vnio-soak.XXXXXX)
mkdir -p results
csv=results/soak-$(date +%Y%m%d-%H%M%S).csv
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$run"
}
trap cleanup EXIT

cat >"$run/switch.toml" <<EOF
[switch]
control = "$run/control.sock"
EOF
for p in p1 p2 p3 p4; do
    printf '[[port]]\nname = "%s"\nkind = "vhost-user"\nsocket = "%s/%s.sock"\n' "$p" "$run" "$p" >>"$run/switch.toml"
done
"$vnio" switch --config "$run/switch.toml" >"$run/switch.log" 2>&1 &
switch_pid=$!
pids+=("$switch_pid")
"$vnio" agent --listen 127.0.0.1:7790 >"$run/agent.log" 2>&1 &
agent_pid=$!
pids+=("$agent_pid")
for _ in $(seq 100); do [ -S "$run/control.sock" ] && break; sleep 0.1; done
ctl=(--control "$run/control.sock")

# Runs a command again and again until the soak ends.
forever() { (while [ -e "$run/go" ]; do "$@" >/dev/null 2>&1 || sleep 0.2; done) & pids+=("$!"); }
touch "$run/go"

forever "$vnio" endpoint "vhost-user:$run/p3.sock,ip=10.0.0.9,wait" -d 3600s
forever "$vnio" rr -p udp --echo-server -t 10.0.0.9:7 --rate 2000 -d 30s \
    --via "vhost-user:$run/p2.sock,ip=10.0.0.5,wait"
for p in p1 p4; do
    (while [ -e "$run/go" ]; do
        "$hostile" "$run/$p.sock" 60 >>"$run/hostile-$p.log" 2>&1 || echo "FAILED" >>"$run/hostile-$p.log"
    done) &
    pids+=("$!")
done
forever bash -c "
    '$vnio' switch ${ctl[*]} port add p5 --socket '$run/p5.sock' &&
    timeout 0.5 '$vnio' endpoint 'vhost-user:$run/p5.sock,ip=10.0.0.77,wait' -d 1s;
    '$vnio' switch ${ctl[*]} port del p5; sleep 0.5"
forever python3 -c "
import os, socket, random
s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect('$run/control.sock')
n = random.choice([10, 1000, 200000])
s.sendall(bytes(random.randrange(256) for _ in range(min(n, 4096))) * (n // 4096 + 1) + b'\n')
try: s.recv(4096)
except Exception: pass
"
forever "$vnio" rr -t 127.0.0.1:7790 -p tcp --sessions 4 --burst 4 -d 20s
forever "$vnio" rr -t 127.0.0.1:7790 -p udp --sessions 2 -d 20s
forever "$vnio" stream -t 127.0.0.1:7790 -p udp --rate 20000 -d 20s
forever python3 -c "
import socket, random, time
socks = []
for _ in range(8):
    s = socket.create_connection(('127.0.0.1', 7790), timeout=2)
    s.sendall(bytes(random.randrange(256) for _ in range(random.randrange(1, 3000))))
    socks.append(s)
time.sleep(3)
"

sample() { # pid -> "rss_kib fds"
    local rss fds
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo dead)
    fds=$(ls "/proc/$1/fd" 2>/dev/null | wc -l)
    echo "$rss $fds"
}
echo "t_s,switch_rss_kib,switch_fds,agent_rss_kib,agent_fds" >"$csv"
start=$SECONDS
while [ $((SECONDS - start)) -lt "$dur" ]; do
    sleep "$every"
    read -r srss sfds < <(sample "$switch_pid")
    read -r arss afds < <(sample "$agent_pid")
    t=$((SECONDS - start))
    echo "$t,$srss,$sfds,$arss,$afds" >>"$csv"
    if [ "$srss" = dead ] || [ "$arss" = dead ]; then
        echo "soak: a process died at $t s (switch rss $srss, agent rss $arss)"
        tail -5 "$run/switch.log" "$run/agent.log"
        exit 1
    fi
done
rm -f "$run/go"
# Start and end are the medians of the first and the last WINDOW seconds
# (default 600) after the warm-up: descriptors and RSS move with the
# connections in flight at a sample's instant, a trend does not.
fail=0
echo "soak: $dur s, samples in $csv"
python3 - "$csv" "$warm" "${WINDOW:-600}" <<'PY' || fail=1
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
warm, window = int(sys.argv[2]), int(sys.argv[3])
rows = [r for r in rows if int(r["t_s"]) >= warm]
end = int(rows[-1]["t_s"])
ok = True
for k, name in [("switch_rss_kib", "switch RSS KiB"), ("switch_fds", "switch descriptors"),
                ("agent_rss_kib", "agent RSS KiB"), ("agent_fds", "agent descriptors")]:
    v = [(int(r["t_s"]), int(r[k])) for r in rows]
    a = statistics.median(x for t, x in v if t < warm + window)
    b = statistics.median(x for t, x in v if t > end - window)
    pct = (b - a) * 100 / a
    print(f"soak: {name}: median {a:g} -> {b:g} ({pct:+.1f}%), range {min(x for _, x in v)}-{max(x for _, x in v)}")
    ok &= pct <= 5  # growth is what a leak looks like; fewer in flight at the end is not
sys.exit(0 if ok else 1)
PY
rounds=$(cat "$run"/hostile-p*.log | grep -c '^hostile_frontend: round' || true)
failed=$(cat "$run"/hostile-p*.log | grep -c 'FAILED' || true)
resets=$("$vnio" switch "${ctl[@]}" port stats --json | python3 -c "
import json, sys; d = json.load(sys.stdin); print(sum(p['resets'] for p in d.values()))")
echo "soak: hostile rounds $rounds (failed $failed), port resets $resets, both processes alive"
[ "$failed" -eq 0 ] || fail=1
exit $fail
