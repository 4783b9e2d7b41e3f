//! Seeded mutation fuzzers that run on stable Rust for a few seconds each
//! (`ANEFORGE_FUZZ_SECS`, default 3; `ANEFORGE_FUZZ_SEED` to reproduce a run). The MIL parser and
//! the weights.bin reader must never panic; text that parses must validate without panicking and
//! survive print -> parse unchanged.

mod common;

use aneforge_mil::*;
use common::Rng;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

fn budget() -> Duration {
    let secs = std::env::var("ANEFORGE_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(3.0);
    Duration::from_secs_f64(secs)
}

fn seed() -> u64 {
    std::env::var("ANEFORGE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1234)
}

fn corpus() -> Vec<String> {
    let dir = format!("{}/tests/fixtures", env!("CARGO_MANIFEST_DIR"));
    let mut texts: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    texts.sort();
    let mut rng = Rng::new(7);
    texts.extend((0..32).map(|_| print(&common::program(&mut rng))));
    texts
}

const SPICE: &[char] = &[
    '(', ')', '[', ']', '{', '}', '<', '>', ',', '=', ';', '"', '\\', '-', '.', 'x', 'p', '?', '0',
    '9', ' ', '\n', 'é', '\u{0}', 'e', '+',
];

fn mutate(rng: &mut Rng, text: &str) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for _ in 0..1 + rng.below(4) {
        let n = chars.len();
        if n == 0 {
            chars.push(*rng.pick(SPICE));
            continue;
        }
        let at = rng.below(n);
        let len = 1 + rng.below(24.min(n - at));
        match rng.below(7) {
            0 => chars[at] = *rng.pick(SPICE),
            1 => {
                chars.drain(at..at + len);
            }
            2 => {
                let piece: Vec<char> = chars[at..at + len].to_vec();
                let to = rng.below(n);
                chars.splice(to..to, piece);
            }
            3 => chars.truncate(at),
            4 => chars.insert(at, *rng.pick(SPICE)),
            5 => {
                // Swap two whitespace-separated tokens.
                let text: String = chars.iter().collect();
                let mut tokens: Vec<&str> = text.split(' ').collect();
                let (i, j) = (rng.below(tokens.len()), rng.below(tokens.len()));
                tokens.swap(i, j);
                chars = tokens.join(" ").chars().collect();
            }
            _ => {
                // Deep nesting must be refused, not overflow the stack.
                let open = *rng.pick(&['[', '(', '{']);
                chars.splice(at..at, std::iter::repeat_n(open, 200 + rng.below(2000)));
            }
        }
    }
    chars.into_iter().collect()
}

#[test]
fn mil_parser_never_panics() {
    let corpus = corpus();
    let start = Instant::now();
    let mut rng = Rng::new(seed());
    let (mut runs, mut parsed) = (0u64, 0u64);
    while start.elapsed() < budget() {
        let base = rng.pick(&corpus).clone();
        let input = mutate(&mut rng, &base);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            if let Ok(p) = parse(&input) {
                let _ = validate(&p);
                let printed = print(&p);
                let again = parse(&printed)
                    .unwrap_or_else(|e| panic!("reprint does not parse: {e}\n{printed}"));
                assert_eq!(
                    print(&again),
                    printed,
                    "print -> parse -> print changed the text"
                );
                true
            } else {
                false
            }
        }));
        match outcome {
            Ok(ok) => parsed += ok as u64,
            Err(_) => panic!("parser panicked (seed {}, run {runs}) on:\n{input}", seed()),
        }
        runs += 1;
    }
    eprintln!("mil parser fuzz: {runs} inputs, {parsed} parsed");
    assert!(runs > 100, "the fuzzer barely ran ({runs} inputs)");
}

fn valid_weights(rng: &mut Rng) -> Vec<u8> {
    let mut w = BlobWriter::new();
    for _ in 0..1 + rng.below(4) {
        let n = 1 + rng.below(40);
        match rng.below(4) {
            0 => {
                w.add_f16(&vec![half::f16::ONE; n]);
            }
            1 => {
                w.add_f32(&vec![0.5; n]);
            }
            2 => {
                w.add(DType::Uint4, n, &vec![0x21; n.div_ceil(2)]).unwrap();
            }
            _ => {
                w.add(DType::Int8, n, &vec![3; n]).unwrap();
            }
        }
    }
    w.finish()
}

fn mutate_bytes(rng: &mut Rng, mut b: Vec<u8>) -> Vec<u8> {
    const EDGES: [u64; 8] = [0, 1, 63, 64, 128, u32::MAX as u64, u64::MAX, 1 << 40];
    for _ in 0..1 + rng.below(4) {
        let n = b.len();
        match rng.below(6) {
            0 if n > 0 => {
                // Header and descriptors are where the structure lives.
                let at = rng.below(n.min(320));
                b[at] = rng.next_u64() as u8;
            }
            1 if n >= 8 => {
                let at = (rng.below(n.min(320) / 8)) * 8;
                let edge = *rng.pick(&EDGES);
                let v = if rng.chance(50) {
                    edge
                } else {
                    edge.wrapping_add(n as u64)
                };
                b[at..at + 8].copy_from_slice(&v.to_le_bytes());
            }
            2 => b.truncate(rng.below(n + 1)),
            3 => b.extend(std::iter::repeat_n(0u8, rng.below(200))),
            4 if n > 0 => {
                let at = rng.below(n);
                b[at] ^= 1 << rng.below(8);
            }
            _ => {}
        }
    }
    b
}

#[test]
fn weights_reader_never_panics() {
    let start = Instant::now();
    let mut rng = Rng::new(seed() ^ 0xb10b);
    let (mut runs, mut accepted) = (0u64, 0u64);
    let dtypes = [
        DType::Fp16,
        DType::Fp32,
        DType::Int8,
        DType::Uint4,
        DType::Uint1,
    ];
    while start.elapsed() < budget() {
        let base = valid_weights(&mut rng);
        let bytes = mutate_bytes(&mut rng, base);
        let probe_seed = rng.next_u64();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let Ok(file) = BlobFile::from_vec("fuzz/weight.bin", bytes.clone()) else {
                return false;
            };
            let mut probe = Rng::new(probe_seed);
            for e in file.entries() {
                assert!(e.data_offset + e.data_len <= bytes.len() as u64);
                let bits = e.dtype.bits().unwrap_or(8) as u64;
                let elements = (e.data_len * 8 / bits) as usize;
                let payload =
                    file.payload(e.descriptor_offset, &TensorType::new(e.dtype, &[elements]));
                if let Ok(p) = payload {
                    assert_eq!(p.len() as u64, e.data_len);
                }
            }
            for _ in 0..8 {
                let offset = probe.next_u64() % (bytes.len() as u64 + 64);
                let ty = TensorType::new(*probe.pick(&dtypes), &[probe.below(64)]);
                let _ = file.payload(offset, &ty);
            }
            true
        }));
        match outcome {
            Ok(ok) => accepted += ok as u64,
            Err(_) => panic!(
                "weights reader panicked (seed {}, run {runs}) on {} bytes: {:02x?}",
                seed(),
                bytes.len(),
                &bytes[..bytes.len().min(320)]
            ),
        }
        runs += 1;
    }
    eprintln!("weights.bin fuzz: {runs} inputs, {accepted} accepted");
    assert!(runs > 100, "the fuzzer barely ran ({runs} inputs)");
}
