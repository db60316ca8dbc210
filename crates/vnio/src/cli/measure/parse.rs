//! The values `vnio agent`, `rr`, `ping` and `stream` (and other commands)
//! take: durations, CPU lists, message sizes, protocols. Separate because
//! they are shared by several commands and each is a small parser with
//! its own error text.

use std::time::Duration;

use vnio_measure::proto::Transport;

/// Parses "10s", "500ms", "2m", "100us" or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("not a duration: {s:?} (try 10s, 500ms, 100us)"))?;
    let secs = match unit {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" | "µs" => v / 1e6,
        "ns" => v / 1e9,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {s:?} (use ns, us, ms, s, m)"
            ))
        }
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("not a duration: {s:?}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A CPU list as one argument value (clap would take a bare Vec as many values).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// Parses a CPU list: "1", "0,2", "0-3".
pub fn parse_cpus(s: &str) -> Result<CpuList, String> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("not a CPU list: {s:?} (try 1 or 0,2 or 0-3)");
        if let Some((a, b)) = part.split_once('-') {
            let (a, b): (usize, usize) =
                (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
            if a > b {
                return Err(bad());
            }
            out.extend(a..=b);
        } else {
            out.push(part.parse().map_err(|_| bad())?);
        }
    }
    Ok(CpuList(out))
}

/// Parses "256" (both ways) or "64,1024" (request,response).
pub fn parse_sizes(s: &str) -> Result<(u32, u32), String> {
    let bad = || format!("not a size: {s:?} (try 256 or 64,1024)");
    match s.split_once(',') {
        Some((a, b)) => Ok((
            a.trim().parse().map_err(|_| bad())?,
            b.trim().parse().map_err(|_| bad())?,
        )),
        None => {
            let v = s.trim().parse().map_err(|_| bad())?;
            Ok((v, v))
        }
    }
}

pub(super) fn parse_transport(s: &str) -> Result<Transport, String> {
    match s {
        "tcp" => Ok(Transport::Tcp),
        "udp" => Ok(Transport::Udp),
        _ => Err(format!("unknown protocol {s:?}: tcp or udp")),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{parse_cpus, parse_duration, parse_sizes, CpuList};

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("1ms").unwrap(), Duration::from_millis(1));
        assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert!(parse_duration("fast").is_err());
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert!(parse_duration("10d").is_err());
    }

    #[test]
    fn cpus_and_sizes() {
        assert_eq!(parse_cpus("0-2,5").unwrap(), CpuList(vec![0, 1, 2, 5]));
        assert!(parse_cpus("3-1").is_err());
        assert_eq!(parse_sizes("256").unwrap(), (256, 256));
        assert_eq!(parse_sizes("64,1024").unwrap(), (64, 1024));
        assert!(parse_sizes("big").is_err());
    }
}
