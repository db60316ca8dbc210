#!/usr/bin/env bash
# Bounded fuzzing for CI: builds every cargo-fuzz target of the switch and
# runs each for FUZZ_SECS seconds (default 60). Fails on the first crash,
# leak or timeout and prints the reproducer's path and the command that
# replays it. Installs what it needs: a nightly toolchain through rustup
# (libFuzzer's instrumentation needs -Z flags) and cargo-fuzz from crates.io.
#
#   crates/switch/fuzz/ci.sh                  # every target, 60 s each
#   FUZZ_SECS=10 crates/switch/fuzz/ci.sh wire_frame
set -euo pipefail
cd "$(dirname "$0")"
secs=${FUZZ_SECS:-60}
export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TERM_COLOR=never
# Kept apart from the workspace's target directory: everything here is
# built with sanitizer flags that would invalidate the normal build's cache.
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$PWD/target}

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "fuzz: installing the nightly toolchain"
    rustup toolchain install nightly --profile minimal >/dev/null
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install cargo-fuzz --locked -q
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
start=$SECONDS
echo "fuzz: building ${targets[*]} ($(rustup run nightly rustc --version))"
cargo +nightly fuzz build -O
echo "fuzz: built in $((SECONDS - start)) s"

for t in "${targets[@]}"; do
    mkdir -p "corpus/$t" "artifacts/$t"
    log=$(mktemp)
    t0=$SECONDS
    # -timeout: one input slower than 10 s is a hang; -rss_limit_mb: a leak
    # or runaway allocation fails instead of taking the machine down.
    if cargo +nightly fuzz run -O "$t" "corpus/$t" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="artifacts/$t/" >"$log" 2>&1; then
        runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
        cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
        echo "fuzz: $t: no crash in $((SECONDS - t0)) s ($runs inputs, $cov)"
        rm -f "$log"
    else
        tail -n 60 "$log"
        crash=$(ls -t "artifacts/$t"/* 2>/dev/null | head -1 || true)
        echo "fuzz: $t FAILED; reproducer: ${crash:-none written (see the log above)}"
        [ -n "$crash" ] && echo "fuzz: replay with: (cd $PWD && cargo +nightly fuzz run -O $t $crash)"
        rm -f "$log"
        exit 1
    fi
done
echo "fuzz: ${#targets[@]} targets, no crash, $((SECONDS - start)) s in all"
