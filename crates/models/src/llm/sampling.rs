//! Choosing the next token from logits: greedy, or sampling with temperature, top-k, top-p
//! (nucleus), min-p and a repetition penalty, in transformers' order (penalty, temperature, top-k,
//! top-p, min-p). A seed makes sampling reproducible.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

#[derive(Clone, Debug, PartialEq)]
pub struct SamplingOptions {
    /// 0 picks the most likely token (greedy); otherwise logits are divided by it.
    pub temperature: f32,
    /// Keep the `k` most likely tokens (0: off).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `p` (1: off).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` × the most likely one (0: off).
    pub min_p: f32,
    /// Divide positive (multiply negative) logits of tokens already in the sequence (1: off).
    pub repetition_penalty: f32,
    pub seed: u64,
}

impl SamplingOptions {
    pub fn greedy() -> SamplingOptions {
        SamplingOptions {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            seed: 0,
        }
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    /// Rejects values outside their ranges.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Err(format!(
                "temperature must be a finite number >= 0, found {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p must be in (0, 1], found {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("min_p must be in [0, 1], found {}", self.min_p));
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return Err(format!(
                "repetition_penalty must be a finite number > 0, found {}",
                self.repetition_penalty
            ));
        }
        Ok(())
    }
}

impl Default for SamplingOptions {
    /// llama.cpp's defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05.
    fn default() -> Self {
        SamplingOptions {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repetition_penalty: 1.0,
            seed: 0,
        }
    }
}

pub struct Sampler {
    opts: SamplingOptions,
    rng: StdRng,
    order: Vec<u32>,
    probs: Vec<f64>,
}

/// The index of the first largest value (NaN never wins).
/// The largest value minus the second largest (how far the greedy pick leads); infinite for a
/// single value.
pub fn top2_margin(v: &[f32]) -> f32 {
    let top = argmax(v) as usize;
    let second = v
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != top)
        .fold(f32::NEG_INFINITY, |m, (_, &x)| m.max(x));
    v.get(top).map_or(0.0, |t| t - second)
}

pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &x) in v.iter().enumerate() {
        if x > best_v {
            best_v = x;
            best = i;
        }
    }
    best as u32
}

/// transformers' RepetitionPenaltyLogitsProcessor: each distinct token of `history` once.
pub fn apply_repetition_penalty(logits: &mut [f32], history: &[u32], penalty: f32) {
    if penalty == 1.0 {
        return;
    }
    let mut seen = std::collections::HashSet::new();
    for &t in history {
        if !seen.insert(t) {
            continue;
        }
        if let Some(l) = logits.get_mut(t as usize) {
            *l = if *l < 0.0 { *l * penalty } else { *l / penalty };
        }
    }
}

impl Sampler {
    pub fn new(opts: SamplingOptions) -> Sampler {
        Sampler {
            rng: StdRng::seed_from_u64(opts.seed),
            opts,
            order: Vec::new(),
            probs: Vec::new(),
        }
    }

    pub fn options(&self) -> &SamplingOptions {
        &self.opts
    }

    /// The probabilities sampling would draw from (after every filter), as (token, p) pairs in
    /// decreasing probability; empty for greedy.
    pub fn distribution(&mut self, logits: &[f32], history: &[u32]) -> Vec<(u32, f64)> {
        let mut l = logits.to_vec();
        apply_repetition_penalty(&mut l, history, self.opts.repetition_penalty);
        if self.opts.is_greedy() {
            return vec![(argmax(&l), 1.0)];
        }
        self.filtered(&l);
        self.order
            .iter()
            .copied()
            .zip(self.probs.iter().copied())
            .collect()
    }

    /// Fills `order` (candidate tokens, most likely first) and `probs` (normalised).
    fn filtered(&mut self, l: &[f32]) {
        let o = &self.opts;
        let t = f64::from(o.temperature);
        self.order.clear();
        self.order
            .extend((0..l.len() as u32).filter(|&i| !l[i as usize].is_nan()));
        let key = |i: &u32| l[*i as usize];
        let desc = |a: &u32, b: &u32| key(b).total_cmp(&key(a)).then(a.cmp(b));
        if o.top_k > 0 && o.top_k < self.order.len() {
            self.order.select_nth_unstable_by(o.top_k - 1, desc);
            self.order.truncate(o.top_k);
        }
        if o.top_p < 1.0 || o.top_k > 0 {
            self.order.sort_unstable_by(desc);
        } else if let Some(best) =
            (0..self.order.len()).max_by(|&a, &b| desc(&self.order[b], &self.order[a]))
        {
            self.order.swap(0, best);
        }
        let max = self
            .order
            .first()
            .map_or(0.0, |&i| f64::from(l[i as usize]))
            / t;
        self.probs.clear();
        self.probs.extend(
            self.order
                .iter()
                .map(|&i| (f64::from(l[i as usize]) / t - max).exp()),
        );
        let total: f64 = self.probs.iter().sum();
        self.probs.iter_mut().for_each(|p| *p /= total);
        if o.top_p < 1.0 {
            // keep tokens until the cumulative probability reaches top_p (at least one)
            let mut acc = 0.0;
            let mut keep = self.probs.len();
            for (i, p) in self.probs.iter().enumerate() {
                acc += p;
                if acc >= f64::from(o.top_p) {
                    keep = i + 1;
                    break;
                }
            }
            self.order.truncate(keep);
            self.probs.truncate(keep);
        }
        if o.min_p > 0.0 {
            let floor = self.probs.first().copied().unwrap_or(0.0) * f64::from(o.min_p);
            let keep = self
                .probs
                .iter()
                .take_while(|&&p| p >= floor)
                .count()
                .max(1);
            self.order.truncate(keep);
            self.probs.truncate(keep);
        }
        let total: f64 = self.probs.iter().sum();
        self.probs.iter_mut().for_each(|p| *p /= total);
    }

    /// The next token. `logits` is modified (penalty applied); `history` is the sequence so far.
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> u32 {
        apply_repetition_penalty(logits, history, self.opts.repetition_penalty);
        if self.opts.is_greedy() {
            return argmax(logits);
        }
        self.filtered(logits);
        let u: f64 = self.rng.random::<f64>();
        let mut acc = 0.0;
        for (i, &p) in self.probs.iter().enumerate() {
            acc += p;
            if u < acc {
                return self.order[i];
            }
        }
        self.order.last().copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn penalty_as_transformers() {
        let mut l = vec![2.0, -2.0, 1.0];
        apply_repetition_penalty(&mut l, &[0, 1, 0], 2.0);
        assert_eq!(l, vec![1.0, -4.0, 1.0]);
    }

    #[test]
    fn argmax_takes_the_first_maximum() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, f32::NAN]), 1);
    }
}
