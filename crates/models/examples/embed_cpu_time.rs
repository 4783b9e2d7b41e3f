//! Sentence-embedding passes with their on-CPU time, for comparing systems on a shared machine:
//! `cargo run --release -p aneforge-models --example embed_cpu_time -- MODEL FILE [BATCH] [RUNS]`
//! prints one JSON line like `aneforge bench embed --json` plus `median_cpu_s` (user + system
//! time of the whole process per pass, from /proc/self/stat). tools/bench/embed.sh runs it.

use std::time::Instant;

use aneforge_models::encoders::{EncoderOptions, SentenceEncoder};

/// User + system CPU seconds of this process so far (Linux).
fn cpu_seconds() -> Result<f64, String> {
    let stat = std::fs::read_to_string("/proc/self/stat").map_err(|e| e.to_string())?;
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or("/proc/self/stat: no command field")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64, String> {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .ok_or_else(|| format!("/proc/self/stat: field {} is not a number", i + 3))
    };
    // utime and stime are fields 14 and 15 (1-based), in clock ticks of 1/100 s on Linux
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(model), Some(file)) = (args.first(), args.get(1)) else {
        return Err("usage: embed_cpu_time MODEL FILE [BATCH] [RUNS]".into());
    };
    let batch: usize = args.get(2).map_or(Ok(32), |a| a.parse())?;
    let runs: usize = args.get(3).map_or(Ok(5), |a| a.parse())?;
    let text = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    let sentences: Vec<&str> = text.lines().collect();
    let options = EncoderOptions {
        batch_size: batch,
        ..EncoderOptions::default()
    };
    let start = Instant::now();
    let encoder = SentenceEncoder::load(model, options)?;
    let load_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let first = encoder.encode(&sentences)?;
    let first_s = start.elapsed().as_secs_f64();
    let mut walls = Vec::new();
    let mut cpus = Vec::new();
    for _ in 0..runs.max(1) {
        let (wall, cpu) = (Instant::now(), cpu_seconds()?);
        let again = encoder.encode(&sentences)?;
        walls.push(wall.elapsed().as_secs_f64());
        cpus.push(cpu_seconds()? - cpu);
        if again.data != first.data {
            return Err("two passes gave different embeddings".into());
        }
    }
    walls.sort_by(f64::total_cmp);
    cpus.sort_by(f64::total_cmp);
    let n = sentences.len() as f64;
    println!(
        "{{\"system\": \"aneforge\", \"sentences\": {}, \"batch_size\": {batch}, \"load_s\": {load_s}, \
         \"first_pass_s\": {first_s}, \"median_s\": {}, \"best_s\": {}, \"sentences_per_s\": {}, \
         \"best_sentences_per_s\": {}, \"median_cpu_s\": {}, \"programs\": {}, \"peak_rss_mib\": {}}}",
        sentences.len(),
        walls[walls.len() / 2],
        walls[0],
        n / walls[walls.len() / 2],
        n / walls[0],
        cpus[cpus.len() / 2],
        encoder.cached_programs(),
        peak_rss_mib()
    );
    Ok(())
}
