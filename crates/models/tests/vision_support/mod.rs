//! Reproducible random weights for torchvision-layout checkpoints: the generator of
//! `tools/fixtures/vision/torchvision_random.py`, regenerated here into a safetensors state_dict
//! that the normal loader reads.

use std::path::Path;

use serde_json::Value;

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The value of element `e` of state_dict entry `t`, by the entry's name and shape.
fn values(seed: u64, t: u64, name: &str, shape: &[usize]) -> Vec<f32> {
    let base = splitmix64(seed ^ (t << 32));
    let n: usize = shape.iter().product();
    let leaf = name.rsplit('.').next().unwrap_or_default();
    let fan_in: usize = shape.iter().skip(1).product();
    (0..n as u64)
        .map(|e| {
            let h = splitmix64(base ^ e);
            let u = (h >> 11) as f64 * 2f64.powi(-53) * 2.0 - 1.0;
            let v = match leaf {
                "running_mean" => 0.1 * u,
                "running_var" => 1.0 + 0.25 * u,
                "bias" => 0.1 * u,
                "weight" if shape.len() == 1 => 1.0 + 0.25 * u,
                "weight" => u * (3.0 / fan_in as f64).sqrt(),
                _ => panic!("no rule for {name}"),
            };
            v as f32
        })
        .collect()
}

/// Writes the state_dict the fixture `doc` (its `seed` and `entries`) describes to `path`.
pub fn write_state_dict(doc: &Value, path: &Path) {
    let seed = doc["seed"].as_u64().unwrap();
    let mut tensors: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for (t, e) in doc["entries"].as_array().unwrap().iter().enumerate() {
        let name = e["name"].as_str().unwrap().to_string();
        let shape: Vec<usize> = e["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        if e["dtype"] == "int64" {
            let n: usize = shape.iter().product();
            tensors.push((name, safetensors::Dtype::I64, shape, vec![0u8; 8 * n]));
        } else {
            let v = values(seed, t as u64, &name, &shape);
            let bytes = v.iter().flat_map(|x| x.to_le_bytes()).collect();
            tensors.push((name, safetensors::Dtype::F32, shape, bytes));
        }
    }
    let views: Vec<_> = tensors
        .iter()
        .map(|(n, dt, s, d)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(*dt, s.clone(), d).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}
