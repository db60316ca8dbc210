#!/bin/bash
# Offloads: the effect (GSO passed between ports that negotiated TSO) and
# the price (the switch segmenting and checksumming for a port that did not),
# side by side in one run, with the environment.
#   crates/switch/bench/offload.sh [SECONDS per case, default 2] [REPS, default 3]
# Busy-polls two threads (endpoints and the switch worker).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
cargo build --release -q -p vnio-switch --example offload
. "$here/env.sh"
bin=${CARGO_TARGET_DIR:-target}/release/examples/offload
echo "# offload: ${1:-2} s per case, ${2:-3} repetitions alternating, medians"
"$bin" "${1:-2}" "${2:-3}"
