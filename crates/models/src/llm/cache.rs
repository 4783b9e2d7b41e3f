//! Where a layer's KV cache keeps each position, and what a step's additive mask lets a query
//! see.
//!
//! A layer that attends over every earlier position keeps position `p` in row `p` of a cache of
//! the context bucket's `S` rows. A sliding-window layer (Gemma 2/3's local layers, every layer
//! of Mistral or Phi-3) sees only the last `W` positions, so once the bucket is larger than it
//! needs, its cache is a ring: position `p` lives in row `p mod slots`, where `slots` is `W + T −
//! 1` rounded up to a multiple of `T` (`T` the largest step of the runner). That is enough for
//! every query of a step of `T` tokens to find the `W − 1` positions before it, and a prefill fed
//! in steps of `T` from position 0 never crosses the ring's end. A step's real tokens never cross
//! it (the runner splits them there); the rows after `slots` (`T − 1` of them) only ever receive
//! the padding rows of a step whose real tokens end at the ring's end, and are never visible.
//!
//! A padding row written inside the ring overwrites a position older than any query of the
//! step (or later) can see, because `slots ≥ W + T − 1`.

/// How a cache stores keys and values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KvStorage {
    /// f32 rows: the exact computation.
    #[default]
    F32,
    /// fp16 rows (llama.cpp's default cache type): half the memory.
    F16,
    /// llama.cpp's `q8_0`: blocks of [`Q8_BLOCK`] values along the head dimension as int8 with
    /// one fp16 scale (`d = max|x| / 127`, `q = round(x / d)`), 8.5 bits a value.
    Q8_0,
}

/// Values per `q8_0` block.
pub const Q8_BLOCK: usize = 32;

impl KvStorage {
    /// The names the command line and the docs use (llama.cpp's `--cache-type-k` values).
    pub fn name(self) -> &'static str {
        match self {
            KvStorage::F32 => "f32",
            KvStorage::F16 => "f16",
            KvStorage::Q8_0 => "q8_0",
        }
    }

    pub fn parse(name: &str) -> Option<KvStorage> {
        [KvStorage::F32, KvStorage::F16, KvStorage::Q8_0]
            .into_iter()
            .find(|k| k.name() == name)
    }

    /// Bytes a cache of `values` keys or values takes.
    pub fn bytes(self, values: usize) -> usize {
        match self {
            KvStorage::F32 => 4 * values,
            KvStorage::F16 => 2 * values,
            KvStorage::Q8_0 => values + 2 * values / Q8_BLOCK,
        }
    }
}

/// Where a cache keeps positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CacheLayout {
    /// Position `p` in row `p`, for every position of a bucket of `context` positions.
    Linear { context: usize },
    /// Position `p` in row `p mod slots`; `rows` rows are allocated (`slots` plus the rows that
    /// take padding past the ring's end).
    Ring { slots: usize, rows: usize },
}

impl CacheLayout {
    /// The layout of a layer with attention window `window` (none: every earlier position) in a
    /// bucket of `context` positions, for steps of at most `max_tokens` tokens. A ring only when
    /// it is smaller than the bucket.
    pub fn new(window: Option<usize>, context: usize, max_tokens: usize) -> CacheLayout {
        let linear = CacheLayout::Linear { context };
        let (Some(w), t) = (window, max_tokens.max(1)) else {
            return linear;
        };
        let slots = (w + t - 1).div_ceil(t) * t;
        let rows = slots + t - 1;
        if rows >= context {
            return linear;
        }
        CacheLayout::Ring { slots, rows }
    }

    /// Rows allocated per kv head.
    pub fn rows(&self) -> usize {
        match *self {
            CacheLayout::Linear { context } => context,
            CacheLayout::Ring { rows, .. } => rows,
        }
    }

    /// How many of the most recent positions the cache can hold.
    pub fn capacity(&self) -> usize {
        match *self {
            CacheLayout::Linear { context } => context,
            CacheLayout::Ring { slots, .. } => slots,
        }
    }

    /// The row of position `p`.
    pub fn row(&self, p: usize) -> usize {
        match *self {
            CacheLayout::Linear { .. } => p,
            CacheLayout::Ring { slots, .. } => p % slots,
        }
    }

    /// How many real tokens a step starting at `pos` may write before the ring's end.
    pub fn room(&self, pos: usize) -> usize {
        match *self {
            CacheLayout::Linear { .. } => usize::MAX,
            CacheLayout::Ring { slots, .. } => slots - pos % slots,
        }
    }

    /// One past the last position whose ring row a step of `t` rows (real and padding) at `pos`
    /// overwrites: padding rows past the ring's end land outside it.
    pub fn reach(&self, pos: usize, t: usize) -> usize {
        pos + t.min(self.room(pos))
    }

    /// The position held by row `j` after a step whose last real position is `last`, if any.
    fn held(&self, j: usize, last: usize) -> Option<usize> {
        match *self {
            CacheLayout::Linear { .. } => Some(j),
            CacheLayout::Ring { slots, .. } => {
                if j >= slots {
                    return None;
                }
                // the latest position congruent to j that is not after `last`
                let back = (last + slots - j) % slots;
                last.checked_sub(back)
            }
        }
    }

    /// Fills the `[t, rows]` additive mask of a step of `n` real tokens (of `t` rows) at
    /// position `pos`: query `pos + i` sees the positions `p ≤ pos + i` within `window`;
    /// padding rows see what the last real row sees. Hidden entries get `masked`.
    pub fn fill_mask(
        &self,
        pos: usize,
        n: usize,
        t: usize,
        window: Option<usize>,
        masked: f32,
        out: &mut [f32],
    ) {
        let rows = self.rows();
        debug_assert!(n >= 1 && n <= t && out.len() == t * rows);
        let last = pos + n - 1;
        for (i, line) in out.chunks_exact_mut(rows).enumerate() {
            let q = pos + i.min(n - 1);
            for (j, v) in line.iter_mut().enumerate() {
                let visible = self
                    .held(j, last)
                    .is_some_and(|p| p <= q && window.is_none_or(|w| q - p < w));
                *v = if visible { 0.0 } else { masked };
            }
        }
    }

    /// Whether a sequence cut back to `len` positions still finds every position its next
    /// query sees (within `window`), when steps have overwritten ring rows of positions up to
    /// (not including) `written`.
    pub fn keeps(&self, window: Option<usize>, len: usize, written: usize) -> bool {
        match (*self, window) {
            (CacheLayout::Ring { slots, .. }, Some(w)) => {
                // the oldest position the query at `len` sees
                let oldest = (len + 1).saturating_sub(w);
                written <= oldest + slots
            }
            _ => true,
        }
    }
}

/// The rows of positions `len − k .. len` in `from` and `to`, for the positions both can hold:
/// `(from row, to row, run length)` in position order, each run contiguous in both.
pub fn moved_rows(from: CacheLayout, to: CacheLayout, len: usize) -> Vec<(usize, usize, usize)> {
    let keep = len.min(from.capacity()).min(to.capacity());
    let mut runs: Vec<(usize, usize, usize)> = Vec::new();
    for p in len - keep..len {
        let (a, b) = (from.row(p), to.row(p));
        match runs.last_mut() {
            Some((ra, rb, k)) if *ra + *k == a && *rb + *k == b => *k += 1,
            _ => runs.push((a, b, 1)),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_only_where_it_is_smaller_than_the_bucket() {
        assert_eq!(
            CacheLayout::new(None, 4096, 128),
            CacheLayout::Linear { context: 4096 }
        );
        // 512 + 127 rounded up to 640; 127 rows for padding
        assert_eq!(
            CacheLayout::new(Some(512), 4096, 128),
            CacheLayout::Ring {
                slots: 640,
                rows: 767
            }
        );
        assert_eq!(
            CacheLayout::new(Some(512), 512, 128),
            CacheLayout::Linear { context: 512 }
        );
        assert_eq!(
            CacheLayout::new(Some(16), 256, 64),
            CacheLayout::Ring {
                slots: 128,
                rows: 191
            }
        );
    }

    /// Every query of every step sees exactly the positions of its window, each at the row the
    /// step wrote it to, whatever the step sizes and padding; rows past the ring never.
    #[test]
    fn ring_masks_see_the_window_of_each_query() {
        let (w, t) = (5usize, 4usize);
        let ring = CacheLayout::new(Some(w), 64, t);
        let CacheLayout::Ring { slots, rows } = ring else {
            panic!("{ring:?}")
        };
        assert_eq!((slots, rows), (8, 11));
        // what each row holds: Some(position) or padding garbage
        let mut holds: Vec<Option<usize>> = vec![None; rows];
        let mut pos = 0;
        for (k, n) in [3usize, 1, 4, 2, 4, 1, 1, 3, 4, 4, 2, 1, 4, 3, 4]
            .into_iter()
            .enumerate()
        {
            let n = n.min(ring.room(pos));
            let r = ring.row(pos);
            for i in 0..t {
                holds[r + i] = (i < n).then_some(pos + i);
            }
            let mut mask = vec![0.0; t * rows];
            ring.fill_mask(pos, n, t, Some(w), f32::NEG_INFINITY, &mut mask);
            for i in 0..n {
                let q = pos + i;
                let seen: Vec<usize> = (0..rows)
                    .filter(|&j| mask[i * rows + j] == 0.0)
                    .map(|j| holds[j].unwrap_or_else(|| panic!("step {k}: row {j} is padding")))
                    .collect();
                let mut seen_sorted = seen.clone();
                seen_sorted.sort_unstable();
                let want: Vec<usize> = (q.saturating_sub(w - 1)..=q).collect();
                assert_eq!(seen_sorted, want, "step {k} query {q}");
            }
            pos += n;
        }
        assert!(pos > 3 * slots);
    }

    #[test]
    fn moves_keep_each_position_at_its_row() {
        let lin = CacheLayout::Linear { context: 32 };
        let ring = CacheLayout::Ring { slots: 8, rows: 11 };
        // 20 positions: the ring holds the last 8, 12..19 at rows 4..7 then 0..3
        assert_eq!(moved_rows(lin, ring, 20), vec![(12, 4, 4), (16, 0, 4)]);
        assert_eq!(moved_rows(ring, ring, 5), vec![(0, 0, 5)]);
        assert_eq!(moved_rows(ring, lin, 6), vec![(0, 0, 6)]);
        assert_eq!(moved_rows(lin, lin, 7), vec![(0, 0, 7)]);
    }

    #[test]
    fn cutting_back_keeps_the_window_only_while_the_ring_holds_it() {
        let ring = CacheLayout::Ring { slots: 8, rows: 11 };
        // written up to 20: positions 12..19 held; a cut to 16 needs 12..15 (window 5)
        assert!(ring.keeps(Some(5), 16, 20));
        assert!(ring.keeps(Some(5), 15, 19));
        // a cut to 14 needs 10..13; 10 and 11 were overwritten by 18 and 19
        assert!(!ring.keeps(Some(5), 14, 20));
        assert!(CacheLayout::Linear { context: 64 }.keeps(Some(5), 1, 60));
    }
}
