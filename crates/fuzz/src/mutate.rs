//! The mutator: a deterministic generator and the mutations a hostile file tends to carry —
//! flipped bits, boundary byte values, truncation, splices of two inputs, repeated and deleted
//! ranges, huge little-endian counts over header fields, and boundary numbers in text formats.

/// xorshift64*: small, fast, and reproducible from a seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// The largest input the mutator produces.
pub const MAX_INPUT: usize = 1 << 20;

const INTERESTING_BYTES: &[u8] = &[
    0, 1, 2, 0x7f, 0x80, 0xfe, 0xff, b'0', b'9', b'"', b'{', b'[',
];

/// Counts, lengths and offsets that overflow, wrap, or ask for more memory than exists.
const HUGE: &[u64] = &[
    0,
    1,
    0x7f,
    0xff,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    1 << 40,
    0x7fff_ffff_ffff_ffff,
    u64::MAX,
];

const NUMBERS: &[&str] = &[
    "0",
    "-1",
    "1",
    "65536",
    "2147483648",
    "4294967296",
    "1099511627776",
    "18446744073709551616",
    "1e308",
    "-1e308",
    "NaN",
    "inf",
    "0.0",
    "99999999999999999999999",
];

/// Applies 1 to 4 mutations to `data`; `other` is another input to splice from.
pub fn mutate(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8]) {
    for _ in 0..1 + rng.below(4) {
        mutate_once(rng, data, other);
    }
    data.truncate(MAX_INPUT);
}

fn mutate_once(rng: &mut Rng, data: &mut Vec<u8>, other: &[u8]) {
    if data.is_empty() {
        data.push(*rng.pick(INTERESTING_BYTES));
        return;
    }
    let len = data.len();
    match rng.below(10) {
        0 => {
            let at = rng.below(len);
            data[at] ^= 1 << rng.below(8);
        }
        1 => {
            let at = rng.below(len);
            data[at] = *rng.pick(INTERESTING_BYTES);
        }
        2 => data.truncate(rng.below(len)),
        3 => {
            if !other.is_empty() {
                let cut = rng.below(len);
                let from = rng.below(other.len());
                data.truncate(cut);
                data.extend_from_slice(&other[from..]);
            }
        }
        4 => {
            let start = rng.below(len);
            let n = 1 + rng.below((len - start).min(4096));
            let copy = data[start..start + n].to_vec();
            let at = rng.below(len + 1);
            data.splice(at..at, copy);
        }
        5 => {
            let start = rng.below(len);
            let n = 1 + rng.below((len - start).min(256));
            data.drain(start..start + n);
        }
        6 | 7 => {
            // a count or offset field: most headers sit in the first bytes
            let width = *rng.pick(&[2usize, 4, 8]);
            let window = if rng.below(2) == 0 { len.min(256) } else { len };
            let at = rng.below(window);
            let value = rng
                .pick(HUGE)
                .wrapping_add(rng.below(3) as u64)
                .wrapping_sub(1);
            let bytes = value.to_le_bytes();
            let end = (at + width).min(len);
            data[at..end].copy_from_slice(&bytes[..end - at]);
        }
        8 => replace_number(rng, data),
        _ => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(16);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            data.splice(at..at, bytes);
        }
    }
}

/// Replaces a run of ASCII digits (a dimension, a count, a config value) with a boundary number.
fn replace_number(rng: &mut Rng, data: &mut Vec<u8>) {
    let from = rng.below(data.len());
    let Some(start) = data[from..]
        .iter()
        .position(u8::is_ascii_digit)
        .map(|p| p + from)
    else {
        return;
    };
    let end = data[start..]
        .iter()
        .position(|b| !b.is_ascii_digit())
        .map_or(data.len(), |p| p + start);
    let number = rng.pick(NUMBERS).as_bytes().to_vec();
    data.splice(start..end, number);
}
