//! PyTorch `torch.save` checkpoints holding a state_dict: the zip format (torch ≥ 1.6:
//! `<prefix>/data.pkl` plus one `<prefix>/data/<key>` entry per storage) and the legacy format
//! (pickles for the magic number, protocol and system info, the object, the storage keys, then
//! each storage as a little-endian u64 element count and its bytes).
//!
//! The pickle is read by a restricted unpickler: it builds only dicts, lists, tuples, scalars and
//! strings, and the only callables it admits are `collections.OrderedDict` and torch's tensor
//! rebuild functions over float32, float16 or int64 storages. Anything else (a pickled module,
//! another storage type, an unknown global) is refused with its name; nothing is executed.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::convert::{f16_le_to_f32, f32_le_to_f32, int_le_to_i64};
use super::{similar_names, HostArray, TensorMeta, TensorSource, WeightError};

const LEGACY_MAGIC: u128 = 0x1950a86a20f9469cfc6c;

/// The most elements one tensor may have (its dense copy is made on reading).
const MAX_ELEMENTS: usize = 1 << 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StorageType {
    F32,
    F16,
    I64,
}

impl StorageType {
    fn from_global(name: &str) -> Option<StorageType> {
        match name {
            "torch.FloatStorage" => Some(StorageType::F32),
            "torch.HalfStorage" => Some(StorageType::F16),
            "torch.LongStorage" => Some(StorageType::I64),
            _ => None,
        }
    }

    fn size(self) -> usize {
        match self {
            StorageType::F32 => 4,
            StorageType::F16 => 2,
            StorageType::I64 => 8,
        }
    }

    fn name(self) -> &'static str {
        match self {
            StorageType::F32 => "F32",
            StorageType::F16 => "F16",
            StorageType::I64 => "I64",
        }
    }
}

#[derive(Clone, Debug)]
struct TensorRef {
    storage: String,
    dtype: StorageType,
    offset: usize,
    shape: Vec<usize>,
    stride: Vec<usize>,
}

#[derive(Clone, Debug)]
enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float,
    Str(String),
    Tuple(Vec<Value>),
    List(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    Global(String),
    Storage { key: String, dtype: StorageType },
    Tensor(TensorRef),
}

/// A restricted pickle machine. `Err` carries a reason; the caller adds the file.
struct Unpickler<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
}

impl<'a> Unpickler<'a> {
    fn new(data: &'a [u8], pos: usize) -> Self {
        Unpickler {
            data,
            pos,
            stack: Vec::new(),
            marks: Vec::new(),
            memo: HashMap::new(),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        match end {
            Some(end) => {
                let s = &self.data[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(format!(
                "pickle truncated at byte {} (wanted {n} more bytes)",
                self.pos
            )),
        }
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn line(&mut self) -> Result<String, String> {
        let rest = &self.data[self.pos..];
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or("pickle truncated inside a GLOBAL name")?;
        let s = String::from_utf8_lossy(&rest[..n]).into_owned();
        self.pos += n + 1;
        Ok(s)
    }

    fn pop(&mut self) -> Result<Value, String> {
        self.stack
            .pop()
            .ok_or_else(|| "pickle stack underflow".into())
    }

    fn pop_mark(&mut self) -> Result<Vec<Value>, String> {
        let at = self.marks.pop().ok_or("pickle MARK missing")?;
        if at > self.stack.len() {
            return Err("pickle MARK beyond the stack".into());
        }
        Ok(self.stack.split_off(at))
    }

    fn top(&mut self) -> Result<&mut Value, String> {
        self.stack
            .last_mut()
            .ok_or_else(|| "pickle stack underflow".into())
    }

    fn string(&mut self, n: usize) -> Result<Value, String> {
        let b = self.take(n)?;
        Ok(Value::Str(String::from_utf8_lossy(b).into_owned()))
    }

    fn global(module: &str, name: &str) -> Result<Value, String> {
        let full = format!("{module}.{name}");
        let allowed = matches!(
            full.as_str(),
            "collections.OrderedDict"
                | "torch._utils._rebuild_tensor_v2"
                | "torch._utils._rebuild_tensor"
                | "torch._utils._rebuild_parameter"
        ) || StorageType::from_global(&full).is_some();
        if allowed {
            return Ok(Value::Global(full));
        }
        if full.ends_with("Storage") && module == "torch" {
            return Err(format!(
                "holds a {full} tensor; only float32, float16 (and int64 counters) are read"
            ));
        }
        if module.starts_with("torch.nn") || module.starts_with("__main__") {
            return Err(format!(
                "pickles the object {full}, not a state_dict: save model.state_dict() instead"
            ));
        }
        Err(format!(
            "refers to {full}, which a state_dict reader does not call"
        ))
    }

    fn persistent_load(pid: Value) -> Result<Value, String> {
        let Value::Tuple(items) = pid else {
            return Err("a persistent id that is not a tuple".into());
        };
        match items.as_slice() {
            [Value::Str(kind), Value::Global(ty), Value::Str(key), _location, _numel, ..]
                if kind == "storage" =>
            {
                let dtype = StorageType::from_global(ty)
                    .ok_or_else(|| format!("storage of type {ty} is not read"))?;
                Ok(Value::Storage {
                    key: key.clone(),
                    dtype,
                })
            }
            _ => Err("a persistent id that is not a torch storage".into()),
        }
    }

    fn ints(v: &Value, what: &str) -> Result<Vec<usize>, String> {
        match v {
            Value::Tuple(xs) | Value::List(xs) => xs
                .iter()
                .map(|x| match x {
                    Value::Int(i) if *i >= 0 => Ok(*i as usize),
                    _ => Err(format!(
                        "tensor {what} holds a non-integer or negative entry"
                    )),
                })
                .collect(),
            _ => Err(format!("tensor {what} is not a tuple")),
        }
    }

    fn reduce(func: Value, args: Value) -> Result<Value, String> {
        let Value::Global(name) = func else {
            return Err("REDUCE of something other than an admitted global".into());
        };
        let Value::Tuple(args) = args else {
            return Err(format!("{name} called with non-tuple arguments"));
        };
        match name.as_str() {
            "collections.OrderedDict" => Ok(Value::Dict(Vec::new())),
            "torch._utils._rebuild_tensor_v2" | "torch._utils._rebuild_tensor" => {
                let (
                    Some(Value::Storage { key, dtype }),
                    Some(Value::Int(offset)),
                    Some(size),
                    Some(stride),
                ) = (args.first(), args.get(1), args.get(2), args.get(3))
                else {
                    return Err(format!("{name} called with unexpected arguments"));
                };
                let shape = Self::ints(size, "size")?;
                let stride = Self::ints(stride, "stride")?;
                if shape.len() != stride.len() || *offset < 0 {
                    return Err(format!("{name}: size, stride and offset disagree"));
                }
                Ok(Value::Tensor(TensorRef {
                    storage: key.clone(),
                    dtype: *dtype,
                    offset: *offset as usize,
                    shape,
                    stride,
                }))
            }
            "torch._utils._rebuild_parameter" => match args.into_iter().next() {
                Some(t @ Value::Tensor(_)) => Ok(t),
                _ => Err("_rebuild_parameter of something other than a tensor".into()),
            },
            other => Err(format!("{other} cannot be called")),
        }
    }

    /// Runs to STOP; returns the object and the position after it.
    fn run(mut self) -> Result<(Value, usize), String> {
        loop {
            let op = self.u8()?;
            match op {
                0x80 => {
                    self.u8()?;
                }
                0x95 => {
                    self.take(8)?;
                }
                b'.' => {
                    let v = self.pop()?;
                    return Ok((v, self.pos));
                }
                b'(' => self.marks.push(self.stack.len()),
                b'}' => self.stack.push(Value::Dict(Vec::new())),
                b']' => self.stack.push(Value::List(Vec::new())),
                b')' => self.stack.push(Value::Tuple(Vec::new())),
                b'N' => self.stack.push(Value::None),
                0x88 => self.stack.push(Value::Bool(true)),
                0x89 => self.stack.push(Value::Bool(false)),
                b'K' => {
                    let v = self.u8()?;
                    self.stack.push(Value::Int(i64::from(v)));
                }
                b'M' => {
                    let b = self.take(2)?;
                    self.stack
                        .push(Value::Int(i64::from(u16::from_le_bytes([b[0], b[1]]))));
                }
                b'J' => {
                    let v = self.u32()? as i32;
                    self.stack.push(Value::Int(i64::from(v)));
                }
                0x8a => {
                    let n = self.u8()? as usize;
                    let b = self.take(n)?;
                    if n > 16 {
                        return Err(format!("a {n}-byte integer"));
                    }
                    let mut v: i128 = 0;
                    for (i, &byte) in b.iter().enumerate() {
                        v |= i128::from(byte) << (8 * i);
                    }
                    if n > 0 && n < 16 && b[n - 1] & 0x80 != 0 {
                        v -= 1i128 << (8 * n);
                    }
                    // Only the legacy magic number needs more than 64 bits.
                    self.stack.push(if v == LEGACY_MAGIC as i128 {
                        Value::Str("<torch legacy magic>".into())
                    } else {
                        Value::Int(i64::try_from(v).map_err(|_| "an integer beyond 64 bits")?)
                    });
                }
                b'G' => {
                    self.take(8)?;
                    self.stack.push(Value::Float);
                }
                b'X' => {
                    let n = self.u32()? as usize;
                    let v = self.string(n)?;
                    self.stack.push(v);
                }
                0x8c | b'U' => {
                    let n = self.u8()? as usize;
                    let v = self.string(n)?;
                    self.stack.push(v);
                }
                b'T' => {
                    let n = self.u32()? as usize;
                    let v = self.string(n)?;
                    self.stack.push(v);
                }
                0x8d => {
                    let b = self.take(8)?;
                    let n = u64::from_le_bytes(b.try_into().map_err(|_| "bad length")?);
                    let v = self.string(usize::try_from(n).map_err(|_| "string too long")?)?;
                    self.stack.push(v);
                }
                b'q' => {
                    let i = u32::from(self.u8()?);
                    let v = self.top()?.clone();
                    self.memo.insert(i, v);
                }
                b'r' => {
                    let i = self.u32()?;
                    let v = self.top()?.clone();
                    self.memo.insert(i, v);
                }
                0x94 => {
                    let i = self.memo.len() as u32;
                    let v = self.top()?.clone();
                    self.memo.insert(i, v);
                }
                b'h' | b'j' => {
                    let i = if op == b'h' {
                        u32::from(self.u8()?)
                    } else {
                        self.u32()?
                    };
                    let v = self
                        .memo
                        .get(&i)
                        .cloned()
                        .ok_or_else(|| format!("pickle memo entry {i} missing"))?;
                    self.stack.push(v);
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.stack.push(Self::global(&module, &name)?);
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    match (module, name) {
                        (Value::Str(m), Value::Str(n)) => self.stack.push(Self::global(&m, &n)?),
                        _ => return Err("STACK_GLOBAL of non-strings".into()),
                    }
                }
                b't' => {
                    let items = self.pop_mark()?;
                    self.stack.push(Value::Tuple(items));
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    if self.stack.len() < n {
                        return Err("pickle stack underflow".into());
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.stack.push(Value::Tuple(items));
                }
                b'R' => {
                    let args = self.pop()?;
                    let func = self.pop()?;
                    self.stack.push(Self::reduce(func, args)?);
                }
                b'Q' => {
                    let pid = self.pop()?;
                    self.stack.push(Self::persistent_load(pid)?);
                }
                b'b' => {
                    // BUILD: the state of an OrderedDict (its `_metadata`) is not needed.
                    self.pop()?;
                    if !matches!(self.top()?, Value::Dict(_)) {
                        return Err("BUILD of something other than a dict".into());
                    }
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    match self.top()? {
                        Value::Dict(d) => d.push((k, v)),
                        _ => return Err("SETITEM on a non-dict".into()),
                    }
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    if items.len() % 2 != 0 {
                        return Err("SETITEMS with an odd item count".into());
                    }
                    let Value::Dict(d) = self.top()? else {
                        return Err("SETITEMS on a non-dict".into());
                    };
                    let mut it = items.into_iter();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        d.push((k, v));
                    }
                }
                b'a' => {
                    let v = self.pop()?;
                    match self.top()? {
                        Value::List(l) => l.push(v),
                        _ => return Err("APPEND on a non-list".into()),
                    }
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    match self.top()? {
                        Value::List(l) => l.extend(items),
                        _ => return Err("APPENDS on a non-list".into()),
                    }
                }
                other => {
                    return Err(format!(
                        "pickle opcode 0x{other:02x} at byte {} is not read by this loader",
                        self.pos - 1
                    ))
                }
            }
        }
    }
}

/// The state_dict's tensors and the storages they view, by key.
type Parsed = (Vec<(String, TensorRef)>, HashMap<String, Vec<u8>>);

/// A `torch.save`d state_dict, all storages read into memory.
pub struct TorchCheckpoint {
    path: PathBuf,
    tensors: Vec<(String, TensorRef)>,
    storages: HashMap<String, Vec<u8>>,
}

/// The tensors of a (possibly wrapped) state_dict: the top-level dict, or its `state_dict`,
/// `model` or `model_state_dict` entry.
fn state_dict(top: Value) -> Result<Vec<(String, TensorRef)>, String> {
    let Value::Dict(items) = top else {
        return Err("the pickled object is not a dict (a state_dict)".into());
    };
    let tensors: Vec<(String, TensorRef)> = items
        .iter()
        .filter_map(|(k, v)| match (k, v) {
            (Value::Str(k), Value::Tensor(t)) => Some((k.clone(), t.clone())),
            _ => None,
        })
        .collect();
    if !tensors.is_empty() {
        return Ok(tensors);
    }
    for wrapper in ["state_dict", "model", "model_state_dict"] {
        if let Some((_, inner @ Value::Dict(_))) = items
            .iter()
            .find(|(k, _)| matches!(k, Value::Str(s) if s == wrapper))
        {
            return state_dict(inner.clone());
        }
    }
    Err("the pickled dict holds no tensors".into())
}

impl TorchCheckpoint {
    pub fn open(path: impl AsRef<Path>) -> Result<TorchCheckpoint, WeightError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| WeightError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let malformed = |reason: String| WeightError::Malformed {
            path: path.to_path_buf(),
            format: "PyTorch checkpoint",
            reason,
        };
        let (tensors, storages) = if bytes.starts_with(b"PK\x03\x04") {
            Self::read_zip(&bytes)
        } else {
            Self::read_legacy(&bytes)
        }
        .map_err(malformed)?;
        let ckpt = TorchCheckpoint {
            path: path.to_path_buf(),
            tensors,
            storages,
        };
        for (name, t) in &ckpt.tensors {
            ckpt.check(name, t)
                .map_err(|reason| WeightError::BadTensor {
                    name: name.clone(),
                    file: path.to_path_buf(),
                    reason,
                })?;
        }
        Ok(ckpt)
    }

    fn read_zip(bytes: &[u8]) -> Result<Parsed, String> {
        let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))
            .map_err(|e| format!("not a readable zip archive: {e}"))?;
        let pkl = zip
            .file_names()
            .find(|n| n.ends_with("data.pkl") && n.matches('/').count() <= 1)
            .map(str::to_string)
            .ok_or("the zip archive has no data.pkl")?;
        let prefix = &pkl[..pkl.len() - "data.pkl".len()];
        let read = |zip: &mut zip::ZipArchive<std::io::Cursor<&[u8]>>, name: &str| {
            let mut entry = zip
                .by_name(name)
                .map_err(|e| format!("entry {name}: {e}"))?;
            // the entry's size is the archive's claim: reserve no more than the archive holds
            let mut out = Vec::with_capacity((entry.size() as usize).min(bytes.len()));
            entry
                .read_to_end(&mut out)
                .map_err(|e| format!("entry {name}: {e}"))?;
            Ok::<_, String>(out)
        };
        if let Ok(order) = read(&mut zip, &format!("{prefix}byteorder")) {
            if order != b"little" {
                return Err("the checkpoint is big-endian".into());
            }
        }
        let pickle = read(&mut zip, &pkl)?;
        let (top, _) = Unpickler::new(&pickle, 0).run()?;
        let tensors = state_dict(top)?;
        let mut storages = HashMap::new();
        for (_, t) in &tensors {
            if !storages.contains_key(&t.storage) {
                let data = read(&mut zip, &format!("{prefix}data/{}", t.storage))?;
                storages.insert(t.storage.clone(), data);
            }
        }
        Ok((tensors, storages))
    }

    fn read_legacy(bytes: &[u8]) -> Result<Parsed, String> {
        let not_torch = || "neither a zip archive nor a legacy torch.save file".to_string();
        let (magic, pos) = Unpickler::new(bytes, 0).run().map_err(|_| not_torch())?;
        if !matches!(magic, Value::Str(ref s) if s == "<torch legacy magic>") {
            return Err(not_torch());
        }
        let (_protocol, pos) = Unpickler::new(bytes, pos).run()?;
        let (sys_info, pos) = Unpickler::new(bytes, pos).run()?;
        if let Value::Dict(items) = &sys_info {
            let little = items
                .iter()
                .find(|(k, _)| matches!(k, Value::Str(s) if s == "little_endian"));
            if let Some((_, Value::Bool(false))) = little {
                return Err("the checkpoint is big-endian".into());
            }
        }
        let (top, pos) = Unpickler::new(bytes, pos).run()?;
        let (keys, mut pos) = Unpickler::new(bytes, pos).run()?;
        let Value::List(keys) = keys else {
            return Err("the storage key list is not a list".into());
        };
        let tensors = state_dict(top)?;
        let dtype_of: HashMap<&str, StorageType> = tensors
            .iter()
            .map(|(_, t)| (t.storage.as_str(), t.dtype))
            .collect();
        let mut storages = HashMap::new();
        for key in keys {
            let Value::Str(key) = key else {
                return Err("a storage key is not a string".into());
            };
            let count = bytes
                .get(pos..pos + 8)
                .ok_or_else(|| format!("truncated before storage {key}"))?;
            let count = u64::from_le_bytes(count.try_into().map_err(|_| "bad count")?);
            let size = dtype_of.get(key.as_str()).map_or(4, |d| d.size());
            let len = usize::try_from(count)
                .ok()
                .and_then(|c| c.checked_mul(size))
                .ok_or_else(|| format!("storage {key} claims {count} elements"))?;
            let data = bytes.get(pos + 8..pos + 8 + len).ok_or_else(|| {
                format!(
                    "truncated: storage {key} needs {len} bytes at offset {}, the file has {}",
                    pos + 8,
                    bytes.len()
                )
            })?;
            storages.insert(key, data.to_vec());
            pos += 8 + len;
        }
        Ok((tensors, storages))
    }

    /// Every element the tensor's strides address lies inside its storage.
    fn check(&self, name: &str, t: &TensorRef) -> Result<(), String> {
        let storage = self
            .storages
            .get(&t.storage)
            .ok_or_else(|| format!("its storage {} is missing from the file", t.storage))?;
        let elements = storage.len() / t.dtype.size();
        if t.shape.contains(&0) {
            return Ok(());
        }
        // Zero strides can address few storage elements with a vast shape; the copy is dense.
        let count = t
            .shape
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
            .filter(|&c| c <= MAX_ELEMENTS);
        if count.is_none() {
            return Err(format!(
                "{name}: shape {:?} holds more than {MAX_ELEMENTS} elements",
                t.shape
            ));
        }
        let last = t
            .shape
            .iter()
            .zip(&t.stride)
            .try_fold(t.offset, |acc, (&d, &s)| {
                acc.checked_add((d - 1).checked_mul(s)?)
            });
        match last {
            Some(last) if last < elements => Ok(()),
            _ => Err(format!(
                "{name}: shape {:?} with strides {:?} at offset {} reaches beyond its {elements}-element storage",
                t.shape, t.stride, t.offset
            )),
        }
    }

    fn find(&self, name: &str) -> Result<&TensorRef, WeightError> {
        self.tensors
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
            .ok_or_else(|| WeightError::MissingTensor {
                name: name.to_string(),
                source_desc: self.describe(),
                similar: similar_names(name, &self.names(), 3),
            })
    }

    /// The tensor's elements in row-major order, as raw little-endian bytes.
    fn contiguous_bytes(&self, t: &TensorRef) -> Vec<u8> {
        let size = t.dtype.size();
        let storage = &self.storages[&t.storage];
        let count: usize = t.shape.iter().product();
        let mut out = Vec::with_capacity(count * size);
        let mut index = vec![0usize; t.shape.len()];
        for _ in 0..count {
            let at = t.offset
                + index
                    .iter()
                    .zip(&t.stride)
                    .map(|(i, s)| i * s)
                    .sum::<usize>();
            out.extend_from_slice(&storage[at * size..(at + 1) * size]);
            for d in (0..index.len()).rev() {
                index[d] += 1;
                if index[d] < t.shape[d] {
                    break;
                }
                index[d] = 0;
            }
        }
        out
    }
}

impl TensorSource for TorchCheckpoint {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn names(&self) -> Vec<String> {
        self.tensors.iter().map(|(n, _)| n.clone()).collect()
    }

    fn meta(&self, name: &str) -> Option<TensorMeta> {
        let t = self.find(name).ok()?;
        Some(TensorMeta {
            shape: t.shape.clone(),
            dtype: t.dtype.name().to_string(),
            file: self.path.clone(),
        })
    }

    fn read_f32(&self, name: &str) -> Result<HostArray<f32>, WeightError> {
        let t = self.find(name)?;
        let bytes = self.contiguous_bytes(t);
        let data = match t.dtype {
            StorageType::F32 => f32_le_to_f32(&bytes),
            StorageType::F16 => f16_le_to_f32(&bytes),
            StorageType::I64 => {
                return Err(WeightError::WrongDtype {
                    name: name.to_string(),
                    file: self.path.clone(),
                    dtype: "I64".into(),
                    wanted: "f32",
                })
            }
        };
        HostArray::new(t.shape.clone(), data).ok_or_else(|| WeightError::BadTensor {
            name: name.to_string(),
            file: self.path.clone(),
            reason: "element count disagrees with the shape".into(),
        })
    }

    fn read_i64(&self, name: &str) -> Result<HostArray<i64>, WeightError> {
        let t = self.find(name)?;
        if t.dtype != StorageType::I64 {
            return Err(WeightError::WrongDtype {
                name: name.to_string(),
                file: self.path.clone(),
                dtype: t.dtype.name().into(),
                wanted: "i64",
            });
        }
        let data = int_le_to_i64(&self.contiguous_bytes(t), 8, true);
        HostArray::new(t.shape.clone(), data).ok_or_else(|| WeightError::BadTensor {
            name: name.to_string(),
            file: self.path.clone(),
            reason: "element count disagrees with the shape".into(),
        })
    }
}
