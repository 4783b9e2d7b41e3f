//! Energy of a query on macOS, read from `powermetrics` (which needs root): the combined CPU,
//! GPU and ANE power sampled every 100 ms while the query runs, integrated over its duration.
//! Elsewhere, and where powermetrics cannot run, there is no reading and the reason is given.

use std::time::Duration;

/// A reading: joules over the measured interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Energy {
    pub joules: f64,
    pub seconds: f64,
    pub samples: usize,
}

#[cfg(target_os = "macos")]
mod imp {
    use super::*;
    use std::io::Read;
    use std::process::{Child, Command, Stdio};
    use std::time::Instant;

    pub struct Meter {
        child: Child,
        started: Instant,
    }

    impl Meter {
        pub fn start() -> Result<Meter, String> {
            let child = Command::new("powermetrics")
                .args(["--samplers", "cpu_power,gpu_power,ane_power", "-i"])
                .arg(INTERVAL.as_millis().to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot run powermetrics: {e}"))?;
            Ok(Meter {
                child,
                started: Instant::now(),
            })
        }

        /// Stops sampling; the mean of the "Combined Power" samples (mW) times the elapsed time.
        pub fn stop(mut self) -> Result<Energy, String> {
            let seconds = self.started.elapsed().as_secs_f64();
            let _ = self.child.kill();
            let mut text = String::new();
            if let Some(mut out) = self.child.stdout.take() {
                let _ = out.read_to_string(&mut text);
            }
            let _ = self.child.wait();
            let samples: Vec<f64> = text
                .lines()
                .filter(|l| l.starts_with("Combined Power"))
                .filter_map(|l| l.rsplit(':').next())
                .filter_map(|v| v.trim().trim_end_matches("mW").trim().parse().ok())
                .collect();
            if samples.is_empty() {
                return Err("powermetrics gave no samples (it needs root: run with sudo)".into());
            }
            let mean_mw = samples.iter().sum::<f64>() / samples.len() as f64;
            Ok(Energy {
                joules: mean_mw / 1e3 * seconds,
                seconds,
                samples: samples.len(),
            })
        }
    }
}

#[cfg(not(target_os = "macos"))]
mod imp {
    use super::*;

    pub struct Meter;

    impl Meter {
        pub fn start() -> Result<Meter, String> {
            Err("energy readings use macOS powermetrics; not available on this OS".into())
        }

        pub fn stop(self) -> Result<Energy, String> {
            Err("energy readings use macOS powermetrics".into())
        }
    }
}

pub use imp::Meter;

/// The sampling interval powermetrics is asked for.
pub const INTERVAL: Duration = Duration::from_millis(100);
