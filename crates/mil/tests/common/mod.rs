//! Seeded generators of random MIL programs (for the round-trip property and the fuzzers).
#![allow(dead_code)]

use aneforge_mil::*;

/// SplitMix64: small, seedable, good enough for test data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const LITERAL_DTYPES: [DType; 19] = [
    DType::Fp16,
    DType::Fp32,
    DType::Fp64,
    DType::Bf16,
    DType::Int4,
    DType::Int8,
    DType::Int16,
    DType::Int32,
    DType::Int64,
    DType::Uint1,
    DType::Uint2,
    DType::Uint3,
    DType::Uint4,
    DType::Uint6,
    DType::Uint8,
    DType::Uint16,
    DType::Uint32,
    DType::Uint64,
    DType::Bool,
];

pub fn ident(rng: &mut Rng) -> String {
    const FIRST: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_";
    const REST: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789_";
    let mut s = String::new();
    s.push(*rng.pick(FIRST) as char);
    for _ in 0..rng.below(8) {
        s.push(*rng.pick(REST) as char);
    }
    s
}

/// Strings that need escaping in MIL text: quotes, backslashes, control characters, non-ASCII.
pub fn tricky_string(rng: &mut Rng) -> String {
    const PIECES: &[&str] = &[
        "a",
        "op_12",
        "\"",
        "\\",
        "\n",
        "\t",
        "\r",
        "\u{1}",
        "\u{7f}",
        "é",
        "日本",
        " ",
        "@model_path/",
        "{",
        "}",
        "(",
        ")",
        ",",
        "=",
        ";",
    ];
    (0..rng.below(6)).map(|_| *rng.pick(PIECES)).collect()
}

/// A float exactly representable in `dtype`, biased toward edge values; never NaN.
pub fn float_in(rng: &mut Rng, dtype: DType) -> f64 {
    let edges: Vec<f64> = match dtype {
        DType::Fp16 => vec![
            half::f16::MAX.to_f64(),
            half::f16::MIN_POSITIVE.to_f64(),
            half::f16::from_bits(1).to_f64(),
            half::f16::from_bits(0x3ff).to_f64(),
        ],
        DType::Bf16 => vec![
            half::bf16::MAX.to_f64(),
            half::bf16::MIN_POSITIVE.to_f64(),
            half::bf16::from_bits(1).to_f64(),
        ],
        DType::Fp32 => vec![
            f32::MAX as f64,
            f32::MIN_POSITIVE as f64,
            f32::from_bits(1) as f64,
            1e-8f32 as f64,
        ],
        _ => vec![f64::MAX, f64::MIN_POSITIVE, f64::from_bits(1), 0.1],
    };
    let v = match rng.below(10) {
        0 => 0.0,
        1 => 1.0,
        2 => f64::INFINITY,
        3 | 4 => *rng.pick(&edges),
        _ => {
            let bits = rng.next_u64();
            match dtype {
                DType::Fp16 => half::f16::from_bits(bits as u16).to_f64(),
                DType::Bf16 => half::bf16::from_bits(bits as u16).to_f64(),
                DType::Fp32 => f32::from_bits(bits as u32) as f64,
                _ => f64::from_bits(bits),
            }
        }
    };
    let v = if v.is_nan() { 0.5 } else { v };
    if rng.chance(50) {
        -v
    } else {
        v
    }
}

pub fn int_in(rng: &mut Rng, dtype: DType) -> i64 {
    let (lo, hi) = dtype.int_range().unwrap_or((0, 1));
    let (lo, hi) = (lo.max(i64::MIN as i128), hi.min(i64::MAX as i128));
    match rng.below(4) {
        0 => lo as i64,
        1 => hi as i64,
        _ => (lo + (rng.next_u64() as i128).rem_euclid(hi - lo + 1)) as i64,
    }
}

pub fn data_for(rng: &mut Rng, dtype: DType, n: usize) -> TensorData {
    match dtype {
        DType::Bool => TensorData::Bool((0..n).map(|_| rng.chance(50)).collect()),
        DType::String => TensorData::Str((0..n).map(|_| tricky_string(rng)).collect()),
        d if d.is_float() => TensorData::Float((0..n).map(|_| float_in(rng, d)).collect()),
        d => TensorData::Int((0..n).map(|_| int_in(rng, d)).collect()),
    }
}

pub fn fixed_shape(rng: &mut Rng, max_rank: usize) -> Vec<usize> {
    (0..rng.below(max_rank + 1)).map(|_| rng.below(4)).collect()
}

pub fn tensor_type(rng: &mut Rng) -> TensorType {
    let dtype = if rng.chance(10) {
        DType::String
    } else {
        *rng.pick(&LITERAL_DTYPES)
    };
    let shape = (0..rng.below(5))
        .map(|_| match rng.below(6) {
            0 => Dim::Symbol("?".into()),
            1 => Dim::Symbol(format!("is{}", rng.below(10))),
            _ => Dim::Fixed(rng.below(5000)),
        })
        .collect();
    TensorType { dtype, shape }
}

pub fn value_type(rng: &mut Rng) -> ValueType {
    match rng.below(12) {
        0 => ValueType::Tuple((0..rng.below(3)).map(|_| tensor_type(rng).into()).collect()),
        1 => ValueType::Dict {
            key: DType::String,
            value: *rng.pick(&LITERAL_DTYPES),
        },
        _ => tensor_type(rng).into(),
    }
}

pub fn tensor_literal(rng: &mut Rng) -> Literal {
    let dtype = if rng.chance(10) {
        DType::String
    } else {
        *rng.pick(&LITERAL_DTYPES)
    };
    let shape = fixed_shape(rng, 3);
    let ty = TensorType::new(dtype, &shape);
    let n = ty.num_elements().unwrap_or(0);
    Literal::Tensor {
        data: data_for(rng, dtype, n),
        ty,
    }
}

/// Any literal; `allow_tuple` is false in argument position, where `(a, b)` reads as a list.
pub fn literal(rng: &mut Rng, allow_tuple: bool, depth: usize) -> Literal {
    match rng.below(10) {
        0 => {
            let mut ty = tensor_type(rng);
            ty.dtype = *rng.pick(&[
                DType::Fp16,
                DType::Fp32,
                DType::Int8,
                DType::Uint4,
                DType::Int32,
            ]);
            Literal::Blob {
                ty,
                path: if rng.chance(70) {
                    "@model_path/weights/weight.bin".into()
                } else {
                    tricky_string(rng)
                },
                offset: rng.next_u64(),
            }
        }
        1 => {
            let key = *rng.pick(&[DType::String, DType::Int32, DType::Bool]);
            let value = *rng.pick(&[DType::String, DType::Fp32, DType::Int64, DType::Bool]);
            let scalar = |rng: &mut Rng, d: DType| Literal::Tensor {
                ty: TensorType::scalar(d),
                data: data_for(rng, d, 1),
            };
            Literal::Dict {
                key,
                value,
                entries: (0..rng.below(4))
                    .map(|_| (scalar(rng, key), scalar(rng, value)))
                    .collect(),
            }
        }
        2 if allow_tuple && depth < 2 => Literal::Tuple(
            (0..rng.below(3))
                .map(|_| literal(rng, true, depth + 1))
                .collect(),
        ),
        _ => tensor_literal(rng),
    }
}

pub fn argument(rng: &mut Rng, depth: usize) -> Argument {
    match rng.below(6) {
        0 | 1 => Argument::Literal(literal(rng, false, depth)),
        2 if depth < 2 => Argument::List(
            (0..rng.below(4))
                .map(|_| argument(rng, depth + 1))
                .collect(),
        ),
        _ => Argument::Name(ident(rng)),
    }
}

pub fn compound_type(rng: &mut Rng, depth: usize) -> CompoundType {
    match if depth > 2 { 0 } else { rng.below(4) } {
        1 => CompoundType::Tuple(
            (0..rng.below(3))
                .map(|_| compound_type(rng, depth + 1))
                .collect(),
        ),
        2 => CompoundType::Dict(
            Box::new(CompoundType::Tensor(TensorType::scalar(DType::String))),
            Box::new(compound_type(rng, depth + 1)),
        ),
        3 => CompoundType::List(
            Box::new(compound_type(rng, depth + 1)),
            rng.chance(50).then(|| rng.below(9)),
        ),
        _ => CompoundType::Tensor(tensor_type(rng)),
    }
}

pub fn compound_value(rng: &mut Rng, depth: usize) -> CompoundValue {
    match if depth > 2 {
        rng.below(4)
    } else {
        rng.below(7)
    } {
        0 => CompoundValue::Str(tricky_string(rng)),
        1 => CompoundValue::Int(rng.next_u64() as i64),
        2 => CompoundValue::Float(float_in(rng, DType::Fp64)),
        3 => CompoundValue::Bool(rng.chance(50)),
        4 => CompoundValue::List(
            (0..rng.below(3))
                .map(|_| compound_value(rng, depth + 1))
                .collect(),
        ),
        5 => CompoundValue::Tuple(
            (0..rng.below(3))
                .map(|_| compound_value(rng, depth + 1))
                .collect(),
        ),
        _ => CompoundValue::Dict(
            (0..rng.below(3))
                .map(|_| {
                    (
                        compound_value(rng, depth + 1),
                        compound_value(rng, depth + 1),
                    )
                })
                .collect(),
        ),
    }
}

pub fn operation(rng: &mut Rng, depth: usize) -> Operation {
    let mut op = Operation::new(ident(rng));
    let outputs = match rng.below(10) {
        0 => 0,
        1 | 2 => 2 + rng.below(2),
        _ => 1,
    };
    for _ in 0..outputs {
        op.outputs
            .push(NamedValue::new(ident(rng), value_type(rng)));
    }
    for _ in 0..rng.below(5) {
        op.inputs.push((ident(rng), argument(rng, 0)));
    }
    if rng.chance(70) {
        op.attributes
            .push(("name".into(), Literal::string(tricky_string(rng))));
    }
    for _ in 0..rng.below(3) {
        op.attributes.push((ident(rng), literal(rng, true, 0)));
    }
    if depth == 0 && rng.chance(5) {
        for _ in 0..1 + rng.below(2) {
            op.blocks.push(Block {
                inputs: (0..rng.below(3))
                    .map(|_| NamedValue::new(ident(rng), value_type(rng)))
                    .collect(),
                operations: (0..rng.below(3))
                    .map(|_| operation(rng, depth + 1))
                    .collect(),
                outputs: (0..rng.below(3)).map(|_| ident(rng)).collect(),
            });
        }
    }
    op
}

/// A syntactically arbitrary program (names need not resolve; it is not meant to validate).
pub fn program(rng: &mut Rng) -> Program {
    let mut attributes = Vec::new();
    if rng.chance(70) {
        attributes.push((
            "buildInfo".into(),
            Literal::Dict {
                key: DType::String,
                value: DType::String,
                entries: (0..rng.below(4))
                    .map(|_| {
                        (
                            Literal::string(tricky_string(rng)),
                            Literal::string(tricky_string(rng)),
                        )
                    })
                    .collect(),
            },
        ));
    }
    let functions = (0..1 + rng.below(3))
        .map(|_| {
            let mut f = Function::new(
                ident(rng),
                *rng.pick(&["ios15", "ios16", "ios17", "ios18", "CoreML7", "CoreML8"]),
            );
            f.inputs = (0..rng.below(4))
                .map(|_| NamedValue::new(ident(rng), value_type(rng)))
                .collect();
            if rng.chance(15) {
                f.attributes.push((
                    ident(rng),
                    CompoundLiteral {
                        ty: compound_type(rng, 0),
                        value: compound_value(rng, 0),
                    },
                ));
            }
            f.body.operations = (0..rng.below(8)).map(|_| operation(rng, 0)).collect();
            f.body.outputs = (0..rng.below(3)).map(|_| ident(rng)).collect();
            f
        })
        .collect();
    Program {
        version: rng.pick(&["1.0", "1.3", "1"]).to_string(),
        attributes,
        functions,
    }
}
