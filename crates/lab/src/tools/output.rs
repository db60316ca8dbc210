//! What sockperf and iperf3 print, read into the instrument's measurement.

use vnio_measure::result::Measured;
use vnio_measure::stats::Summary;

/// sockperf ping-pong's summary (`--full-rtt`: round trips, in µs) as a
/// measurement of its valid duration.
pub fn parse_sockperf(text: &str) -> Option<Measured> {
    // Its terminal colours, if any, go first.
    let clean: String = strip_ansi(text);
    let num_after = |line: &str, key: &str| -> Option<f64> {
        let rest = &line[line.find(key)? + key.len()..];
        let rest = rest.trim_start_matches([' ', '=']);
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    };
    let ns = |us: f64| (us * 1000.0).round() as u64;
    let mut s = Summary::default();
    let (mut seconds, mut count) = (None, None);
    for line in clean.lines() {
        if line.contains("[Valid Duration]") {
            seconds = num_after(line, "RunTime=");
            count = num_after(line, "ReceivedMessages=").map(|v| v as u64);
        } else if let Some(avg) =
            num_after(line, "avg-rtt=").or_else(|| num_after(line, "avg-latency="))
        {
            s.mean_ns = avg * 1000.0;
            s.stddev_ns = num_after(line, "std-dev=").unwrap_or(0.0) * 1000.0;
        } else if line.contains("<MAX> observation") {
            s.max_ns = ns(num_after(line, "observation")?);
        } else if line.contains("<MIN> observation") {
            s.min_ns = ns(num_after(line, "observation")?);
        } else if let Some((p, v)) = percentile_line(line) {
            let v = ns(v);
            match p {
                p if (p - 50.0).abs() < 1e-6 => s.p50_ns = v,
                p if (p - 90.0).abs() < 1e-6 => s.p90_ns = v,
                p if (p - 99.0).abs() < 1e-6 => s.p99_ns = v,
                p if (p - 99.9).abs() < 1e-6 => s.p999_ns = v,
                p if (p - 99.99).abs() < 1e-6 => s.p9999_ns = v,
                _ => {}
            }
        }
    }
    let (seconds, count) = (seconds?, count?);
    if count == 0 || s.p50_ns == 0 {
        return None;
    }
    s.count = count;
    Some(Measured {
        target: "all".into(),
        ops: count,
        sent: count,
        ops_per_s: count as f64 / seconds.max(1e-9),
        latency: Some(s),
        ..Default::default()
    })
}

/// iperf3's JSON (`-J`): what the server received over the measured
/// seconds, in writes of `size` bytes.
pub fn parse_iperf3(text: &str, size: u32) -> Option<Measured> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let r = &v["end"]["sum_received"];
    let bytes = r["bytes"].as_u64()?;
    let seconds = r["seconds"].as_f64()?;
    let ops = bytes / u64::from(size.max(1));
    Some(Measured {
        target: "all".into(),
        ops,
        sent: ops,
        bytes,
        ops_per_s: ops as f64 / seconds.max(1e-9),
        gbps: r["bits_per_second"].as_f64()? / 1e9,
        ..Default::default()
    })
}

/// "---> percentile 99.990 =  299.566" as (99.99, 299.566).
fn percentile_line(line: &str) -> Option<(f64, f64)> {
    let rest = &line[line.find("---> percentile ")? + "---> percentile ".len()..];
    let (p, v) = rest.split_once('=')?;
    Some((p.trim().parse().ok()?, v.trim().parse().ok()?))
}

pub(super) fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ ... final byte in @..~
            for d in chars.by_ref() {
                if ('@'..='~').contains(&d) && d != '[' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOCKPERF: &str =
        "sockperf: Total 29150 observations; each percentile contains 291.50 observations
sockperf: [Valid Duration] RunTime=0.550 sec; SentMessages=29150; ReceivedMessages=29150
sockperf: \u{1b}[2;35m====> avg-rtt=18.822 (std-dev=11.462)\u{1b}[0m
sockperf: ---> <MAX> observation =  976.424
sockperf: ---> percentile 99.999 =  976.424
sockperf: ---> percentile 99.990 =  299.566
sockperf: ---> percentile 99.900 =  134.136
sockperf: ---> percentile 99.000 =   68.086
sockperf: ---> percentile 90.000 =   21.940
sockperf: ---> percentile 75.000 =   20.166
sockperf: ---> percentile 50.000 =   17.992
sockperf: ---> percentile 25.000 =   14.326
sockperf: ---> <MIN> observation =   13.304
";

    #[test]
    fn sockperf_summary_becomes_a_measurement() {
        let m = parse_sockperf(SOCKPERF).unwrap();
        let l = m.latency.unwrap();
        assert_eq!((m.ops, l.count), (29150, 29150));
        assert!((m.ops_per_s - 29150.0 / 0.55).abs() < 1.0);
        assert_eq!(
            (l.p50_ns, l.p90_ns, l.p99_ns, l.p999_ns, l.p9999_ns),
            (17_992, 21_940, 68_086, 134_136, 299_566)
        );
        assert_eq!((l.min_ns, l.max_ns), (13_304, 976_424));
        assert!((l.mean_ns - 18_822.0).abs() < 1e-6);
        assert!(parse_sockperf("sockperf: error").is_none());
    }

    #[test]
    fn iperf3_json_becomes_a_measurement() {
        let j = r#"{"end":{"sum_received":{"bytes":1310720000,"seconds":2.0,"bits_per_second":5.24288e9}}}"#;
        let m = parse_iperf3(j, 131072).unwrap();
        assert_eq!((m.bytes, m.ops), (1_310_720_000, 10_000));
        assert!((m.gbps - 5.24288).abs() < 1e-9);
        assert!((m.ops_per_s - 5000.0).abs() < 1e-9);
        assert!(parse_iperf3("{}", 1).is_none());
    }
}
