//! The MIL program model: what a `model.mil` file says, independent of how it is printed.
//!
//! Invariants the rest of the workspace relies on:
//! - every value a function uses is a function input or the output of an earlier operation;
//! - a rank-0 [`TensorType`] is a scalar (`fp16`, `int32`, ... in text);
//! - inline literal data is stored widened (`f64` for floats, `i64` for integers) and must be exactly
//!   representable in the declared dtype.

use std::fmt;

/// Element types MIL knows (coremltools `types` module names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Fp16,
    Fp32,
    Fp64,
    Bf16,
    Int4,
    Int8,
    Int16,
    Int32,
    Int64,
    Uint1,
    Uint2,
    Uint3,
    Uint4,
    Uint6,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Bool,
    String,
}

impl DType {
    pub const ALL: [DType; 20] = [
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
        DType::String,
    ];

    /// The spelling used in MIL text (`fp16`, `int32`, `bool`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::Fp16 => "fp16",
            DType::Fp32 => "fp32",
            DType::Fp64 => "fp64",
            DType::Bf16 => "bf16",
            DType::Int4 => "int4",
            DType::Int8 => "int8",
            DType::Int16 => "int16",
            DType::Int32 => "int32",
            DType::Int64 => "int64",
            DType::Uint1 => "uint1",
            DType::Uint2 => "uint2",
            DType::Uint3 => "uint3",
            DType::Uint4 => "uint4",
            DType::Uint6 => "uint6",
            DType::Uint8 => "uint8",
            DType::Uint16 => "uint16",
            DType::Uint32 => "uint32",
            DType::Uint64 => "uint64",
            DType::Bool => "bool",
            DType::String => "string",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        DType::ALL.iter().copied().find(|d| d.name() == name)
    }

    /// Storage bits per element in a blob or packed buffer; `None` for strings.
    pub fn bits(self) -> Option<usize> {
        Some(match self {
            DType::Fp16 | DType::Bf16 | DType::Int16 | DType::Uint16 => 16,
            DType::Fp32 | DType::Int32 | DType::Uint32 => 32,
            DType::Fp64 | DType::Int64 | DType::Uint64 => 64,
            DType::Int8 | DType::Uint8 | DType::Bool => 8,
            DType::Int4 | DType::Uint4 => 4,
            DType::Uint1 => 1,
            DType::Uint2 => 2,
            DType::Uint3 => 3,
            DType::Uint6 => 6,
            DType::String => return None,
        })
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::Fp16 | DType::Fp32 | DType::Fp64 | DType::Bf16)
    }

    pub fn is_int(self) -> bool {
        !self.is_float() && !matches!(self, DType::Bool | DType::String)
    }

    pub fn is_signed_int(self) -> bool {
        matches!(
            self,
            DType::Int4 | DType::Int8 | DType::Int16 | DType::Int32 | DType::Int64
        )
    }

    /// Inclusive integer range of an integer dtype.
    pub fn int_range(self) -> Option<(i128, i128)> {
        let bits = self.bits()? as u32;
        if !self.is_int() {
            return None;
        }
        if self.is_signed_int() {
            Some((-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1))
        } else {
            Some((0, (1i128 << bits) - 1))
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One axis of a tensor type: a fixed size or a symbolic (flexible) size such as `is0`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    Fixed(usize),
    Symbol(String),
}

impl From<usize> for Dim {
    fn from(n: usize) -> Dim {
        Dim::Fixed(n)
    }
}

/// `tensor<dtype, [d0, d1, ...]>`; rank 0 is a scalar.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Vec<Dim>,
}

impl TensorType {
    pub fn new(dtype: DType, shape: &[usize]) -> TensorType {
        TensorType {
            dtype,
            shape: shape.iter().map(|&d| Dim::Fixed(d)).collect(),
        }
    }

    pub fn scalar(dtype: DType) -> TensorType {
        TensorType {
            dtype,
            shape: Vec::new(),
        }
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn is_scalar(&self) -> bool {
        self.shape.is_empty()
    }

    /// The shape when every axis is fixed.
    pub fn static_shape(&self) -> Option<Vec<usize>> {
        self.shape
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => Some(*n),
                Dim::Symbol(_) => None,
            })
            .collect()
    }

    /// Element count when every axis is fixed (1 for a scalar); `None` on overflow or symbols.
    pub fn num_elements(&self) -> Option<usize> {
        self.static_shape()?
            .iter()
            .try_fold(1usize, |acc, &d| acc.checked_mul(d))
    }

    /// Bytes of a densely packed payload of this type (sub-byte types packed, rounded up).
    pub fn packed_bytes(&self) -> Option<usize> {
        let bits = self.dtype.bits()?;
        let n = self.num_elements()?;
        Some(n.checked_mul(bits)?.div_ceil(8))
    }
}

/// The type of any value: tensors (scalars included), tuples of values, string-keyed dicts.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    Tensor(TensorType),
    Tuple(Vec<ValueType>),
    Dict { key: DType, value: DType },
}

impl ValueType {
    pub fn tensor(&self) -> Option<&TensorType> {
        match self {
            ValueType::Tensor(t) => Some(t),
            _ => None,
        }
    }
}

impl From<TensorType> for ValueType {
    fn from(t: TensorType) -> ValueType {
        ValueType::Tensor(t)
    }
}

/// Element data of an inline tensor literal, widened; `len()` equals the type's element count.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    Float(Vec<f64>),
    Int(Vec<i64>),
    Bool(Vec<bool>),
    Str(Vec<String>),
}

impl TensorData {
    pub fn len(&self) -> usize {
        match self {
            TensorData::Float(v) => v.len(),
            TensorData::Int(v) => v.len(),
            TensorData::Bool(v) => v.len(),
            TensorData::Str(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A constant written in the program text.
#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    /// Inline data: `int32(1)`, `fp16(0x1p-1)`, `tensor<int32, [2]>([1, 1])`, `string("x")`.
    Tensor { ty: TensorType, data: TensorData },
    /// `tensor<fp16, [N, K]>(BLOBFILE(path = string("@model_path/weights/weight.bin"), offset = uint64(64)))`;
    /// `offset` is the byte offset of the blob's descriptor in that file.
    Blob {
        ty: TensorType,
        path: String,
        offset: u64,
    },
    /// `(a, b)` of literals.
    Tuple(Vec<Literal>),
    /// `dict<string, string>({{"k", "v"}, ...})`, entries in source order.
    Dict {
        key: DType,
        value: DType,
        entries: Vec<(Literal, Literal)>,
    },
}

impl Literal {
    pub fn string(s: impl Into<String>) -> Literal {
        Literal::Tensor {
            ty: TensorType::scalar(DType::String),
            data: TensorData::Str(vec![s.into()]),
        }
    }

    pub fn bool(b: bool) -> Literal {
        Literal::Tensor {
            ty: TensorType::scalar(DType::Bool),
            data: TensorData::Bool(vec![b]),
        }
    }

    pub fn int(dtype: DType, v: i64) -> Literal {
        Literal::Tensor {
            ty: TensorType::scalar(dtype),
            data: TensorData::Int(vec![v]),
        }
    }

    pub fn float(dtype: DType, v: f64) -> Literal {
        Literal::Tensor {
            ty: TensorType::scalar(dtype),
            data: TensorData::Float(vec![v]),
        }
    }

    pub fn int_tensor(dtype: DType, shape: &[usize], v: Vec<i64>) -> Literal {
        Literal::Tensor {
            ty: TensorType::new(dtype, shape),
            data: TensorData::Int(v),
        }
    }

    pub fn float_tensor(dtype: DType, shape: &[usize], v: Vec<f64>) -> Literal {
        Literal::Tensor {
            ty: TensorType::new(dtype, shape),
            data: TensorData::Float(v),
        }
    }

    pub fn bool_tensor(shape: &[usize], v: Vec<bool>) -> Literal {
        Literal::Tensor {
            ty: TensorType::new(DType::Bool, shape),
            data: TensorData::Bool(v),
        }
    }

    /// The value type this literal has.
    pub fn value_type(&self) -> ValueType {
        match self {
            Literal::Tensor { ty, .. } | Literal::Blob { ty, .. } => ValueType::Tensor(ty.clone()),
            Literal::Tuple(items) => {
                ValueType::Tuple(items.iter().map(|l| l.value_type()).collect())
            }
            Literal::Dict { key, value, .. } => ValueType::Dict {
                key: *key,
                value: *value,
            },
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Literal::Tensor {
                data: TensorData::Str(v),
                ty,
            } if ty.is_scalar() => v.first().map(|s| s.as_str()),
            _ => None,
        }
    }
}

/// What an operation argument binds to.
#[derive(Clone, Debug, PartialEq)]
pub enum Argument {
    /// A named value in scope: `x = x`.
    Name(String),
    /// An inline constant: `keep_dims = bool(true)`.
    Literal(Literal),
    /// A list of arguments: `values = (a, b, c)`.
    List(Vec<Argument>),
}

impl Argument {
    pub fn name(name: impl Into<String>) -> Argument {
        Argument::Name(name.into())
    }

    /// Every value name this argument refers to.
    pub fn referenced_names(&self) -> Vec<&str> {
        match self {
            Argument::Name(n) => vec![n.as_str()],
            Argument::Literal(_) => Vec::new(),
            Argument::List(items) => items.iter().flat_map(|a| a.referenced_names()).collect(),
        }
    }
}

/// A name with its type: function inputs and operation outputs.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedValue {
    pub name: String,
    pub ty: ValueType,
}

impl NamedValue {
    pub fn new(name: impl Into<String>, ty: impl Into<ValueType>) -> NamedValue {
        NamedValue {
            name: name.into(),
            ty: ty.into(),
        }
    }
}

/// `outputs = op_type(inputs)[attributes];`
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    pub op_type: String,
    /// Named arguments in source order (the printer keeps this order).
    pub inputs: Vec<(String, Argument)>,
    pub outputs: Vec<NamedValue>,
    /// `[name = string("..."), val = ...]`: `name` is the op's name, `val` a const's value.
    pub attributes: Vec<(String, Literal)>,
    /// Nested blocks of control-flow ops (`cond`, `while_loop`); empty for everything we emit.
    pub blocks: Vec<Block>,
}

impl Operation {
    pub fn new(op_type: impl Into<String>) -> Operation {
        Operation {
            op_type: op_type.into(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            attributes: Vec::new(),
            blocks: Vec::new(),
        }
    }

    pub fn input(&self, name: &str) -> Option<&Argument> {
        self.inputs.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    pub fn attribute(&self, name: &str) -> Option<&Literal> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, l)| l)
    }

    /// The `name` attribute, if any.
    pub fn name(&self) -> Option<&str> {
        self.attribute("name").and_then(|l| l.as_str())
    }

    pub fn with_input(mut self, name: impl Into<String>, arg: Argument) -> Operation {
        self.inputs.push((name.into(), arg));
        self
    }

    pub fn with_output(mut self, name: impl Into<String>, ty: impl Into<ValueType>) -> Operation {
        self.outputs.push(NamedValue::new(name, ty));
        self
    }

    pub fn with_attribute(mut self, name: impl Into<String>, lit: Literal) -> Operation {
        self.attributes.push((name.into(), lit));
        self
    }
}

/// A sequence of operations with named outputs (a function body or a nested block).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Block {
    /// Block inputs (used by nested blocks; function inputs live on [`Function`]).
    pub inputs: Vec<NamedValue>,
    pub operations: Vec<Operation>,
    pub outputs: Vec<String>,
}

/// The type of a structured constant such as a function's `FlexibleShapeInformation`:
/// `tuple<string, dict<string, tensor<int32, [?]>>>`, `list<tensor<int32, [2]>, ?>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CompoundType {
    /// A tensor or (rank 0) scalar type.
    Tensor(TensorType),
    Tuple(Vec<CompoundType>),
    Dict(Box<CompoundType>, Box<CompoundType>),
    /// `list<element, length>`; `None` is a `?` length.
    List(Box<CompoundType>, Option<usize>),
}

/// The untyped value syntax inside a structured constant: `(("a", {{"k", [1, 2]}}), ...)`.
#[derive(Clone, Debug, PartialEq)]
pub enum CompoundValue {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    /// `[a, b]`: a tensor's elements or a list's items.
    List(Vec<CompoundValue>),
    /// `(a, b)`
    Tuple(Vec<CompoundValue>),
    /// `{{k, v}, ...}`, entries in source order.
    Dict(Vec<(CompoundValue, CompoundValue)>),
}

/// `type(value)` for a structured constant; used by function attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct CompoundLiteral {
    pub ty: CompoundType,
    pub value: CompoundValue,
}

/// `func name<opset>(inputs) [attributes] { body } -> (outputs);`
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    pub name: String,
    /// `ios15` … `ios18`, or `CoreML5` … `CoreML8` as written.
    pub opset: String,
    pub inputs: Vec<NamedValue>,
    /// Function attributes such as Core ML's `FlexibleShapeInformation`, in source order.
    pub attributes: Vec<(String, CompoundLiteral)>,
    pub body: Block,
}

impl Function {
    /// An empty function with no inputs, attributes or operations.
    pub fn new(name: impl Into<String>, opset: impl Into<String>) -> Function {
        Function {
            name: name.into(),
            opset: opset.into(),
            inputs: Vec::new(),
            attributes: Vec::new(),
            body: Block::default(),
        }
    }

    /// Type of a named value in this function (inputs and op outputs), by linear search.
    pub fn value_type(&self, name: &str) -> Option<&ValueType> {
        self.inputs
            .iter()
            .chain(self.body.operations.iter().flat_map(|op| op.outputs.iter()))
            .find(|v| v.name == name)
            .map(|v| &v.ty)
    }
}

/// `program(version) [attributes] { functions }`
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    /// As written: `1.0`, `1.3`.
    pub version: String,
    /// Program attributes, chiefly `buildInfo = dict<string, string>(...)`.
    pub attributes: Vec<(String, Literal)>,
    pub functions: Vec<Function>,
}

impl Program {
    pub fn function(&self, name: &str) -> Option<&Function> {
        self.functions.iter().find(|f| f.name == name)
    }

    pub fn function_mut(&mut self, name: &str) -> Option<&mut Function> {
        self.functions.iter_mut().find(|f| f.name == name)
    }

    /// Every `(path, offset, type)` a program references through BLOBFILE literals.
    pub fn blob_references(&self) -> Vec<(&str, u64, &TensorType)> {
        fn visit<'a>(lit: &'a Literal, out: &mut Vec<(&'a str, u64, &'a TensorType)>) {
            match lit {
                Literal::Blob { ty, path, offset } => out.push((path.as_str(), *offset, ty)),
                Literal::Tuple(items) => items.iter().for_each(|l| visit(l, out)),
                Literal::Dict { entries, .. } => entries.iter().for_each(|(k, v)| {
                    visit(k, out);
                    visit(v, out);
                }),
                Literal::Tensor { .. } => {}
            }
        }
        fn visit_arg<'a>(arg: &'a Argument, out: &mut Vec<(&'a str, u64, &'a TensorType)>) {
            match arg {
                Argument::Literal(l) => visit(l, out),
                Argument::List(items) => items.iter().for_each(|a| visit_arg(a, out)),
                Argument::Name(_) => {}
            }
        }
        fn visit_block<'a>(block: &'a Block, out: &mut Vec<(&'a str, u64, &'a TensorType)>) {
            for op in &block.operations {
                op.attributes.iter().for_each(|(_, l)| visit(l, out));
                op.inputs.iter().for_each(|(_, a)| visit_arg(a, out));
                op.blocks.iter().for_each(|b| visit_block(b, out));
            }
        }
        let mut out = Vec::new();
        for f in &self.functions {
            visit_block(&f.body, &mut out);
        }
        out
    }
}
