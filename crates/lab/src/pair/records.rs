//! The records the DPDK endpoint program prints (`crates/lab/dpdk/pair.c`
//! describes them): one per line, a word and integers. Anything else on
//! its output is an error: a program that prints what the lab does not
//! understand has not measured what the lab thinks.

use vnio_measure::result::IntervalPoint;

/// One line of the program's output.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Record {
    /// Both ports are up.
    Ready,
    /// An iteration (its index) begins its warm-up.
    Warmup(usize),
    /// Iteration `iteration`'s measured window began at `mono_ns`
    /// (CLOCK_MONOTONIC).
    Window { iteration: usize, mono_ns: u64 },
    /// One second of a window.
    Second {
        iteration: usize,
        point: IntervalPoint,
    },
    /// `count` round trips of `ns` nanoseconds.
    Rtt {
        iteration: usize,
        ns: u64,
        count: u64,
    },
    /// The end of a window.
    Total { iteration: usize, total: Total },
    /// The program gave up, saying why.
    Error(String),
}

/// What a window counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Total {
    /// The window's length.
    pub ns: u64,
    /// Frames sent (rr: round trips begun).
    pub sent: u64,
    /// Frames received (rr: round trips completed).
    pub received: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// CPU time of the program's lcore over the window.
    pub user_ns: u64,
    pub sys_ns: u64,
}

/// Parse one line.
pub(super) fn parse(line: &str) -> Result<Record, String> {
    let mut words = line.split_whitespace();
    let word = words.next().unwrap_or("");
    if word == "error" {
        return Ok(Record::Error(line["error".len()..].trim().to_owned()));
    }
    let numbers: Vec<u64> = words
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|_| format!("unexpected output {line:?}"))?;
    let iteration = |n: &[u64]| n[0] as usize;
    let record = match (word, numbers.as_slice()) {
        ("ready", []) => Record::Ready,
        ("warmup", [i]) => Record::Warmup(*i as usize),
        ("window", [_, mono_ns]) => Record::Window {
            iteration: iteration(&numbers),
            mono_ns: *mono_ns,
        },
        ("second", [_, t_s, ops, mean, p50, p99, max]) => Record::Second {
            iteration: iteration(&numbers),
            point: IntervalPoint {
                t_s: *t_s,
                ops: *ops,
                mean_ns: *mean as f64,
                p50_ns: *p50,
                p99_ns: *p99,
                max_ns: *max,
            },
        },
        ("rtt", [_, ns, count]) => Record::Rtt {
            iteration: iteration(&numbers),
            ns: *ns,
            count: *count,
        },
        ("total", [_, ns, sent, received, bytes, user_ns, sys_ns]) => Record::Total {
            iteration: iteration(&numbers),
            total: Total {
                ns: *ns,
                sent: *sent,
                received: *received,
                bytes: *bytes,
                user_ns: *user_ns,
                sys_ns: *sys_ns,
            },
        },
        _ => return Err(format!("unexpected output {line:?}")),
    };
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_record_reads_back() {
        assert_eq!(parse("ready"), Ok(Record::Ready));
        assert_eq!(parse("warmup 2"), Ok(Record::Warmup(2)));
        assert_eq!(
            parse("window 1 80304809975200"),
            Ok(Record::Window {
                iteration: 1,
                mono_ns: 80304809975200
            })
        );
        let Ok(Record::Second { iteration, point }) =
            parse("second 0 3 125039 6229 1789 7900 44012")
        else {
            panic!()
        };
        assert_eq!(
            (iteration, point.t_s, point.ops, point.p99_ns),
            (0, 3, 125039, 7900)
        );
        assert_eq!(
            parse("rtt 0 889 4"),
            Ok(Record::Rtt {
                iteration: 0,
                ns: 889,
                count: 4
            })
        );
        let Ok(Record::Total { total, .. }) =
            parse("total 0 2000025809 10 9 378 1989940000 257000")
        else {
            panic!()
        };
        assert_eq!((total.sent, total.received, total.sys_ns), (10, 9, 257000));
        assert_eq!(
            parse("error the switch did not bring both ports up"),
            Ok(Record::Error(
                "the switch did not bring both ports up".into()
            ))
        );
    }

    #[test]
    fn garbage_is_an_error_that_quotes_it() {
        for line in [
            "EAL: Detected CPU lcores: 2",
            "total 0 1 2",
            "second 0 x 1 2 3 4 5",
            "",
        ] {
            let e = parse(line).unwrap_err();
            assert!(e.contains(&format!("{line:?}")), "{e}");
        }
    }
}
