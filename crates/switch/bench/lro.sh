#!/bin/bash
# Software LRO: frames per MiB, throughput and CPU per MiB (switch worker and
# receiver) of a window-limited TCP stream of MTU segments toward a TSO
# receiver, with full and with offloaded checksums, and request-response
# round trips, LRO off vs on alternating in one run, medians, with the
# environment.
#   crates/switch/bench/lro.sh [ROUNDS, default 3] [SECS per case, default 2]
# Three threads: a sender, the switch worker (sleeps when idle) and a
# receiver that sleeps on its call eventfd like a guest's NAPI.
# VNIO_BENCH_CASE=on|off|on-full|off-partial|... runs some cases only;
# VNIO_BENCH_VERBOSE=1 prints the switch's counters after each case;
# VNIO_BENCH_COALESCE=POLICY sets the receiving port's coalescing (default adaptive).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
cargo build --release -q -p vnio-switch --example lro
. "$here/env.sh"
"${CARGO_TARGET_DIR:-target}/release/examples/lro" "${1:-3}" "${2:-2}"
