//! Emission: canonical graph nodes to MIL operations, one function `main`, weights into a blob.
//! Argument names and order follow coremltools' op definitions (iOS15–iOS18 opsets).

use super::consts::{to_f16, ConstTable, Interned, BLOB_PATH};
use super::{LowerError, PortKind, PortSpec, Target};
use crate::graph::{
    BinaryOp, BlockQuantized, CompareOp, DType, HostArray, HostData, NodeId, Op, PoolKind,
    QuantFormat, Tensor, UnaryOp, UpsampleMode,
};
use aneforge_mil as mil;
use mil::{Argument, Literal, Operation, TensorType};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

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
        let s = node.srcs();
        let x = || self.arg(&s[0]);
        match node.op() {
            Op::Input { name } => self.leaf_input(node, name, PortKind::Input),
            Op::Parameter { name, init } => {
                self.leaf_input(node, name, PortKind::Parameter(init.clone()))
            }
            Op::Constant(value) => self.constant(node, value)?,
            Op::Unary(u) => self.unary(node, *u),
            Op::Clip { min, max } => {
                let args = vec![
                    ("x", x()),
                    ("alpha", self.float_lit(*min)),
                    ("beta", self.float_lit(*max)),
                ];
                self.push(node, "clip", args)
            }
            Op::LeakyRelu { alpha } => {
                let args = vec![("x", x()), ("alpha", self.float_lit(*alpha))];
                self.push(node, "leaky_relu", args)
            }
            Op::Elu { alpha } => {
                let args = vec![("x", x()), ("alpha", self.float_lit(*alpha))];
                self.push(node, "elu", args)
            }
            Op::Binary(b) => {
                let op = match b {
                    BinaryOp::Add => "add",
                    BinaryOp::Sub => "sub",
                    BinaryOp::Mul => "mul",
                    BinaryOp::Div => "real_div",
                    BinaryOp::Pow => "pow",
                    BinaryOp::Maximum => "maximum",
                    BinaryOp::Minimum => "minimum",
                };
                let args = vec![("x", x()), ("y", self.arg(&s[1]))];
                self.push(node, op, args)
            }
            Op::Compare(c) => {
                let op = match c {
                    CompareOp::Equal => "equal",
                    CompareOp::NotEqual => "not_equal",
                    CompareOp::Less => "less",
                    CompareOp::LessEqual => "less_equal",
                    CompareOp::Greater => "greater",
                    CompareOp::GreaterEqual => "greater_equal",
                };
                let args = vec![("x", x()), ("y", self.arg(&s[1]))];
                self.push(node, op, args)
            }
            Op::Select => {
                let args = vec![
                    ("cond", x()),
                    ("a", self.arg(&s[1])),
                    ("b", self.arg(&s[2])),
                ];
                self.push(node, "select", args)
            }
            Op::MatMul {
                transpose_a,
                transpose_b,
            } => {
                let args = vec![
                    ("x", x()),
                    ("y", self.arg(&s[1])),
                    ("transpose_x", boolean(*transpose_a)),
                    ("transpose_y", boolean(*transpose_b)),
                ];
                self.push(node, "matmul", args)
            }
            Op::Linear { .. } => {
                let mut args = vec![("x", x()), ("weight", self.arg(&s[1]))];
                if let Some(b) = s.get(2) {
                    args.push(("bias", self.arg(b)));
                }
                self.push(node, "linear", args)
            }
            Op::Conv { attrs, .. } => {
                let mut args = vec![("x", x()), ("weight", self.arg(&s[1]))];
                if let Some(b) = s.get(2) {
                    args.push(("bias", self.arg(b)));
                }
                let pad: Vec<usize> = attrs.pads.iter().flat_map(|&(b, a)| [b, a]).collect();
                args.extend([
                    ("strides", ints(&attrs.strides)),
                    ("pad_type", string("custom")),
                    ("pad", ints(&pad)),
                    ("dilations", ints(&attrs.dilations)),
                    ("groups", int(attrs.groups)),
                ]);
                self.push(node, "conv", args)
            }
            Op::ConvTranspose {
                attrs,
                output_padding,
                ..
            } => {
                let mut args = vec![("x", x()), ("weight", self.arg(&s[1]))];
                if let Some(b) = s.get(2) {
                    args.push(("bias", self.arg(b)));
                }
                // PyTorch's output_padding extends the end of each axis: keep that many more
                // positions of the uncropped output by cropping less at the end.
                let pad: Vec<usize> = attrs
                    .pads
                    .iter()
                    .zip(output_padding)
                    .flat_map(|(&(b, a), &op)| [b, a - op])
                    .collect();
                args.extend([
                    ("pad", ints(&pad)),
                    ("pad_type", string("custom")),
                    ("strides", ints(&attrs.strides)),
                    ("dilations", ints(&attrs.dilations)),
                    ("groups", int(attrs.groups)),
                ]);
                self.push(node, "conv_transpose", args)
            }
            Op::Pool(p) => {
                let pad: Vec<usize> = p.pads.iter().flat_map(|&(b, a)| [b, a]).collect();
                let mut args = Vec::new();
                let op = match p.kind {
                    PoolKind::Max => "max_pool",
                    PoolKind::Avg { count_pad } => {
                        args.push(("exclude_padding_from_average", boolean(!count_pad)));
                        "avg_pool"
                    }
                };
                args.extend([
                    ("x", x()),
                    ("kernel_sizes", ints(&p.kernel)),
                    ("strides", ints(&p.strides)),
                    ("pad_type", string("custom")),
                    ("pad", ints(&pad)),
                    ("ceil_mode", boolean(p.ceil_mode)),
                ]);
                self.push(node, op, args)
            }
            Op::Upsample {
                mode,
                scale_h,
                scale_w,
            } => {
                let mut args = vec![
                    ("x", x()),
                    ("scale_factor_height", int(*scale_h)),
                    ("scale_factor_width", int(*scale_w)),
                ];
                let op = match mode {
                    UpsampleMode::Nearest => "upsample_nearest_neighbor",
                    UpsampleMode::Bilinear { align_corners } => {
                        args.push(("align_corners", boolean(*align_corners)));
                        args.push(("half_pixel_centers", boolean(!align_corners)));
                        "upsample_bilinear"
                    }
                };
                self.push(node, op, args)
            }
            Op::Reduce { op, axes, keepdims } => {
                let args = vec![
                    ("x", x()),
                    ("axes", ints(axes)),
                    ("keep_dims", boolean(*keepdims)),
                ];
                self.push(node, op.name(), args)
            }
            Op::ArgMax { axis, keepdims } => {
                let args = vec![
                    ("x", x()),
                    ("axis", int(*axis)),
                    ("keep_dims", boolean(*keepdims)),
                ];
                self.push(node, "reduce_argmax", args)
            }
            Op::Softmax { axis } => {
                let args = vec![("x", x()), ("axis", int(*axis))];
                self.push(node, "softmax", args)
            }
            Op::LayerNorm {
                axes,
                eps,
                has_gamma,
                has_beta,
            } => {
                let mut args = vec![("x", x()), ("axes", ints(axes))];
                let mut rest = s[1..].iter();
                if *has_gamma {
                    args.extend(rest.next().map(|g| ("gamma", self.arg(g))));
                }
                if *has_beta {
                    args.extend(rest.next().map(|b| ("beta", self.arg(b))));
                }
                args.push(("epsilon", self.float_lit(*eps)));
                self.push(node, "layer_norm", args)
            }
            Op::BatchNorm {
                eps,
                has_gamma,
                has_beta,
            } => {
                let mut args = vec![
                    ("x", x()),
                    ("mean", self.arg(&s[1])),
                    ("variance", self.arg(&s[2])),
                ];
                let mut rest = s[3..].iter();
                if *has_gamma {
                    args.extend(rest.next().map(|g| ("gamma", self.arg(g))));
                }
                if *has_beta {
                    args.extend(rest.next().map(|b| ("beta", self.arg(b))));
                }
                args.push(("epsilon", self.float_lit(*eps)));
                self.push(node, "batch_norm", args)
            }
            Op::Reshape { shape } => {
                let args = vec![("x", x()), ("shape", ints(shape))];
                self.push(node, "reshape", args)
            }
            Op::Transpose { perm } => {
                let args = vec![("x", x()), ("perm", ints(perm))];
                self.push(node, "transpose", args)
            }
            Op::Concat { axis } => {
                let values = Argument::List(s.iter().map(|t| self.arg(t)).collect());
                let args = vec![
                    ("values", values),
                    ("axis", int(*axis)),
                    ("interleave", boolean(false)),
                ];
                self.push(node, "concat", args)
            }
            Op::Slice { begin, end, stride } => {
                let args = vec![
                    ("x", x()),
                    ("begin", ints(begin)),
                    ("end", ints(end)),
                    ("stride", ints(stride)),
                ];
                self.push(node, "slice_by_index", args)
            }
            Op::DynamicSlice { size } => {
                if self.target.is_ane() {
                    return Err(self.unsupported(node, "the window position is data-dependent"));
                }
                let args = vec![("x", x()), ("begin", self.arg(&s[1])), ("size", ints(size))];
                self.push(node, "slice_by_size", args)
            }
            Op::SliceUpdate { begin } => {
                let end: Vec<usize> = begin.iter().zip(s[1].shape()).map(|(b, u)| b + u).collect();
                let args = vec![
                    ("x", x()),
                    ("update", self.arg(&s[1])),
                    ("begin", ints(begin)),
                    ("end", ints(&end)),
                ];
                self.push(node, "slice_update", args)
            }
            Op::DynamicSliceUpdate => {
                if self.target.is_ane() {
                    return Err(self.unsupported(node, "the update position is data-dependent"));
                }
                let x = self.arg(&s[0]);
                let end = self.fresh("slice_end");
                let rank = node.rank();
                let add_args = vec![("x", self.arg(&s[2])), ("y", ints(s[1].shape()))];
                self.push_value(
                    &end,
                    TensorType::new(mil::DType::Int32, &[rank]),
                    "add",
                    add_args,
                );
                let args = vec![
                    ("x", x),
                    ("update", self.arg(&s[1])),
                    ("begin", self.arg(&s[2])),
                    ("end", Argument::Name(end)),
                ];
                self.push(node, "slice_update", args)
            }
            Op::Pad { pads, mode, value } => {
                let pad: Vec<usize> = pads.iter().flat_map(|&(b, a)| [b, a]).collect();
                let args = vec![
                    ("x", x()),
                    ("pad", ints(&pad)),
                    ("mode", string(mode.name())),
                    ("constant_val", self.float_lit(*value)),
                ];
                self.push(node, "pad", args)
            }
            Op::Tile { reps } => {
                let args = vec![("x", x()), ("reps", ints(reps))];
                self.push(node, "tile", args)
            }
            Op::Gather { axis } => {
                if self.target.is_ane() && !matches!(s[1].op(), Op::Constant(_)) {
                    return Err(self.unsupported(
                        node,
                        "the indices are data-dependent (gather them on the host or use the CPU target)",
                    ));
                }
                let args = vec![
                    ("x", x()),
                    ("indices", self.arg(&s[1])),
                    ("axis", int(*axis)),
                ];
                self.push(node, "gather", args)
            }
            Op::SpaceToDepth { block } => {
                let args = vec![("x", x()), ("block_size", int(*block))];
                self.push(node, "space_to_depth", args)
            }
            Op::DepthToSpace { block } => {
                let args = vec![("x", x()), ("block_size", int(*block))];
                self.push(node, "depth_to_space", args)
            }
            Op::Cumsum {
                axis,
                exclusive,
                reverse,
            } => {
                let args = vec![
                    ("x", x()),
                    ("axis", int(*axis)),
                    ("exclusive", boolean(*exclusive)),
                    ("reverse", boolean(*reverse)),
                ];
                self.push(node, "cumsum", args)
            }
            Op::Cast { dtype } => {
                let to = self.mil_dtype(*dtype);
                if to == self.mil_dtype(s[0].dtype()) {
                    let args = vec![("x", x())];
                    self.push(node, "identity", args)
                } else {
                    let args = vec![("x", x()), ("dtype", string(to.name()))];
                    self.push(node, "cast", args)
                }
            }
            Op::Sdpa { has_mask, .. } => {
                let mut args = vec![
                    ("query", x()),
                    ("key", self.arg(&s[1])),
                    ("value", self.arg(&s[2])),
                ];
                if *has_mask {
                    args.push(("attn_mask", self.arg(&s[3])));
                }
                self.push(node, "scaled_dot_product_attention", args)
            }
            Op::StopGradient => {
                let args = vec![("x", x())];
                self.push(node, "identity", args)
            }
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
        if let HostData::BlockQuantized(q) = value.data() {
            return self.block_quantized(node, q);
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

    /// `constexpr_blockwise_shift_scale(data, scale, offset)` over blob entries: the quantized
    /// integers as stored, scales and offsets in the program's float type.
    fn block_quantized(&mut self, node: &Tensor, q: &BlockQuantized) -> Result<(), LowerError> {
        let key = [
            Arc::as_ptr(q.data()) as *const u8 as usize,
            Arc::as_ptr(q.scale()) as *const f32 as usize,
            q.offset()
                .map_or(0, |o| Arc::as_ptr(o) as *const f32 as usize),
        ];
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
        let data = self.consts.blob_entry(
            data_dtype,
            q.rows() * q.cols(),
            Arc::as_ptr(q.data()) as *const u8 as usize,
            || q.data().to_vec(),
        )?;
        let float = self.float;
        let floats = |v: &[f32]| -> Vec<u8> {
            match float {
                mil::DType::Fp16 => v.iter().flat_map(|&x| to_f16(x).to_le_bytes()).collect(),
                _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            }
        };
        let blob = |ty: TensorType, offset: u64| {
            Argument::Literal(Literal::Blob {
                ty,
                path: BLOB_PATH.to_string(),
                offset,
            })
        };
        let mut entry = |v: &Arc<[f32]>| {
            let source = Arc::as_ptr(v) as *const f32 as usize;
            self.consts.blob_entry(float, v.len(), source, || floats(v))
        };
        let scale = entry(q.scale())?;
        let offset = q.offset().map(&mut entry).transpose()?;
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

    fn unary(&mut self, node: &Tensor, u: UnaryOp) {
        let x = self.arg(&node.srcs()[0]);
        let op = match u {
            UnaryOp::Gelu | UnaryOp::GeluTanh => {
                let mode = if u == UnaryOp::Gelu {
                    "EXACT"
                } else {
                    "TANH_APPROXIMATION"
                };
                return self.push(node, "gelu", vec![("x", x), ("mode", string(mode))]);
            }
            UnaryOp::Neg => {
                let minus_one = self.float_lit(-1.0);
                return self.push(node, "mul", vec![("x", x), ("y", minus_one)]);
            }
            // Every other unary op is the MIL op of its graph name.
            _ => u.name(),
        };
        self.push(node, op, vec![("x", x)])
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
