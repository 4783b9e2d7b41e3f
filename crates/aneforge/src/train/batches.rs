//! Deterministic batches: each batch's random generator is a function of `(seed, stream, index)`,
//! so a resumed run draws exactly the batches the uninterrupted run would have, and the data
//! position to checkpoint is the step count.

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// A generator for batch `index` of stream `stream` (train, validation, ...) under `seed`.
pub fn batch_rng(seed: u64, stream: u64, index: u64) -> StdRng {
    // SplitMix64 finaliser over the three words: nearby (seed, index) give unrelated streams.
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(stream.wrapping_mul(0xD1B5_4A32_D192_ED03))
        .wrapping_add(index.wrapping_mul(0x8CB9_2BA7_2F3D_8DD7));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    StdRng::seed_from_u64(z ^ (z >> 31))
}

/// `batch` random windows of `context` ids from `ids` and the same windows shifted by one (the
/// next-token targets), each `[batch, context]` row-major. `ids` must be longer than `context`.
pub fn windows(
    ids: &[i32],
    batch: usize,
    context: usize,
    rng: &mut StdRng,
) -> (Vec<i32>, Vec<i32>) {
    let mut x = Vec::with_capacity(batch * context);
    let mut y = Vec::with_capacity(batch * context);
    for _ in 0..batch {
        let start = rng.random_range(0..ids.len() - context);
        x.extend_from_slice(&ids[start..start + context]);
        y.extend_from_slice(&ids[start + 1..start + context + 1]);
    }
    (x, y)
}
