#!/usr/bin/env bash
# vnio's instrument against the tools people use, in one run, one placement:
# the client on CPU $CLIENT_CPU, the server side on CPU $SERVER_CPU.
#
#   rr UDP/TCP 256 B: vnio rr vs sockperf ping-pong vs a raw echo loop (floor)
#   stream TCP: vnio stream vs iperf3
#   paced UDP: 10K, 100K pps and the highest rate this machine carries
#   cost of recording one sample and of reading the clock
#
# Rounds are interleaved (ROUNDS, default 3) and medians reported, because
# rates on shared hosts jump between plateaus. sockperf reports half the round
# trip; its figures are doubled here to compare round trips.
#
# Usage: bench/instrument.sh [SECONDS per measurement, default 5]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
ROUNDS=${ROUNDS:-3}
CLIENT_CPU=${CLIENT_CPU:-0}
SERVER_CPU=${SERVER_CPU:-1}
scripts/setup --bench
cargo build --release --locked -q --examples -p vnio-measure
VNIO=target/release/vnio
RAW=target/release/examples/raw_echo
OUT=${OUT:-results/bench-instrument-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
C="taskset -c $CLIENT_CPU"
S="taskset -c $SERVER_CPU"
pids=()
cleanup() { for p in "${pids[@]:-}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$1) 2>/dev/null && return 0; sleep 0.05; done; return 1; }
jq_() { python3 -c "import json,sys; d=json.load(open('$1')); print($2)"; }

AP=$(free_port); $S $VNIO agent --listen 127.0.0.1:$AP 2>/dev/null & pids+=($!)
SP_U=$(free_port); $S sockperf server -i 127.0.0.1 -p $SP_U >/dev/null 2>&1 & pids+=($!)
SP_T=$(free_port); $S sockperf server --tcp -i 127.0.0.1 -p $SP_T >/dev/null 2>&1 & pids+=($!)
RU=$(free_port); $S $RAW server udp 127.0.0.1:$RU & pids+=($!)
RT=$(free_port); $S $RAW server tcp 127.0.0.1:$RT & pids+=($!)
IP=$(free_port); $S iperf3 -s -B 127.0.0.1 -p $IP >/dev/null 2>&1 & pids+=($!)
wait_port $AP; wait_port $SP_T; wait_port $RT; wait_port $IP; sleep 0.3

rows="$OUT/rows.tsv"; : > "$rows"
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$rows"; echo "  $1 $2 $3 = $4"; }
sockperf_p() { # file percentile -> round trip ns (sockperf prints half round trip in usec)
  awk -v p="$2" '$0 ~ "percentile "p" =" {print int($NF*2000)}' "$1"; }

for r in $(seq "$ROUNDS"); do
  echo "round $r/$ROUNDS"
  for proto in udp tcp; do
    read -r p50 p99 n < <($C $RAW client $proto 127.0.0.1:$([ $proto = udp ] && echo $RU || echo $RT) 256 "$SECS")
    row rr-$proto raw p50_ns "$p50"; row rr-$proto raw p99_ns "$p99"
    f="$OUT/sockperf-$proto-$r.txt"
    $C sockperf ping-pong $([ $proto = tcp ] && echo --tcp) -i 127.0.0.1 -p $([ $proto = udp ] && echo $SP_U || echo $SP_T) -m 256 -t "$SECS" > "$f" 2>&1 || true
    row rr-$proto sockperf p50_ns "$(sockperf_p "$f" 50.000)"; row rr-$proto sockperf p99_ns "$(sockperf_p "$f" 99.000)"
    j="$OUT/vnio-rr-$proto-$r.json"
    $VNIO rr -t 127.0.0.1:$AP -p $proto --size 256 --nodelay -d "${SECS}s" --warmup 0.5s --cpu $CLIENT_CPU --agent-cpu $SERVER_CPU -o "$j" >/dev/null 2>&1 || true
    row rr-$proto vnio p50_ns "$(jq_ "$j" "d['iterations'][d['chosen']]['merged']['latency']['p50_ns']")"
    row rr-$proto vnio p99_ns "$(jq_ "$j" "d['iterations'][d['chosen']]['merged']['latency']['p99_ns']")"
  done
  f="$OUT/iperf3-$r.json"
  $C iperf3 -c 127.0.0.1 -p $IP -t "$SECS" -J > "$f" 2>/dev/null || true
  row stream-tcp iperf3 gbps "$(jq_ "$f" "round(d['end']['sum_received']['bits_per_second']/1e9, 3)")"
  j="$OUT/vnio-stream-$r.json"
  $VNIO stream -t 127.0.0.1:$AP -d "${SECS}s" --warmup 0.5s --cpu $CLIENT_CPU --agent-cpu $SERVER_CPU -o "$j" >/dev/null 2>&1 || true
  row stream-tcp vnio gbps "$(jq_ "$j" "round(d['iterations'][d['chosen']]['merged']['gbps'], 3)")"
  # Paced UDP: requested vs achieved, and the highest rate carried unpaced.
  j="$OUT/vnio-udp-max-$r.json"
  $VNIO stream -t 127.0.0.1:$AP -p udp --size 256 -d "${SECS}s" --warmup 0.5s --cpu $CLIENT_CPU --agent-cpu $SERVER_CPU -o "$j" >/dev/null 2>&1 || true
  max=$(jq_ "$j" "int(d['iterations'][d['chosen']]['merged']['ops_per_s'])")
  row pace-max vnio pps "$max"
  for label in 10000 100000 90%max; do
    rate=$label; [ "$label" = 90%max ] && rate=$(( max * 9 / 10 ))
    j="$OUT/vnio-pace-$label-$r.json"
    $VNIO stream -t 127.0.0.1:$AP -p udp --size 256 --rate $rate --burst 1 -d "${SECS}s" --warmup 0.5s --cpu $CLIENT_CPU --agent-cpu $SERVER_CPU -o "$j" >/dev/null 2>&1 || true
    row pace-$label vnio achieved_over_requested "$(jq_ "$j" "round(d['iterations'][d['chosen']]['merged']['achieved_rate']/$rate, 4)")"
  done
done
target/release/examples/record_cost > "$OUT/record_cost.txt"

python3 - "$rows" "$OUT" <<'PY' | tee "$OUT/summary.md"
import sys, statistics, collections, subprocess, os
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    t, tool, metric, v = line.rstrip("\n").split("\t")
    try: rows[(t, tool, metric)].append(float(v))
    except ValueError: pass
med = lambda k: statistics.median(rows[k]) if rows.get(k) else float("nan")
def env(cmd):
    try: return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except Exception: return "?"
print("# vnio instrument benchmark")
print(f"\nkernel {env('uname -r')}, clocksource {env('cat /sys/devices/system/clocksource/clocksource0/current_clocksource')}, "
      f"{os.cpu_count()} CPUs, load before/after: {env('cat /proc/loadavg')}; client CPU {os.environ.get('CLIENT_CPU','0')}, server CPU {os.environ.get('SERVER_CPU','1')}; "
      f"medians of {len(rows.get(('rr-udp','raw','p50_ns'), []))} interleaved rounds\n")
print("| round trip 256 B | raw loop p50 | sockperf p50 (x2) | vnio p50 | vnio/raw | vnio/sockperf | raw p99 | sockperf p99 | vnio p99 |")
print("|---|---|---|---|---|---|---|---|---|")
for p in ("udp", "tcp"):
    r, s, v = med((f"rr-{p}","raw","p50_ns")), med((f"rr-{p}","sockperf","p50_ns")), med((f"rr-{p}","vnio","p50_ns"))
    print(f"| {p} | {r/1e3:.1f} us | {s/1e3:.1f} us | {v/1e3:.1f} us | {v/r:.3f} | {v/s:.3f} | "
          f"{med((f'rr-{p}','raw','p99_ns'))/1e3:.1f} | {med((f'rr-{p}','sockperf','p99_ns'))/1e3:.1f} | {med((f'rr-{p}','vnio','p99_ns'))/1e3:.1f} |")
i, v = med(("stream-tcp","iperf3","gbps")), med(("stream-tcp","vnio","gbps"))
print(f"\n| TCP stream | iperf3 | vnio | vnio/iperf3 |\n|---|---|---|---|\n| Gbit/s | {i:.2f} | {v:.2f} | {v/i:.3f} |")
print("\n| paced UDP 256 B, pps | achieved / requested |\n|---|---|")
for k in sorted(k for k in rows if k[0].startswith("pace-") and k[0] != "pace-max"):
    print(f"| {k[0][5:]} | {med(k):.4f} |")
print(f"| highest unpaced rate | {med(('pace-max','vnio','pps')):.0f} pps |")
print("\n" + open(os.path.join(sys.argv[2], "record_cost.txt")).read())
PY
echo "raw data in $OUT"
