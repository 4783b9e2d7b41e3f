//! Counters and a latency histogram, rendered in Prometheus' text exposition format (0.0.4).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Upper bounds of the latency histogram's buckets, in seconds (`+Inf` is implied).
const BUCKETS: [f64; 11] = [0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

#[derive(Default)]
struct Histogram {
    /// Per bucket of [`BUCKETS`], not cumulative.
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Default)]
pub struct Metrics {
    /// `(endpoint, status)` to count.
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    latency: Mutex<BTreeMap<String, Histogram>>,
    prompt_tokens: AtomicU64,
    completion_tokens: AtomicU64,
    cancelled: AtomicU64,
}

/// Gauges read from the scheduler when the metrics are rendered.
pub struct Gauges {
    pub queued: usize,
    pub active: usize,
    pub workers: usize,
}

impl Metrics {
    pub fn request(&self, endpoint: &str, status: u16, seconds: f64) {
        if let Ok(mut m) = self.requests.lock() {
            *m.entry((endpoint.to_string(), status)).or_default() += 1;
        }
        if let Ok(mut m) = self.latency.lock() {
            let h = m.entry(endpoint.to_string()).or_default();
            if let Some(i) = BUCKETS.iter().position(|&b| seconds <= b) {
                h.counts[i] += 1;
            }
            h.count += 1;
            h.sum += seconds;
        }
    }

    pub fn generated(&self, prompt: usize, completion: usize) {
        self.prompt_tokens
            .fetch_add(prompt as u64, Ordering::Relaxed);
        self.completion_tokens
            .fetch_add(completion as u64, Ordering::Relaxed);
    }

    /// A generation stopped (or never started) because its client went away.
    pub fn cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::Relaxed);
    }

    pub fn cancelled_total(&self) -> u64 {
        self.cancelled.load(Ordering::Relaxed)
    }

    pub fn render(&self, gauges: Option<Gauges>) -> String {
        let mut out = String::new();
        out.push_str("# HELP aneforge_requests_total HTTP requests by endpoint and status.\n");
        out.push_str("# TYPE aneforge_requests_total counter\n");
        if let Ok(m) = self.requests.lock() {
            for ((endpoint, status), n) in m.iter() {
                let _ = writeln!(
                    out,
                    "aneforge_requests_total{{endpoint=\"{endpoint}\",status=\"{status}\"}} {n}"
                );
            }
        }
        out.push_str("# HELP aneforge_request_duration_seconds Time from request to the end of its response.\n");
        out.push_str("# TYPE aneforge_request_duration_seconds histogram\n");
        if let Ok(m) = self.latency.lock() {
            for (endpoint, h) in m.iter() {
                let mut cumulative = 0;
                for (bound, n) in BUCKETS.iter().zip(h.counts) {
                    cumulative += n;
                    let _ = writeln!(
                        out,
                        "aneforge_request_duration_seconds_bucket{{endpoint=\"{endpoint}\",le=\"{bound}\"}} {cumulative}"
                    );
                }
                let _ = writeln!(
                    out,
                    "aneforge_request_duration_seconds_bucket{{endpoint=\"{endpoint}\",le=\"+Inf\"}} {}\n\
                     aneforge_request_duration_seconds_sum{{endpoint=\"{endpoint}\"}} {}\n\
                     aneforge_request_duration_seconds_count{{endpoint=\"{endpoint}\"}} {}",
                    h.count, h.sum, h.count
                );
            }
        }
        let counters = [
            (
                "aneforge_prompt_tokens_total",
                "Prompt tokens of finished generations.",
                &self.prompt_tokens,
            ),
            (
                "aneforge_completion_tokens_total",
                "Tokens generated.",
                &self.completion_tokens,
            ),
            (
                "aneforge_generations_cancelled_total",
                "Generations stopped because the client disconnected.",
                &self.cancelled,
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Ordering::Relaxed)
            );
        }
        if let Some(g) = gauges {
            for (name, help, value) in [
                (
                    "aneforge_queue_depth",
                    "Generations waiting for a worker.",
                    g.queued,
                ),
                (
                    "aneforge_active_sequences",
                    "Generations running.",
                    g.active,
                ),
                (
                    "aneforge_generation_workers",
                    "Generation workers (one sequence each).",
                    g.workers,
                ),
            ] {
                let _ = writeln!(
                    out,
                    "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
                );
            }
        }
        out
    }
}
