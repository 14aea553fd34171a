//! What the service counts: requests by op and status, latency
//! histograms and rows by op (`http::observe` records every answer), in
//! the Prometheus text format; and one log line per request on stderr
//! (text, or JSON with `--log-json`). The gauges of the sets and the
//! engine are written beside them by `handlers::metrics`.
//!
//! Imports: nothing of the service.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::Method;
use serde_json::json;

/// The query rows a request carried (a response extension the handlers
/// set), for the metrics and the log.
#[derive(Debug, Clone, Copy)]
pub struct Served {
    /// Query (or uploaded key) rows.
    pub rows: usize,
}

/// Upper bounds of the latency histograms' buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// One op's latencies: counts per bucket (not cumulative), sum, count.
#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

#[derive(Default)]
struct Counters {
    requests: BTreeMap<(&'static str, u16), u64>,
    latency: BTreeMap<&'static str, Histogram>,
    rows: BTreeMap<&'static str, u64>,
}

/// The service's counters and its request log.
pub struct Metrics {
    counters: Mutex<Counters>,
    json_log: bool,
    quiet: bool,
}

/// A label value with `\`, `"` and newlines escaped.
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Writes one metric family's `# HELP` and `# TYPE` lines.
pub fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

impl Metrics {
    /// Counters at zero; the log as JSON lines if `json_log`, none if `quiet`.
    pub fn new(json_log: bool, quiet: bool) -> Metrics {
        Metrics {
            counters: Mutex::new(Counters::default()),
            json_log,
            quiet,
        }
    }

    /// Counts one answer.
    pub fn record(&self, op: &'static str, code: u16, seconds: f64, rows: usize) {
        let mut c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        *c.requests.entry((op, code)).or_default() += 1;
        *c.rows.entry(op).or_default() += rows as u64;
        let h = c.latency.entry(op).or_default();
        if let Some(i) = BUCKETS.iter().position(|&b| seconds <= b) {
            h.counts[i] += 1;
        }
        h.sum += seconds;
        h.count += 1;
    }

    /// Writes a request's log line on stderr.
    pub fn log(&self, line: &LogLine<'_>) {
        if self.quiet {
            return;
        }
        if self.json_log {
            let time = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            let v = json!({
                "time": time,
                "method": line.method.as_str(),
                "path": line.path,
                "op": line.op,
                "set": line.set,
                "status": line.status,
                "rows": line.rows,
                "ms": (line.seconds * 1e6).round() / 1e3,
            });
            eprintln!("{v}");
        } else {
            eprintln!(
                "{} {} {} {:.3} ms {} rows",
                line.method,
                line.path,
                line.status,
                line.seconds * 1e3,
                line.rows
            );
        }
    }

    /// Writes the counters' Prometheus text exposition to `out`.
    pub fn render(&self, out: &mut String) {
        let c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        family(
            out,
            "locus_requests_total",
            "counter",
            "Requests answered, by op and HTTP status code.",
        );
        for ((op, code), n) in &c.requests {
            let _ = writeln!(
                out,
                "locus_requests_total{{op=\"{op}\",code=\"{code}\"}} {n}"
            );
        }
        family(
            out,
            "locus_request_duration_seconds",
            "histogram",
            "Time from a request's headers to its answer, by op.",
        );
        for (op, h) in &c.latency {
            let mut cumulative = 0;
            for (b, n) in BUCKETS.iter().zip(h.counts) {
                cumulative += n;
                let _ = writeln!(
                    out,
                    "locus_request_duration_seconds_bucket{{op=\"{op}\",le=\"{b}\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                out,
                "locus_request_duration_seconds_bucket{{op=\"{op}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "locus_request_duration_seconds_sum{{op=\"{op}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "locus_request_duration_seconds_count{{op=\"{op}\"}} {}",
                h.count
            );
        }
        family(
            out,
            "locus_rows_total",
            "counter",
            "Query rows (and uploaded keys) of the requests answered, by op.",
        );
        for (op, n) in &c.rows {
            let _ = writeln!(out, "locus_rows_total{{op=\"{op}\"}} {n}");
        }
    }
}

/// What a request's log line says.
pub struct LogLine<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// Its path.
    pub path: &'a str,
    /// Its op label.
    pub op: &'a str,
    /// The set it names.
    pub set: Option<&'a str>,
    /// The answer's status.
    pub status: u16,
    /// Its query rows.
    pub rows: usize,
    /// Its time, headers to answer.
    pub seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_labels_escaped() {
        let m = Metrics::new(false, true);
        m.record("knn", 200, 0.0007, 3);
        m.record("knn", 200, 20.0, 1);
        m.record("knn", 429, 0.002, 0);
        let mut out = String::new();
        m.render(&mut out);
        assert!(
            out.contains("locus_requests_total{op=\"knn\",code=\"200\"} 2"),
            "{out}"
        );
        assert!(
            out.contains("locus_request_duration_seconds_bucket{op=\"knn\",le=\"0.001\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("locus_request_duration_seconds_bucket{op=\"knn\",le=\"10\"} 2"),
            "{out}"
        );
        assert!(
            out.contains("locus_request_duration_seconds_bucket{op=\"knn\",le=\"+Inf\"} 3"),
            "{out}"
        );
        assert!(out.contains("locus_rows_total{op=\"knn\"} 4"), "{out}");
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
