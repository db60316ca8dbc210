//! vnio's percentile confidence intervals against an independent
//! implementation: scipy's binomial distribution over the same histograms,
//! decoded by Python's HdrHistogram (`interval_scipy.py`). Ranks must be
//! equal and bounds within one bucket, from 20 samples to 10^7.
//!
//! Skips (prints "skip: ...") when python3 lacks scipy or hdrh;
//! `scripts/setup --e2e` installs both.

use std::process::Command;

use rand::{Rng, SeedableRng};
use vnio_measure::stats::Latency;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interval_scipy.py");

fn python_ready() -> bool {
    Command::new("python3")
        .args(["-c", "import scipy.stats, hdrh.histogram"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A latency-like sample: exponential around `mean_us` over a floor, with
/// a rare slow tail.
fn sample(rng: &mut impl Rng, mean_us: f64) -> u64 {
    let u: f64 = rng.gen_range(f64::EPSILON..1.0);
    let mut ns = 8_000.0 + -u.ln() * mean_us * 1e3;
    if rng.gen_bool(0.001) {
        ns *= rng.gen_range(5.0..50.0);
    }
    ns as u64
}

fn case(name: &str, lat: &Latency) -> serde_json::Value {
    let percentiles = [0.5, 0.9, 0.99, 0.999, 0.9999];
    let intervals: Vec<serde_json::Value> = percentiles
        .iter()
        .flat_map(|&p| [0.95, 0.99].map(|c| (p, c)))
        .map(|(p, c)| {
            let mut v = serde_json::to_value(lat.interval(p, c)).unwrap();
            v["p"] = p.into();
            v
        })
        .collect();
    serde_json::json!({
        "name": name,
        "count": lat.count(),
        "hdr_v2_deflate_b64": lat.encode().hdr_v2_deflate_b64,
        "intervals": intervals,
    })
}

#[test]
fn intervals_agree_with_scipy() {
    if !python_ready() {
        println!("skip: python3 with scipy and hdrh not found (scripts/setup --e2e installs them)");
        return;
    }
    let started = std::time::Instant::now();
    let mut rng = rand::rngs::StdRng::seed_from_u64(36);
    let mut cases = Vec::new();
    for (i, n) in [20u64, 100, 1_000, 10_000, 50_000, 300_000]
        .into_iter()
        .enumerate()
    {
        let mut lat = Latency::new();
        for _ in 0..n {
            lat.record(sample(&mut rng, 5.0 + 20.0 * i as f64));
        }
        cases.push(case(&format!("exponential-{n}"), &lat));
    }
    // 10^7 samples, recorded as counts per value: the large-n regime
    // where a continued fraction for the incomplete beta gives up.
    let mut big = Latency::new();
    for _ in 0..100_000 {
        big.record_n(sample(&mut rng, 30.0), 100);
    }
    assert_eq!(big.count(), 10_000_000);
    cases.push(case("ten-million", &big));

    let dir = std::env::temp_dir().join(format!("vnio-interval-scipy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cases.json");
    std::fs::write(&file, serde_json::to_vec(&cases).unwrap()).unwrap();
    println!("vnio's side: {:?}", started.elapsed());
    let out = Command::new("python3")
        .arg(SCRIPT)
        .arg(&file)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every interval was checked, and some of them were "too few samples"
    // (p99.99 of 20 to 10,000) while the rest had bounds.
    assert!(stdout.contains("checked 70 intervals"), "{stdout}");
    assert_eq!(
        stdout.matches(" agree").count(),
        70 - too_few(&cases),
        "{stdout}"
    );
    assert!(too_few(&cases) >= 8, "{stdout}");
}

fn too_few(cases: &[serde_json::Value]) -> usize {
    cases
        .iter()
        .flat_map(|c| c["intervals"].as_array().unwrap())
        .filter(|i| i["too_few"].is_string())
        .count()
}
