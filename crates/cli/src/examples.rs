//! Built-in example graphs for `aneforge compile`, with deterministic pseudo-random weights.

use aneforge::graph::{constant, input, nn, DType, GraphError, HostArray, Tensor};

/// Named outputs of an example graph.
pub type Outputs = Vec<(&'static str, Tensor)>;

pub struct Example {
    pub name: &'static str,
    pub about: &'static str,
    pub build: fn() -> Result<Outputs, GraphError>,
}

pub const EXAMPLES: &[Example] = &[
    Example {
        name: "mlp",
        about: "x[1, 256] → linear 1024 → gelu → linear 256",
        build: mlp,
    },
    Example {
        name: "vit-patch",
        about: "ViT patch embedding: 16×16 stride-16 conv over [1, 3, 224, 224], layer norm",
        build: vit_patch,
    },
    Example {
        name: "attention",
        about: "causal grouped-query self-attention (8 heads, 2 kv heads) over [1, 64, 256]",
        build: attention,
    },
    Example {
        name: "decoder-step",
        about: "one decode step: KV-cache writes at a runtime position, GQA attention with a mask input",
        build: decoder_step,
    },
    Example {
        name: "embedding",
        about: "a token-embedding lookup over 50257 rows: rejected on every family (gather on the host)",
        build: embedding,
    },
    Example {
        name: "lm-head",
        about: "a 151936-wide vocabulary head over hidden[1, 1, 64]",
        build: lm_head,
    },
];

pub fn find(name: &str) -> Option<&'static Example> {
    EXAMPLES.iter().find(|e| e.name == name)
}

pub fn names() -> String {
    EXAMPLES
        .iter()
        .map(|e| e.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Uniform values in [−scale, scale) from a fixed xorshift stream per `seed`.
fn weight(seed: u64, shape: &[usize], scale: f32) -> Result<Tensor, GraphError> {
    let n: usize = shape.iter().product();
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let data: Vec<f32> = (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect();
    Ok(constant(HostArray::from_f32(shape, data)?))
}

fn mlp() -> Result<Outputs, GraphError> {
    let x = input("x", &[1, 256], DType::F32)?;
    let h = x
        .linear(
            &weight(1, &[1024, 256], 0.06)?,
            Some(&weight(2, &[1024], 0.01)?),
        )?
        .gelu()?;
    let y = h.linear(
        &weight(3, &[256, 1024], 0.03)?,
        Some(&weight(4, &[256], 0.01)?),
    )?;
    Ok(vec![("y", y)])
}

fn vit_patch() -> Result<Outputs, GraphError> {
    let img = input("image", &[1, 3, 224, 224], DType::F32)?;
    let p = nn::Conv2dParams {
        stride: [16, 16],
        ..nn::Conv2dParams::default()
    };
    let patches = img.conv2d(
        &weight(5, &[768, 3, 16, 16], 0.03)?,
        Some(&weight(6, &[768], 0.01)?),
        p,
    )?;
    let tokens = patches.reshape(&[1, 768, 196])?.transpose(&[0, 2, 1])?;
    let normed = tokens.layer_norm(&[-1], Some(&weight(7, &[768], 1.0)?), None, 1e-6)?;
    Ok(vec![("tokens", normed)])
}

fn attention_weights(
    seed: u64,
    d: usize,
    h: usize,
    hkv: usize,
) -> Result<nn::AttentionWeights, GraphError> {
    let hd = d / h;
    Ok(nn::AttentionWeights {
        wq: weight(seed, &[h * hd, d], 0.06)?,
        wk: weight(seed + 1, &[hkv * hd, d], 0.06)?,
        wv: weight(seed + 2, &[hkv * hd, d], 0.06)?,
        wo: weight(seed + 3, &[d, h * hd], 0.06)?,
        bq: None,
        bk: None,
        bv: None,
        bo: None,
        num_heads: h,
        num_kv_heads: hkv,
    })
}

fn attention() -> Result<Outputs, GraphError> {
    let x = input("x", &[1, 64, 256], DType::F32)?;
    let w = attention_weights(10, 256, 8, 2)?;
    Ok(vec![("y", nn::mha(&x, &x, &w, None, true)?)])
}

fn decoder_step() -> Result<Outputs, GraphError> {
    let (d, h, hkv, hd, s) = (256usize, 8usize, 2usize, 32usize, 128usize);
    let x = input("x", &[1, 1, d], DType::F32)?;
    let k_cache = input("k_cache", &[1, hkv, s, hd], DType::F32)?;
    let v_cache = input("v_cache", &[1, hkv, s, hd], DType::F32)?;
    let pos = input("pos", &[4], DType::I32)?;
    let mask = input("mask", &[1, 1, 1, s], DType::F32)?;
    let w = attention_weights(20, d, h, hkv)?;
    let heads = |t: Tensor, n: usize| -> Result<Tensor, GraphError> {
        t.reshape(&[1, 1, n as isize, hd as isize])?
            .transpose(&[0, 2, 1, 3])
    };
    let q = heads(x.linear(&w.wq, None)?, h)?;
    let k = heads(x.linear(&w.wk, None)?, hkv)?;
    let v = heads(x.linear(&w.wv, None)?, hkv)?;
    let k_new = k_cache.dynamic_slice_update(&k, &pos)?;
    let v_new = v_cache.dynamic_slice_update(&v, &pos)?;
    let repeat = |t: &Tensor| -> Result<Tensor, GraphError> {
        t.reshape(&[1, hkv as isize, 1, s as isize, hd as isize])?
            .tile(&[1, 1, h / hkv, 1, 1])?
            .reshape(&[1, h as isize, s as isize, hd as isize])
    };
    let o = nn::sdpa(
        &q,
        &repeat(&k_new)?,
        &repeat(&v_new)?,
        Some(&mask),
        false,
        None,
    )?;
    let y = o
        .transpose(&[0, 2, 1, 3])?
        .reshape(&[1, 1, d as isize])?
        .linear(&w.wo, None)?;
    Ok(vec![
        ("y", y),
        ("k_cache_out", k_new),
        ("v_cache_out", v_new),
    ])
}

fn lm_head() -> Result<Outputs, GraphError> {
    let h = input("hidden", &[1, 1, 64], DType::F32)?;
    Ok(vec![(
        "logits",
        h.linear(&weight(30, &[151936, 64], 0.1)?, None)?,
    )])
}

fn embedding() -> Result<Outputs, GraphError> {
    let ids = input("ids", &[1, 8], DType::I32)?;
    Ok(vec![(
        "embeddings",
        weight(40, &[50257, 64], 0.1)?.gather(&ids, 0)?,
    )])
}
