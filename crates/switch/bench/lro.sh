#!/bin/bash
# Software LRO: frames per MiB, throughput and CPU per MiB of a TCP stream
# of MTU segments toward a TSO receiver, and request-response round trips,
# LRO off vs on alternating in one run, with the environment.
#   crates/switch/bench/lro.sh [REPS, default 3] [SECS, default 2]
# Busy-polls two threads (the endpoints' and the switch worker).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
cargo build --release -q -p vnio-switch --example lro
. "$here/env.sh"
"${CARGO_TARGET_DIR:-target}/release/examples/lro" "${1:-3}" "${2:-2}"
