//! CTranslate2 `model.bin` (format version 6, `WhisperSpec`) read as a [`TensorSource`] under the
//! tensor names of transformers' `WhisperForConditionalGeneration`, so one loader serves both
//! checkpoint formats.
//!
//! File layout, little-endian: u32 version; spec name; u32 revision; u32 variable count; per
//! variable: name, u8 rank, u32 dims[rank], u8 dtype (0 f32, 1 i8, 2 i16, 3 i32, 4 f16, 5 f64,
//! 6 bf16), u32 byte count, data; then u32 alias count and (alias, target) name pairs. A name is a
//! u16 length (NUL included) followed by its bytes.
//!
//! CTranslate2 fuses projections: self-attention `linear_0` holds the q, k and v rows, the
//! decoder's cross-attention `linear_1` the k and v rows. They are exposed here as the separate
//! transformers tensors (row ranges of the fused one). transformers' k projections have no bias;
//! CTranslate2 stores zero rows for it, which are simply not exposed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::weights::{
    bf16_le_to_f32, convert_ints, f16_le_to_f32, f32_le_to_f32, f64_le_to_f32, similar_names,
    FloatLe, HostArray, TensorMeta, TensorSource, WeightError,
};

const FORMAT: &str = "CTranslate2 model.bin";
const VERSION: u32 = 6;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dtype {
    F32,
    I8,
    I16,
    I32,
    F16,
    F64,
    Bf16,
}

impl Dtype {
    fn from_code(code: u8) -> Option<Dtype> {
        Some(match code {
            0 => Dtype::F32,
            1 => Dtype::I8,
            2 => Dtype::I16,
            3 => Dtype::I32,
            4 => Dtype::F16,
            5 => Dtype::F64,
            6 => Dtype::Bf16,
            _ => return None,
        })
    }

    fn width(self) -> usize {
        match self {
            Dtype::I8 => 1,
            Dtype::I16 | Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F64 => 8,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "F32",
            Dtype::I8 => "I8",
            Dtype::I16 => "I16",
            Dtype::I32 => "I32",
            Dtype::F16 => "F16",
            Dtype::F64 => "F64",
            Dtype::Bf16 => "BF16",
        }
    }
}

/// One variable as stored: shape, element type and its bytes in the file.
#[derive(Clone, Debug)]
struct Variable {
    shape: Vec<usize>,
    dtype: Dtype,
    offset: usize,
    len: usize,
}

/// A transformers tensor: rows `rows` (of the first dimension) of a stored variable.
#[derive(Clone, Debug)]
struct View {
    variable: String,
    rows: Option<(usize, usize)>,
}

/// A memory-mapped CTranslate2 model file.
pub struct Ct2Model {
    path: PathBuf,
    map: Mmap,
    spec: String,
    variables: BTreeMap<String, Variable>,
    views: BTreeMap<String, View>,
}

impl std::fmt::Debug for Ct2Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ct2Model")
            .field("path", &self.path)
            .field("spec", &self.spec)
            .field("variables", &self.variables.len())
            .finish()
    }
}

/// A cursor over the file's bytes whose errors name what was being read.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    path: &'a Path,
}

impl Reader<'_> {
    fn malformed(&self, reason: String) -> WeightError {
        WeightError::Malformed {
            path: self.path.to_path_buf(),
            format: FORMAT,
            reason,
        }
    }

    fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&[u8], WeightError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        match end {
            Some(end) => {
                let out = &self.bytes[self.at..end];
                self.at = end;
                Ok(out)
            }
            None => Err(self.malformed(format!(
                "truncated: {} needs {n} bytes at offset {} but the file ends at {}",
                what(),
                self.at,
                self.bytes.len()
            ))),
        }
    }

    fn u8(&mut self, what: &dyn Fn() -> String) -> Result<u8, WeightError> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &dyn Fn() -> String) -> Result<u16, WeightError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, WeightError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, WeightError> {
        let n = self.u16(what)? as usize;
        let raw = self.take(n, what)?;
        let raw = raw.strip_suffix(&[0]).unwrap_or(raw);
        String::from_utf8(raw.to_vec())
            .map_err(|_| self.malformed(format!("{} is not UTF-8", what())))
    }
}

impl Ct2Model {
    /// Maps and indexes `path`; every variable's bytes are checked to lie inside the file and to
    /// match its shape and type.
    pub fn open(path: impl AsRef<Path>) -> Result<Ct2Model, WeightError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| WeightError::Io {
            path: path.clone(),
            source,
        };
        let file = std::fs::File::open(&path).map_err(io)?;
        // SAFETY: the file is mapped read-only; model files are not modified while loaded.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let (spec, variables, aliases) = parse(&map, &path)?;
        let mut model = Ct2Model {
            path,
            map,
            spec,
            variables,
            views: BTreeMap::new(),
        };
        for (alias, target) in aliases {
            if let Some(v) = model.variables.get(&target).cloned() {
                model.variables.insert(alias, v);
            }
        }
        model.views = model.hf_views()?;
        Ok(model)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The model specification's name (`WhisperSpec` for Whisper).
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// The stored variable names, in file order of their names.
    pub fn variable_names(&self) -> Vec<String> {
        self.variables.keys().cloned().collect()
    }

    /// A rank-0 integer variable such as `encoder/num_heads`.
    pub fn scalar_int(&self, name: &str) -> Result<i64, WeightError> {
        let v = self.variable(name)?;
        let count: usize = v.shape.iter().product();
        if count != 1 || !matches!(v.dtype, Dtype::I8 | Dtype::I16 | Dtype::I32) {
            return Err(WeightError::BadTensor {
                name: name.to_string(),
                file: self.path.clone(),
                reason: format!(
                    "expected one integer, found {} of shape {:?}",
                    v.dtype.name(),
                    v.shape
                ),
            });
        }
        Ok(convert_ints(self.bytes_of(v, None), v.dtype.width())[0])
    }

    fn variable(&self, name: &str) -> Result<&Variable, WeightError> {
        self.variables
            .get(name)
            .ok_or_else(|| WeightError::MissingTensor {
                name: name.to_string(),
                source_desc: self.path.display().to_string(),
                similar: similar_names(name, &self.variable_names(), 3),
            })
    }

    fn bytes_of(&self, v: &Variable, rows: Option<(usize, usize)>) -> &[u8] {
        let all = &self.map[v.offset..v.offset + v.len];
        match rows {
            None => all,
            Some((start, n)) => {
                let row: usize = v.shape[1..].iter().product::<usize>() * v.dtype.width();
                &all[start * row..(start + n) * row]
            }
        }
    }

    /// The transformers name → stored variable (and rows) table.
    fn hf_views(&self) -> Result<BTreeMap<String, View>, WeightError> {
        let mut views = BTreeMap::new();
        let whole = |v: &str| View {
            variable: v.to_string(),
            rows: None,
        };
        for name in self.variables.keys() {
            let Some((side, rest)) = name.split_once('/') else {
                continue;
            };
            if side != "encoder" && side != "decoder" {
                continue;
            }
            let hf_side = format!("model.{side}");
            let param = |p: &str| match p {
                "gamma" | "weight" => Some("weight"),
                "beta" | "bias" => Some("bias"),
                _ => None,
            };
            let parts: Vec<&str> = rest.split('/').collect();
            match parts.as_slice() {
                [conv @ ("conv1" | "conv2"), p] => {
                    if let Some(p) = param(p) {
                        views.insert(format!("{hf_side}.{conv}.{p}"), whole(name));
                    }
                }
                ["position_encodings", "encodings"] => {
                    views.insert(format!("{hf_side}.embed_positions.weight"), whole(name));
                }
                ["embeddings", "weight"] if side == "decoder" => {
                    views.insert(format!("{hf_side}.embed_tokens.weight"), whole(name));
                }
                ["layer_norm", p] => {
                    if let Some(p) = param(p) {
                        views.insert(format!("{hf_side}.layer_norm.{p}"), whole(name));
                    }
                }
                [layer, block, module, p] if layer.starts_with("layer_") => {
                    let Some(index) = layer["layer_".len()..].parse::<usize>().ok() else {
                        continue;
                    };
                    let Some(p) = param(p) else { continue };
                    let prefix = format!("{hf_side}.layers.{index}");
                    let v = self.variables[name].clone();
                    let rows = v.shape.first().copied().unwrap_or(0);
                    let mut split = |names: &[&str]| -> Result<(), WeightError> {
                        let n = names.len();
                        if v.shape.is_empty() || rows % n != 0 {
                            return Err(WeightError::BadTensor {
                                name: name.clone(),
                                file: self.path.clone(),
                                reason: format!(
                                    "a fused projection of {n} parts needs rows divisible by \
                                     {n}, found shape {:?}",
                                    v.shape
                                ),
                            });
                        }
                        let each = rows / n;
                        for (i, part) in names.iter().enumerate() {
                            if part.ends_with("k_proj") && p == "bias" {
                                continue;
                            }
                            views.insert(
                                format!("{prefix}.{part}.{p}"),
                                View {
                                    variable: name.clone(),
                                    rows: Some((i * each, each)),
                                },
                            );
                        }
                        Ok(())
                    };
                    match (*block, *module) {
                        ("self_attention", "layer_norm") => {
                            views.insert(format!("{prefix}.self_attn_layer_norm.{p}"), whole(name));
                        }
                        ("self_attention", "linear_0") => {
                            split(&["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"])?
                        }
                        ("self_attention", "linear_1") => {
                            views.insert(format!("{prefix}.self_attn.out_proj.{p}"), whole(name));
                        }
                        ("attention", "layer_norm") => {
                            views.insert(
                                format!("{prefix}.encoder_attn_layer_norm.{p}"),
                                whole(name),
                            );
                        }
                        ("attention", "linear_0") => {
                            views.insert(format!("{prefix}.encoder_attn.q_proj.{p}"), whole(name));
                        }
                        ("attention", "linear_1") => {
                            split(&["encoder_attn.k_proj", "encoder_attn.v_proj"])?
                        }
                        ("attention", "linear_2") => {
                            views
                                .insert(format!("{prefix}.encoder_attn.out_proj.{p}"), whole(name));
                        }
                        ("ffn", "layer_norm") => {
                            views.insert(format!("{prefix}.final_layer_norm.{p}"), whole(name));
                        }
                        ("ffn", "linear_0") => {
                            views.insert(format!("{prefix}.fc1.{p}"), whole(name));
                        }
                        ("ffn", "linear_1") => {
                            views.insert(format!("{prefix}.fc2.{p}"), whole(name));
                        }
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        Ok(views)
    }

    /// How variable `v` (read as `name`) stores its floats; quantized variables are refused.
    fn float(&self, name: &str, v: &Variable) -> Result<FloatLe, WeightError> {
        match v.dtype {
            Dtype::F32 => Ok(FloatLe::F32),
            Dtype::F16 => Ok(FloatLe::F16),
            Dtype::Bf16 => Ok(FloatLe::Bf16),
            Dtype::F64 => Ok(FloatLe::F64),
            Dtype::I8 | Dtype::I16 | Dtype::I32 => Err(WeightError::WrongDtype {
                name: name.to_string(),
                file: self.path.clone(),
                dtype: format!(
                    "{} (quantized CTranslate2 weights are not supported; convert with \
                     --quantization float16 or float32)",
                    v.dtype.name()
                ),
                wanted: "f32",
            }),
        }
    }

    fn view(&self, name: &str) -> Result<(&View, &Variable), WeightError> {
        let view = self
            .views
            .get(name)
            .ok_or_else(|| WeightError::MissingTensor {
                name: name.to_string(),
                source_desc: self.describe(),
                similar: similar_names(name, &self.names(), 3),
            })?;
        Ok((view, &self.variables[&view.variable]))
    }
}

type Parsed = (String, BTreeMap<String, Variable>, Vec<(String, String)>);

fn parse(bytes: &[u8], path: &Path) -> Result<Parsed, WeightError> {
    let mut r = Reader { bytes, at: 0, path };
    let version = r.u32(&|| "the format version".into())?;
    if version != VERSION {
        return Err(r.malformed(format!(
            "format version {version}, this reader knows version {VERSION}"
        )));
    }
    let spec = r.string(&|| "the specification name".into())?;
    let _revision = r.u32(&|| "the specification revision".into())?;
    let count = r.u32(&|| "the variable count".into())? as usize;
    let mut variables = BTreeMap::new();
    for i in 0..count {
        let name = r.string(&|| format!("the name of variable {i} of {count}"))?;
        let what = |field: &'static str| {
            let name = name.clone();
            move || format!("variable '{name}' ({field})")
        };
        let rank = r.u8(&what("rank"))? as usize;
        let mut shape = Vec::with_capacity(rank);
        for _ in 0..rank {
            shape.push(r.u32(&what("dimensions"))? as usize);
        }
        let code = r.u8(&what("dtype"))?;
        let dtype = Dtype::from_code(code).ok_or_else(|| {
            r.malformed(format!("variable '{name}' has unknown dtype code {code}"))
        })?;
        let len = r.u32(&what("byte count"))? as usize;
        let count: Option<usize> = shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .and_then(|n| n.checked_mul(dtype.width()));
        if count != Some(len) {
            return Err(r.malformed(format!(
                "variable '{name}' of shape {shape:?} and type {} should hold {} bytes, the \
                 file says {len}",
                dtype.name(),
                count.map_or("too many".to_string(), |c| c.to_string())
            )));
        }
        let offset = r.at;
        r.take(len, &what("data"))?;
        variables.insert(
            name,
            Variable {
                shape,
                dtype,
                offset,
                len,
            },
        );
    }
    let alias_count = r.u32(&|| "the alias count".into())? as usize;
    let mut aliases = Vec::with_capacity(alias_count.min(1024));
    for i in 0..alias_count {
        let alias = r.string(&|| format!("alias {i} of {alias_count}"))?;
        let target = r.string(&|| format!("the target of alias '{alias}'"))?;
        aliases.push((alias, target));
    }
    Ok((spec, variables, aliases))
}

impl TensorSource for Ct2Model {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn names(&self) -> Vec<String> {
        self.views.keys().cloned().collect()
    }

    fn meta(&self, name: &str) -> Option<TensorMeta> {
        let (view, v) = self.view(name).ok()?;
        let mut shape = v.shape.clone();
        if let Some((_, n)) = view.rows {
            shape[0] = n;
        }
        Some(TensorMeta {
            shape,
            dtype: v.dtype.name().to_string(),
            file: self.path.clone(),
        })
    }

    fn read_f32(&self, name: &str) -> Result<HostArray<f32>, WeightError> {
        let (view, v) = self.view(name)?;
        let bytes = self.bytes_of(v, view.rows);
        let data = match self.float(name, v)? {
            FloatLe::F32 => f32_le_to_f32(bytes),
            FloatLe::F16 => f16_le_to_f32(bytes),
            FloatLe::Bf16 => bf16_le_to_f32(bytes),
            FloatLe::F64 => f64_le_to_f32(bytes),
        };
        let mut shape = v.shape.clone();
        if let Some((_, n)) = view.rows {
            shape[0] = n;
        }
        HostArray::new(shape, data).ok_or_else(|| WeightError::BadTensor {
            name: name.to_string(),
            file: self.path.clone(),
            reason: "element count does not match the shape".into(),
        })
    }

    fn reads_ranges(&self) -> bool {
        true
    }

    fn read_f32_range(&self, name: &str, start: usize, out: &mut [f32]) -> Result<(), WeightError> {
        let (view, v) = self.view(name)?;
        let float = self.float(name, v)?;
        let bytes = self.bytes_of(v, view.rows);
        match float.read_range(bytes, start, out) {
            Some(_) => Ok(()),
            None => Err(WeightError::BadTensor {
                name: name.to_string(),
                file: self.path.clone(),
                reason: format!(
                    "elements {start}..{} lie outside its {} elements",
                    start.saturating_add(out.len()),
                    bytes.len() / float.width()
                ),
            }),
        }
    }

    fn read_i64(&self, name: &str) -> Result<HostArray<i64>, WeightError> {
        let (view, v) = self.view(name)?;
        if !matches!(v.dtype, Dtype::I8 | Dtype::I16 | Dtype::I32) {
            return Err(WeightError::WrongDtype {
                name: name.to_string(),
                file: self.path.clone(),
                dtype: v.dtype.name().to_string(),
                wanted: "i64",
            });
        }
        let data = convert_ints(self.bytes_of(v, view.rows), v.dtype.width());
        HostArray::new(v.shape.clone(), data).ok_or_else(|| WeightError::BadTensor {
            name: name.to_string(),
            file: self.path.clone(),
            reason: "element count does not match the shape".into(),
        })
    }
}
