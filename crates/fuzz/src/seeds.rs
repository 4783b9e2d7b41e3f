//! Seed inputs per target: the repository's committed fixtures of that format, small ones, and
//! generated files where none are committed (ONNX, weight.bin, CTranslate2, IDX, short WAVs).
//! Small seeds keep executions fast; mutation grows them where it matters.

use aneforge_mil::{BlobWriter, DType};
use aneforge_onnx::proto::{
    tensor_proto::DataType, tensor_shape_proto, type_proto, AttributeProto, GraphProto, ModelProto,
    NodeProto, OperatorSetIdProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use prost::Message;
use std::path::{Path, PathBuf};

/// Committed files larger than this are not used as seeds.
const MAX_SEED_BYTES: u64 = 64 << 10;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Files under `dir` (recursively) whose names end with `suffix`, up to [`MAX_SEED_BYTES`] each,
/// in a stable order.
fn committed(dir: &str, suffix: &str) -> Vec<Vec<u8>> {
    let mut paths = Vec::new();
    let mut stack = vec![repo().join(dir)];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.to_string_lossy().ends_with(suffix)
                && entry.metadata().is_ok_and(|m| m.len() <= MAX_SEED_BYTES)
            {
                paths.push(path);
            }
        }
    }
    paths.sort();
    paths.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// A program reading two `weight.bin` entries (int8 through `constexpr_affine_dequantize`, and
/// fp16) that the `weight_bin` target pairs with fuzzed blobs.
pub const WEIGHTS_PROGRAM: &str = r#"program(1.3)
{
    func main<ios18>(tensor<fp16, [2, 16]> x) {
            tensor<fp16, [16, 16]> w = constexpr_affine_dequantize()[quantized_data = tensor<int8, [16, 16]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64))), zero_point = int8(0), scale = tensor<fp16, [16]>([0x1p-10, 0x1p-9, 0x1.8p-9, 0x1p-8, 0x1.4p-8, 0x1.8p-8, 0x1.cp-8, 0x1p-7, 0x1.2p-7, 0x1.4p-7, 0x1.6p-7, 0x1.8p-7, 0x1.ap-7, 0x1.cp-7, 0x1.ep-7, 0x1p-6]), axis = int32(0), name = string("w")];
            tensor<fp16, [2, 16]> b = const()[val = tensor<fp16, [2, 16]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(384))), name = string("b")];
            tensor<fp16, [2, 16]> m = matmul(x = x, y = w, transpose_x = bool(false), transpose_y = bool(true))[name = string("m")];
            tensor<fp16, [2, 16]> y = add(x = m, y = b)[name = string("y")];
        } -> (y);
}
"#;

/// The `weight.bin` [`WEIGHTS_PROGRAM`] reads: an int8 [16, 16] entry, then an fp16 [2, 16] one.
pub fn weights_blob() -> Vec<u8> {
    let mut blob = BlobWriter::new();
    let int8: Vec<u8> = (0..256).map(|i| (i as i8).wrapping_mul(7) as u8).collect();
    let first = blob.add(DType::Int8, 256, &int8).expect("int8 entry");
    let fp16: Vec<half::f16> = (0..32)
        .map(|i| half::f16::from_f32(i as f32 / 8.0))
        .collect();
    let second = blob.add_f16(&fp16);
    assert_eq!((first, second), (64, 384), "WEIGHTS_PROGRAM's offsets");
    blob.finish()
}

pub fn mil() -> Vec<Vec<u8>> {
    let mut seeds = committed("crates/mil/tests", ".mil");
    seeds.push(WEIGHTS_PROGRAM.as_bytes().to_vec());
    seeds
}

pub fn weight_bin() -> Vec<Vec<u8>> {
    vec![weights_blob()]
}

pub fn npy() -> Vec<Vec<u8>> {
    let mut seeds = committed("tools/fixtures/onnx/out", ".npy");
    seeds.truncate(6);
    seeds.extend(committed(
        "tools/fixtures/encoders/out",
        "large_bert_mean.npy",
    ));
    seeds
}

pub fn safetensors() -> Vec<Vec<u8>> {
    committed("tools/fixtures/out/safetensors", ".safetensors")
}

pub fn gguf() -> Vec<Vec<u8>> {
    committed("tools/fixtures/out/gguf", ".gguf")
}

pub fn tokenizer_json() -> Vec<Vec<u8>> {
    let mut seeds = committed("tools/fixtures/llm/out/tiny", "tokenizer.json");
    seeds.extend(committed(
        "tools/fixtures/encoders/out/bert_mean",
        "tokenizer.json",
    ));
    seeds
}

pub fn config_json() -> Vec<Vec<u8>> {
    let mut seeds = committed("tools/fixtures/llm/out/tiny", "config.json");
    seeds.extend(committed(
        "tools/fixtures/encoders/out/bert_mean",
        "config.json",
    ));
    seeds.extend(committed(
        "tools/fixtures/vision/out",
        "preprocessor_config.json",
    ));
    seeds.extend(committed("tools/fixtures/whisper", "config.json"));
    seeds
}

fn value_info(name: &str, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(DataType::Float as i32),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], attribute: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        name: Some(format!("{op}_{}", outputs[0])),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute,
        ..Default::default()
    }
}

fn int_attr(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        i: Some(value),
        r#type: Some(aneforge_onnx::proto::attribute_proto::AttributeType::Int as i32),
        ..Default::default()
    }
}

fn initializer(name: &str, dims: &[i64], data: TensorData) -> TensorProto {
    let mut t = TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        ..Default::default()
    };
    match data {
        TensorData::F32(v) => {
            t.data_type = Some(DataType::Float as i32);
            t.raw_data = Some(v.iter().flat_map(|x| x.to_le_bytes()).collect());
        }
        TensorData::I64(v) => {
            t.data_type = Some(DataType::Int64 as i32);
            t.int64_data = v;
        }
    }
    t
}

enum TensorData {
    F32(Vec<f32>),
    I64(Vec<i64>),
}

fn onnx_model(
    nodes: Vec<NodeProto>,
    init: Vec<TensorProto>,
    input: &[i64],
    output: &[i64],
) -> Vec<u8> {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        graph: Some(GraphProto {
            name: Some("seed".into()),
            node: nodes,
            initializer: init,
            input: vec![value_info("x", input)],
            output: vec![value_info("y", output)],
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec()
}

/// Small ONNX graphs covering the op families the importer folds or lowers: elementwise, MatMul
/// with an initializer, shape arithmetic (Shape, Reshape, ConstantOfShape, Expand), Conv with
/// padding, reductions and normalisation.
pub fn onnx() -> Vec<Vec<u8>> {
    let f = |n: usize| TensorData::F32((0..n).map(|i| i as f32 * 0.25 - 1.0).collect());
    vec![
        onnx_model(
            vec![node("Relu", &["x"], &["y"], vec![])],
            vec![],
            &[2, 4],
            &[2, 4],
        ),
        onnx_model(
            vec![
                node("MatMul", &["x", "w"], &["m"], vec![]),
                node("Add", &["m", "b"], &["a"], vec![]),
                node("Softmax", &["a"], &["y"], vec![int_attr("axis", -1)]),
            ],
            vec![
                initializer("w", &[4, 3], f(12)),
                initializer("b", &[3], f(3)),
            ],
            &[2, 4],
            &[2, 3],
        ),
        onnx_model(
            vec![
                node("Shape", &["x"], &["s"], vec![]),
                node("ConstantOfShape", &["s"], &["z"], vec![]),
                node("Add", &["x", "z"], &["a"], vec![]),
                node("Reshape", &["a", "shape"], &["r"], vec![]),
                node("Expand", &["r", "big"], &["e"], vec![]),
                node(
                    "ReduceSum",
                    &["e", "axes"],
                    &["y"],
                    vec![int_attr("keepdims", 0)],
                ),
            ],
            vec![
                initializer("shape", &[3], TensorData::I64(vec![1, 8, 1])),
                initializer("big", &[3], TensorData::I64(vec![2, 8, 3])),
                initializer("axes", &[1], TensorData::I64(vec![2])),
            ],
            &[2, 4],
            &[2, 8],
        ),
        onnx_model(
            vec![
                node(
                    "Conv",
                    &["x", "k", "kb"],
                    &["c"],
                    vec![int_attr("group", 1)],
                ),
                node(
                    "BatchNormalization",
                    &["c", "g", "bb", "mu", "var"],
                    &["n"],
                    vec![],
                ),
                node("Sigmoid", &["n"], &["y"], vec![]),
            ],
            vec![
                initializer("k", &[2, 1, 3, 3], f(18)),
                initializer("kb", &[2], f(2)),
                initializer("g", &[2], f(2)),
                initializer("bb", &[2], f(2)),
                initializer("mu", &[2], f(2)),
                initializer("var", &[2], TensorData::F32(vec![1.0, 2.0])),
            ],
            &[1, 1, 6, 6],
            &[1, 2, 4, 4],
        ),
    ]
}

/// A RIFF WAV file of `frames` frames: `format` 1 (PCM) or 3 (float), `bits` per sample.
fn wav(rate: u32, channels: u16, format: u16, bits: u16, frames: usize) -> Vec<u8> {
    let bytes_per = bits as usize / 8;
    let mut data = Vec::new();
    for i in 0..frames * channels as usize {
        let v = ((i as f32) * 0.05).sin() * 0.5;
        match (format, bits) {
            (3, 32) => data.extend_from_slice(&v.to_le_bytes()),
            (_, 8) => data.push((v * 127.0 + 128.0) as u8),
            (_, 16) => data.extend_from_slice(&((v * 32767.0) as i16).to_le_bytes()),
            (_, 24) => data.extend_from_slice(&(((v * 8388607.0) as i32).to_le_bytes())[..3]),
            _ => data.extend_from_slice(&((v * 2147483647.0) as i32).to_le_bytes()),
        }
    }
    let mut out = Vec::new();
    out.extend_from_slice(b"RIFF");
    out.extend_from_slice(&(36 + data.len() as u32).to_le_bytes());
    out.extend_from_slice(b"WAVEfmt ");
    out.extend_from_slice(&16u32.to_le_bytes());
    out.extend_from_slice(&format.to_le_bytes());
    out.extend_from_slice(&channels.to_le_bytes());
    out.extend_from_slice(&rate.to_le_bytes());
    out.extend_from_slice(&(rate * channels as u32 * bytes_per as u32).to_le_bytes());
    out.extend_from_slice(&(channels * bytes_per as u16).to_le_bytes());
    out.extend_from_slice(&bits.to_le_bytes());
    out.extend_from_slice(b"data");
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(&data);
    out
}

/// Short WAVs in every sample format and a few rates (resampled or not), and the committed
/// FLAC, MP3 and Ogg clips cut to their first 8 KiB (their headers and first frames).
pub fn audio() -> Vec<Vec<u8>> {
    let mut seeds = vec![
        wav(16000, 1, 1, 16, 400),
        wav(44100, 2, 1, 16, 600),
        wav(8000, 1, 1, 8, 300),
        wav(22050, 1, 3, 32, 300),
        wav(48000, 2, 1, 24, 300),
        wav(16000, 1, 1, 32, 200),
    ];
    for suffix in [".flac", ".mp3", ".ogg"] {
        for mut clip in committed("tools/fixtures/whisper/out/codecs", suffix) {
            clip.truncate(8 << 10);
            seeds.push(clip);
        }
    }
    seeds
}

pub fn image() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for suffix in [".png", ".jpg", ".webp", ".bmp"] {
        seeds.extend(committed("tools/fixtures/vision/out/images", suffix));
    }
    seeds
}

pub fn pth() -> Vec<Vec<u8>> {
    committed("tools/fixtures/vision/out/torch", ".pt")
}

/// A CTranslate2 Whisper `model.bin` (version 6): a scalar, weights and an alias.
pub fn ct2() -> Vec<Vec<u8>> {
    let f32s = |n: usize| -> Vec<u8> { (0..n).flat_map(|i| (i as f32).to_le_bytes()).collect() };
    let vars: Vec<(&str, Vec<u32>, u8, Vec<u8>)> = vec![
        ("encoder/num_heads", vec![], 2, 2i16.to_le_bytes().to_vec()),
        (
            "encoder/layer_0/self_attention/linear_0/weight",
            vec![6, 2],
            0,
            f32s(12),
        ),
        (
            "encoder/layer_0/self_attention/linear_0/bias",
            vec![6],
            0,
            f32s(6),
        ),
        ("decoder/embeddings/weight", vec![4, 2], 0, f32s(8)),
    ];
    let aliases = [("decoder/projection/weight", "decoder/embeddings/weight")];
    vec![aneforge_models::testing::ct2_bytes(&vars, &aliases)]
}

/// IDX files of unsigned bytes (images [n, h, w] and labels [n]), raw and gzipped.
pub fn idx() -> Vec<Vec<u8>> {
    use std::io::Write;
    let idx = |dims: &[u32]| -> Vec<u8> {
        let mut out = vec![0, 0, 0x08, dims.len() as u8];
        for d in dims {
            out.extend_from_slice(&d.to_be_bytes());
        }
        let n: u32 = dims.iter().product();
        out.extend((0..n).map(|i| (i * 37) as u8));
        out
    };
    let images = idx(&[3, 5, 4]);
    let labels = idx(&[7]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&images).expect("gzip in memory");
    vec![images, labels, gz.finish().expect("gzip in memory")]
}
