#!/bin/bash
# Software LRO with real guests: two Linux guests on the switch (TCG here,
# KVM where the host has it), a sending a file to b over TCP from a port
# without offloads, rounds alternating LRO off/on on b's port: frames per
# MiB delivered to b, both QEMUs' CPU time per MiB, md5 checked each round;
# medians and the on/off ratio per round (crates/vm/tests/lro_guest.rs).
#   crates/switch/bench/lro-guest.sh [MIB per round, default 32, at most 64] [ROUNDS, default 5]
# Needs root, QEMU and the guests' static vnio (scripts/setup --e2e). The
# switch runs in the test process, built with optimisations.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
cargo test --release -q --locked -p vnio-vm --test lro_guest --no-run
. "$here/env.sh"
VNIO_LRO_GUEST_MIB="${1:-32}" VNIO_LRO_GUEST_ROUNDS="${2:-5}" \
    cargo test --release -q --locked -p vnio-vm --test lro_guest -- --ignored --nocapture 2>&1 |
    grep -v '^running\|^test result\|^$'
