//! Pooling token states into one vector per text, as sentence-transformers' `Pooling` module does.
//!
//! Every mode except `max` is a weighted sum over positions: the weights are computed here on the
//! host (per row, from the token count and the prompt length) and the program applies them with
//! one batched matmul. `max` takes the maximum over the positions the pooling mask keeps.

use crate::sentence_transformers::PoolingMode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pooling {
    /// The first kept token (the `[CLS]` token unless the prompt is excluded).
    Cls,
    /// Mean over kept tokens.
    Mean,
    /// Elementwise maximum over kept tokens.
    Max,
    /// Sum over kept tokens divided by the square root of their count.
    MeanSqrtLen,
    /// Mean weighted by position (1, 2, 3, ...).
    WeightedMean,
    /// The last kept token.
    LastToken,
}

impl Pooling {
    pub const ALL: [Pooling; 6] = [
        Pooling::Cls,
        Pooling::Mean,
        Pooling::Max,
        Pooling::MeanSqrtLen,
        Pooling::WeightedMean,
        Pooling::LastToken,
    ];

    /// sentence-transformers' name of the mode.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Cls => "cls",
            Pooling::Mean => "mean",
            Pooling::Max => "max",
            Pooling::MeanSqrtLen => "mean_sqrt_len_tokens",
            Pooling::WeightedMean => "weightedmean",
            Pooling::LastToken => "lasttoken",
        }
    }

    pub fn parse(name: &str) -> Option<Pooling> {
        Pooling::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether the mode is a weighted sum over positions.
    pub(crate) fn is_weighted_sum(self) -> bool {
        self != Pooling::Max
    }
}

impl From<PoolingMode> for Pooling {
    fn from(mode: PoolingMode) -> Pooling {
        match mode {
            PoolingMode::Cls => Pooling::Cls,
            PoolingMode::Max => Pooling::Max,
            PoolingMode::Mean => Pooling::Mean,
            PoolingMode::MeanSqrtLen => Pooling::MeanSqrtLen,
            PoolingMode::WeightedMean => Pooling::WeightedMean,
            PoolingMode::LastToken => Pooling::LastToken,
        }
    }
}

/// Which positions of a right-padded row of `len` tokens pooling sees: sentence-transformers
/// drops the first `prompt_len` positions when the pooling module excludes the prompt.
pub(crate) fn kept_range(len: usize, prompt_len: usize) -> std::ops::Range<usize> {
    prompt_len.min(len)..len
}

/// Writes the weights of a weighted-sum `mode` for one row into `out` (one per position).
/// Accumulation is in f64; positions outside `kept` get 0.
pub(crate) fn row_weights(mode: Pooling, kept: std::ops::Range<usize>, out: &mut [f32]) {
    out.iter_mut().for_each(|w| *w = 0.0);
    if kept.is_empty() {
        return;
    }
    let count = kept.len() as f64;
    match mode {
        Pooling::Cls => out[kept.start] = 1.0,
        Pooling::LastToken => out[kept.end - 1] = 1.0,
        Pooling::Mean | Pooling::MeanSqrtLen => {
            let w = if mode == Pooling::Mean {
                1.0 / count
            } else {
                1.0 / count.sqrt()
            };
            out[kept].iter_mut().for_each(|x| *x = w as f32);
        }
        Pooling::WeightedMean => {
            let total: f64 = kept.clone().map(|j| (j + 1) as f64).sum();
            for j in kept {
                out[j] = ((j + 1) as f64 / total) as f32;
            }
        }
        Pooling::Max => {}
    }
}
