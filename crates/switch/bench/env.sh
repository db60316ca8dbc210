#!/bin/bash
# Prints the environment a switch benchmark ran in (sourced by the bench scripts):
# CPUs and the ones this process may use, clocksource, load, kernel, CPU model.
echo "# environment"
echo "kernel: $(uname -r); cpus online: $(nproc --all); allowed: $(taskset -pc $$ 2>/dev/null | sed 's/.*: //')"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
echo "load (1/5/15 min): $(cut -d' ' -f1-3 /proc/loadavg); steal since boot: $(awk '/^cpu /{print $9}' /proc/stat) ticks"
echo "governor: $(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor 2>/dev/null || echo n/a)"
