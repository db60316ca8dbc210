#!/bin/bash
# Interrupt coalescing: round trips at 1 K/s under off, adaptive and
# static:32:50, and calls and CPU per frame of a paced stream under off vs
# adaptive, alternating in one run, with the environment.
#   crates/switch/bench/coalesce.sh [REPS, default 3] [STREAM_KPPS, default 200]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
cargo build --release -q -p vnio-switch --example coalesce
. "$here/env.sh"
"${CARGO_TARGET_DIR:-target}/release/examples/coalesce" "${1:-3}" "${2:-200}"
