//! Emission: canonical graph nodes to MIL operations, one function `main`, weights into a blob.
//! The ops themselves are emitted by family, in the files below (the CPU engine's `ops/` families).
//! Argument names and order follow coremltools' op definitions (iOS15–iOS18 opsets).

mod attention;
mod conv;
mod elementwise;
mod gather;
mod layout;
mod linalg;
mod reduce;

use super::consts::{
    deferred_reader, encode_chunks, float_width, kept_as_f16, ConstTable, Interned, BLOB_PATH,
};
use super::{LowerError, PortKind, PortSpec, Target};
use crate::graph::{
    power_of_two, BlockQuantized, DType, HalfStorage, HostArray, HostData, NodeId, Op, OpFamily,
    QuantFormat, Tensor,
};
use aneforge_mil as mil;
use mil::{Argument, Literal, Operation, TensorType};
use std::collections::{HashMap, HashSet};

pub(crate) struct Emitter<'t> {
    target: &'t Target,
    float: mil::DType,
    names: HashMap<NodeId, String>,
    used: HashSet<String>,
    counter: usize,
    pub ops: Vec<Operation>,
    pub inputs: Vec<mil::NamedValue>,
    pub ports: Vec<PortSpec>,
    pub consts: ConstTable,
}

impl<'t> Emitter<'t> {
    pub fn new(
        target: &'t Target,
        reserved: impl IntoIterator<Item = String>,
        consts: ConstTable,
    ) -> Emitter<'t> {
        let float = target.float_dtype();
        Emitter {
            target,
            float,
            names: HashMap::new(),
            used: reserved.into_iter().collect(),
            counter: 0,
            ops: Vec::new(),
            inputs: Vec::new(),
            ports: Vec::new(),
            consts,
        }
    }

    pub fn mil_dtype(&self, d: DType) -> mil::DType {
        match d {
            DType::F32 => self.float,
            DType::I32 => mil::DType::Int32,
            DType::Bool => mil::DType::Bool,
            DType::F16 => mil::DType::Fp16,
            DType::I8 => mil::DType::Int8,
        }
    }

    fn ty(&self, t: &Tensor) -> TensorType {
        TensorType::new(self.mil_dtype(t.dtype()), t.shape())
    }

    /// Reserves `name` as the value name of `node` (outputs and inputs keep their names).
    pub fn assign(&mut self, node: &Tensor, name: &str) {
        self.names.insert(node.id(), name.to_string());
    }

    pub fn name_of(&self, node: &Tensor) -> Option<&str> {
        self.names.get(&node.id()).map(|s| s.as_str())
    }

    fn fresh(&mut self, hint: &str) -> String {
        loop {
            let name = format!("{hint}_{}", self.counter);
            self.counter += 1;
            if self.used.insert(name.clone()) {
                return name;
            }
        }
    }

    fn arg(&self, t: &Tensor) -> Argument {
        Argument::Name(self.names.get(&t.id()).cloned().unwrap_or_default())
    }

    /// Pushes `op_type(inputs)` producing `node`'s value.
    fn push(&mut self, node: &Tensor, op_type: &str, inputs: Vec<(&str, Argument)>) {
        let name = match self.names.get(&node.id()) {
            Some(n) => n.clone(),
            None => {
                let n = self.fresh(op_type);
                self.names.insert(node.id(), n.clone());
                n
            }
        };
        let ty = self.ty(node);
        self.push_value(&name, ty, op_type, inputs);
    }

    fn push_value(
        &mut self,
        name: &str,
        ty: TensorType,
        op_type: &str,
        inputs: Vec<(&str, Argument)>,
    ) {
        let mut op = Operation::new(op_type);
        for (k, v) in inputs {
            op = op.with_input(k, v);
        }
        let op = op
            .with_output(name, ty)
            .with_attribute("name", Literal::string(name));
        self.ops.push(op);
    }

    /// The output `name` for `node` when `node`'s own value cannot carry that name: an identity
    /// (leaves, repeated outputs) or, for bool values, a cast to the port's float type.
    pub fn output_alias(&mut self, node: &Tensor, name: &str) {
        let x = self.arg(node);
        let ty = TensorType::new(self.port_dtype(node.dtype()), node.shape());
        if node.dtype() == DType::Bool {
            let args = vec![("x", x), ("dtype", string(ty.dtype.name()))];
            self.push_value(name, ty, "cast", args);
        } else {
            self.push_value(name, ty, "identity", vec![("x", x)]);
        }
    }

    fn float_lit(&self, v: f32) -> Argument {
        Argument::Literal(Literal::float(self.float, self.consts.float_value(v)))
    }

    fn unsupported(&self, node: &Tensor, reason: &str) -> LowerError {
        LowerError::Unsupported {
            target: self.target.to_string(),
            op: node.op().name(),
            shapes: node.srcs().iter().map(|s| s.shape().to_vec()).collect(),
            reason: reason.to_string(),
        }
    }

    /// Emits one canonical node.
    pub fn emit(&mut self, node: &Tensor) -> Result<(), LowerError> {
        match node.op() {
            Op::Input { name } => self.leaf_input(node, name, PortKind::Input),
            Op::Parameter { name, init } => {
                self.leaf_input(node, name, PortKind::Parameter(Some(init.clone())))
            }
            Op::Constant(value) => self.constant(node, value)?,
            op => match op.family() {
                OpFamily::Elementwise => self.elementwise(node)?,
                OpFamily::Linalg => self.linalg(node)?,
                OpFamily::Conv => self.conv(node)?,
                OpFamily::Reduce => self.reduce(node)?,
                OpFamily::Layout => self.layout(node)?,
                OpFamily::Gather => self.gather(node)?,
                OpFamily::Attention => self.attention(node)?,
                OpFamily::Leaf => return Err(self.unsupported(node, "an unknown leaf")),
            },
        }
        Ok(())
    }

    /// The MIL dtype of a port carrying graph dtype `d`: Core ML features are fp32, fp16 or
    /// int32 tensors, so bool ports travel as the program's float type (nonzero is true).
    pub fn port_dtype(&self, d: DType) -> mil::DType {
        match d {
            DType::Bool => self.float,
            d => self.mil_dtype(d),
        }
    }

    fn leaf_input(&mut self, node: &Tensor, name: &str, kind: PortKind) {
        let port_ty = TensorType::new(self.port_dtype(node.dtype()), node.shape());
        self.inputs
            .push(mil::NamedValue::new(name, port_ty.clone()));
        self.ports.push(PortSpec {
            name: name.to_string(),
            dtype: node.dtype(),
            mil_dtype: port_ty.dtype,
            shape: node.shape().to_vec(),
            kind,
        });
        if node.dtype() == DType::Bool {
            let value = self.fresh(&format!("{name}_bool"));
            let args = vec![("x", Argument::name(name)), ("dtype", string("bool"))];
            self.push_value(&value, self.ty(node), "cast", args);
            self.names.insert(node.id(), value);
        } else {
            self.names.insert(node.id(), name.to_string());
        }
    }

    fn constant(&mut self, node: &Tensor, value: &HostArray) -> Result<(), LowerError> {
        match value.data() {
            HostData::BlockQuantized(q) => return self.block_quantized(node, q),
            HostData::Deferred(d) => {
                if let Some(half) = kept_as_f16(value, self.float) {
                    return self.half_matrix(node, value.shape(), d.as_ref(), half);
                }
            }
            _ => {}
        }
        let (key, literal) = match self.consts.intern(value)? {
            Interned::Existing(name) => {
                self.names.insert(node.id(), name);
                return Ok(());
            }
            Interned::New { key, literal } => (key, literal),
        };
        let name = self.fresh("const");
        self.consts.remember(key, &name);
        self.names.insert(node.id(), name.clone());
        let op = Operation::new("const")
            .with_output(&name, literal.value_type())
            .with_attribute("name", Literal::string(&name))
            .with_attribute("val", literal);
        self.ops.push(op);
        Ok(())
    }

    /// An fp32 program's matrix whose values fp16 holds exactly: `constexpr_cast` of an fp16 blob
    /// entry ([`HalfStorage::Exact`]), or `constexpr_blockwise_shift_scale` of one with a
    /// power-of-two scale per row ([`HalfStorage::Scaled`]); half the bytes of the f32 entry and
    /// the same values.
    fn half_matrix(
        &mut self,
        node: &Tensor,
        shape: &[usize],
        d: &dyn crate::graph::DeferredF32,
        half: HalfStorage,
    ) -> Result<(), LowerError> {
        let len = d.len();
        let source = d as *const dyn crate::graph::DeferredF32 as *const u8 as usize;
        // keyed like a block-quantized constant by addresses; no quantized key has 0 scales
        let key = [source, len, 0];
        if let Some(name) = self.consts.quant_name(&key) {
            self.names.insert(node.id(), name.to_string());
            return Ok(());
        }
        let cols = shape[1];
        let offset = self
            .consts
            .blob_entry(mil::DType::Fp16, len, source, 2 * len, |out| {
                let mut read = deferred_reader(d);
                encode_chunks(mil::DType::Fp16, out, |start, v| {
                    read(start, v)?;
                    if let HalfStorage::Scaled(e) = &half {
                        for (i, x) in v.iter_mut().enumerate() {
                            *x *= power_of_two(-e[(start + i) / cols]);
                        }
                    }
                    Ok(())
                })
            })?;
        let blob = |dtype: mil::DType, shape: &[usize], offset: u64| {
            Argument::Literal(Literal::Blob {
                ty: TensorType::new(dtype, shape),
                path: BLOB_PATH.to_string(),
                offset,
            })
        };
        let data = blob(mil::DType::Fp16, shape, offset);
        let name = self.fresh("half");
        self.consts.remember_quant(key, &name);
        self.names.insert(node.id(), name.clone());
        let ty = TensorType::new(mil::DType::Fp32, shape);
        match half {
            HalfStorage::Exact => self.push_value(
                &name,
                ty,
                "constexpr_cast",
                vec![("source_val", data), ("output_dtype", string("fp32"))],
            ),
            HalfStorage::Scaled(e) => {
                let scales: Vec<u8> = e
                    .iter()
                    .flat_map(|&e| power_of_two(e).to_le_bytes())
                    .collect();
                // the source's address with the row count and f32 type names the scales (its data
                // entry is fp16 and counts every value)
                let scale_offset = self.consts.blob_entry(
                    mil::DType::Fp32,
                    e.len(),
                    source,
                    scales.len(),
                    |out| {
                        out.copy_from_slice(&scales);
                        Ok(())
                    },
                )?;
                let scale = blob(mil::DType::Fp32, &[e.len(), 1], scale_offset);
                self.push_value(
                    &name,
                    ty,
                    "constexpr_blockwise_shift_scale",
                    vec![("data", data), ("scale", scale)],
                );
            }
        }
        Ok(())
    }

    /// `constexpr_blockwise_shift_scale(data, scale, offset)` over blob entries: the quantized
    /// integers as stored, scales and offsets in the program's float type.
    fn block_quantized(&mut self, node: &Tensor, q: &BlockQuantized) -> Result<(), LowerError> {
        let [scale_key, offset_key] = q.params_keys();
        let key = [q.data_key(), scale_key, offset_key];
        if let Some(name) = self.consts.quant_name(&key) {
            self.names.insert(node.id(), name.to_string());
            return Ok(());
        }
        let data_dtype = match q.format() {
            QuantFormat::U4 => mil::DType::Uint4,
            QuantFormat::I4 => mil::DType::Int4,
            QuantFormat::U8 => mil::DType::Uint8,
            QuantFormat::I8 => mil::DType::Int8,
        };
        let shape = [q.rows(), q.cols()];
        let pshape = [q.rows(), q.blocks_per_row()];
        // deferred integers, scales and offsets are read here, once per program, straight into
        // the blob
        let data = self.consts.blob_entry(
            data_dtype,
            q.rows() * q.cols(),
            q.data_key(),
            q.rows() * q.row_bytes(),
            |out| q.read_rows(0, out).map_err(LowerError::ConstantData),
        )?;
        let float = self.float;
        let width = float_width(float);
        // the parameters read a chunk at a time and encoded in the program's float type
        let encode = |offsets: bool, out: &mut [u8]| {
            encode_chunks(float, out, |start, v| {
                q.read_params(offsets, start, v)
                    .map_err(LowerError::ConstantData)
            })
        };
        let blob = |ty: TensorType, offset: u64| {
            Argument::Literal(Literal::Blob {
                ty,
                path: BLOB_PATH.to_string(),
                offset,
            })
        };
        let blocks = q.rows() * q.blocks_per_row();
        let scale = self
            .consts
            .blob_entry(float, blocks, scale_key, blocks * width, |out| {
                encode(false, out)
            })?;
        let offset = if q.has_offset() {
            Some(
                self.consts
                    .blob_entry(float, blocks, offset_key, blocks * width, |out| {
                        encode(true, out)
                    })?,
            )
        } else {
            None
        };
        let mut args = vec![
            ("data", blob(TensorType::new(data_dtype, &shape), data)),
            ("scale", blob(TensorType::new(float, &pshape), scale)),
        ];
        if let Some(o) = offset {
            args.push(("offset", blob(TensorType::new(float, &pshape), o)));
        }
        let name = self.fresh("quantized");
        self.consts.remember_quant(key, &name);
        self.names.insert(node.id(), name.clone());
        self.push_value(
            &name,
            TensorType::new(float, &shape),
            "constexpr_blockwise_shift_scale",
            args,
        );
        Ok(())
    }
}

fn ints(v: &[usize]) -> Argument {
    Argument::Literal(Literal::int_tensor(
        mil::DType::Int32,
        &[v.len()],
        v.iter().map(|&x| x as i64).collect(),
    ))
}

fn int(v: usize) -> Argument {
    Argument::Literal(Literal::int(mil::DType::Int32, v as i64))
}

fn boolean(b: bool) -> Argument {
    Argument::Literal(Literal::bool(b))
}

fn string(s: &str) -> Argument {
    Argument::Literal(Literal::string(s))
}
