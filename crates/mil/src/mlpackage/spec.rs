//! MIL AST → Core ML `Model` protobuf (ML Program), following what coremltools' milproto
//! exporter writes.

use super::proto::specification as pb;
use super::proto::specification::mil_spec as mil;
use super::{ExportError, ExportOptions};
use crate::ast::{
    Argument, Block, DType, Dim, Function, Literal, NamedValue, Operation, Program, TensorData,
    TensorType, ValueType,
};
use half::f16;
use std::collections::{BTreeMap, HashSet};

/// `(opset as the proto names it, Core ML specification version)` for an AST opset name.
pub fn opset_spec(opset: &str) -> Option<(&'static str, i32)> {
    Some(match opset.to_ascii_lowercase().as_str() {
        "ios15" | "coreml5" => ("CoreML5", 6),
        "ios16" | "coreml6" => ("CoreML6", 7),
        "ios17" | "coreml7" => ("CoreML7", 8),
        "ios18" | "coreml8" => ("CoreML8", 9),
        _ => return None,
    })
}

const SPEC_IOS16: i32 = 7;
const SPEC_IOS18: i32 = 9;

pub fn model(program: &Program, options: &ExportOptions) -> Result<pb::Model, ExportError> {
    let first = program.functions.first().ok_or(ExportError::NoFunctions)?;
    let (opset, spec_version) =
        opset_spec(&first.opset).ok_or_else(|| ExportError::UnknownOpset {
            function: first.name.clone(),
            opset: first.opset.clone(),
        })?;
    let mut functions = BTreeMap::new();
    let mut descriptions = Vec::new();
    for function in &program.functions {
        match opset_spec(&function.opset) {
            Some((o, _)) if o == opset => {}
            Some(_) => {
                return Err(ExportError::MixedOpsets {
                    first: first.opset.clone(),
                    function: function.name.clone(),
                    opset: function.opset.clone(),
                })
            }
            None => {
                return Err(ExportError::UnknownOpset {
                    function: function.name.clone(),
                    opset: function.opset.clone(),
                })
            }
        }
        functions.insert(function.name.clone(), convert_function(function, opset)?);
        descriptions.push(describe_function(function, spec_version)?);
    }
    let default = options.default_function.as_str();
    let default_index = program
        .functions
        .iter()
        .position(|f| f.name == default)
        .ok_or_else(|| ExportError::NoDefaultFunction(default.to_string()))?;
    let metadata = Some(pb::Metadata {
        short_description: options.short_description.clone(),
        version_string: options.version.clone(),
        author: options.author.clone(),
        license: options.license.clone(),
        user_defined: BTreeMap::from([(
            "com.github.apple.coremltools.source".to_string(),
            "aneforge".to_string(),
        )]),
    });
    let description = if program.functions.len() == 1 {
        let only = descriptions.swap_remove(default_index);
        pb::ModelDescription {
            input: only.input,
            output: only.output,
            metadata,
            ..Default::default()
        }
    } else {
        if spec_version < SPEC_IOS18 {
            return Err(ExportError::MultiFunctionOpset(first.opset.clone()));
        }
        pb::ModelDescription {
            functions: descriptions,
            default_function_name: default.to_string(),
            metadata,
            ..Default::default()
        }
    };
    let attributes = program
        .attributes
        .iter()
        .map(|(k, v)| {
            Ok((
                k.clone(),
                literal_value(v, &format!("program attribute {k}"))?,
            ))
        })
        .collect::<Result<_, ExportError>>()?;
    Ok(pb::Model {
        specification_version: spec_version,
        description: Some(description),
        is_updatable: false,
        r#type: Some(pb::model::Type::MlProgram(mil::Program {
            version: 1,
            functions,
            doc_string: String::new(),
            attributes,
        })),
    })
}

fn describe_function(
    function: &Function,
    spec_version: i32,
) -> Result<pb::FunctionDescription, ExportError> {
    let input = function
        .inputs
        .iter()
        .map(|v| feature(function, v, spec_version))
        .collect::<Result<_, _>>()?;
    let output = function
        .body
        .outputs
        .iter()
        .map(|name| {
            let ty = function
                .value_type(name)
                .ok_or_else(|| ExportError::UnknownOutput {
                    function: function.name.clone(),
                    name: name.clone(),
                })?;
            feature(
                function,
                &NamedValue::new(name.clone(), ty.clone()),
                spec_version,
            )
        })
        .collect::<Result<_, _>>()?;
    Ok(pb::FunctionDescription {
        name: function.name.clone(),
        input,
        output,
        ..Default::default()
    })
}

/// A function input or output as a Core ML multi-array feature.
fn feature(
    function: &Function,
    value: &NamedValue,
    spec_version: i32,
) -> Result<pb::FeatureDescription, ExportError> {
    use pb::array_feature_type::{ArrayDataType, ShapeFlexibility, ShapeRange};
    let unsupported = |dtype: String| ExportError::FeatureType {
        function: function.name.clone(),
        name: value.name.clone(),
        found: dtype,
    };
    let ty = value
        .ty
        .tensor()
        .ok_or_else(|| unsupported(format!("{:?}", value.ty)))?;
    let data_type = match ty.dtype {
        DType::Fp32 => ArrayDataType::Float32,
        DType::Int32 => ArrayDataType::Int32,
        DType::Fp16 if spec_version >= SPEC_IOS16 => ArrayDataType::Float16,
        DType::Fp16 => return Err(ExportError::Fp16FeatureBeforeIos16(value.name.clone())),
        other => return Err(unsupported(other.to_string())),
    };
    let shape: Vec<i64> = ty
        .shape
        .iter()
        .map(|d| match d {
            Dim::Fixed(n) => *n as i64,
            Dim::Symbol(_) => 1,
        })
        .collect();
    let flexible = ty.shape.iter().any(|d| matches!(d, Dim::Symbol(_)));
    let shape_flexibility = flexible.then(|| {
        ShapeFlexibility::ShapeRange(ShapeRange {
            size_ranges: ty
                .shape
                .iter()
                .map(|d| match d {
                    Dim::Fixed(n) => pb::SizeRange {
                        lower_bound: *n as u64,
                        upper_bound: *n as i64,
                    },
                    Dim::Symbol(_) => pb::SizeRange {
                        lower_bound: 1,
                        upper_bound: -1,
                    },
                })
                .collect(),
        })
    });
    Ok(pb::FeatureDescription {
        name: value.name.clone(),
        short_description: String::new(),
        r#type: Some(pb::FeatureType {
            is_optional: false,
            r#type: Some(pb::feature_type::Type::MultiArrayType(
                pb::ArrayFeatureType {
                    shape,
                    data_type: data_type as i32,
                    shape_flexibility,
                    default_optional_value: None,
                },
            )),
        }),
    })
}

fn convert_function(function: &Function, opset: &str) -> Result<mil::Function, ExportError> {
    if let Some((name, _)) = function.attributes.first() {
        return Err(ExportError::FunctionAttribute {
            function: function.name.clone(),
            name: name.clone(),
        });
    }
    let inputs = function.inputs.iter().map(named_value_type).collect();
    let mut names = Names::default();
    names.collect(function);
    let block = convert_block(&function.body, &function.name, &mut names)?;
    Ok(mil::Function {
        inputs,
        opset: opset.to_string(),
        block_specializations: BTreeMap::from([(opset.to_string(), block)]),
        attributes: BTreeMap::new(),
    })
}

/// Every value name of a function, to keep hoisted constants unique.
#[derive(Default)]
struct Names(HashSet<String>);

impl Names {
    fn collect(&mut self, function: &Function) {
        fn visit(block: &Block, names: &mut HashSet<String>) {
            names.extend(block.inputs.iter().map(|v| v.name.clone()));
            for op in &block.operations {
                names.extend(op.outputs.iter().map(|v| v.name.clone()));
                if let Some(n) = op.name() {
                    names.insert(n.to_string());
                }
                op.blocks.iter().for_each(|b| visit(b, names));
            }
        }
        self.0
            .extend(function.inputs.iter().map(|v| v.name.clone()));
        visit(&function.body, &mut self.0);
    }

    fn fresh(&mut self, base: &str) -> String {
        let mut candidate = base.to_string();
        let mut n = 1;
        while self.0.contains(&candidate) {
            candidate = format!("{base}_{n}");
            n += 1;
        }
        self.0.insert(candidate.clone());
        candidate
    }
}

fn convert_block(
    block: &Block,
    function: &str,
    names: &mut Names,
) -> Result<mil::Block, ExportError> {
    let inputs = block.inputs.iter().map(named_value_type).collect();
    let mut operations = Vec::with_capacity(block.operations.len());
    for op in &block.operations {
        convert_operation(op, function, names, &mut operations)?;
    }
    Ok(mil::Block {
        inputs,
        outputs: block.outputs.clone(),
        operations,
        attributes: BTreeMap::new(),
    })
}

/// Appends `op` to `out`. coremltools' loader only binds immediate values to inputs of ordinary
/// ops, so a BLOBFILE literal there becomes a preceding `const` op (constexpr ops keep theirs).
fn convert_operation(
    op: &Operation,
    function: &str,
    names: &mut Names,
    out: &mut Vec<mil::Operation>,
) -> Result<(), ExportError> {
    let context = |what: &str| {
        format!(
            "{function}: {} {}{what}",
            op.op_type,
            op.name()
                .or_else(|| op.outputs.first().map(|o| o.name.as_str()))
                .unwrap_or("")
        )
    };
    let constexpr = op.op_type.starts_with("constexpr_");
    let mut inputs = BTreeMap::new();
    for (param, arg) in &op.inputs {
        let items: Vec<&Argument> = match arg {
            Argument::List(items) => items.iter().collect(),
            single => vec![single],
        };
        let mut bindings = Vec::with_capacity(items.len());
        for item in items {
            let binding = match item {
                Argument::Name(n) => mil::argument::binding::Binding::Name(n.clone()),
                Argument::Literal(lit @ Literal::Blob { ty, .. }) if !constexpr => {
                    let base = op
                        .name()
                        .or_else(|| op.outputs.first().map(|o| o.name.as_str()))
                        .unwrap_or(op.op_type.as_str());
                    let name = names.fresh(&format!("{base}_{param}"));
                    out.push(mil::Operation {
                        r#type: "const".to_string(),
                        inputs: BTreeMap::new(),
                        outputs: vec![mil::NamedValueType {
                            name: name.clone(),
                            r#type: Some(tensor_value_type(ty)),
                        }],
                        blocks: Vec::new(),
                        attributes: BTreeMap::from([
                            (
                                "name".to_string(),
                                literal_value(&Literal::string(&name), "")?,
                            ),
                            (
                                "val".to_string(),
                                literal_value(lit, &context(&format!(".{param}")))?,
                            ),
                        ]),
                    });
                    mil::argument::binding::Binding::Name(name)
                }
                Argument::Literal(lit) => mil::argument::binding::Binding::Value(literal_value(
                    lit,
                    &context(&format!(".{param}")),
                )?),
                Argument::List(_) => {
                    return Err(ExportError::NestedList(context(&format!(".{param}"))))
                }
            };
            bindings.push(mil::argument::Binding {
                binding: Some(binding),
            });
        }
        inputs.insert(
            param.clone(),
            mil::Argument {
                arguments: bindings,
            },
        );
    }
    let outputs = op.outputs.iter().map(named_value_type).collect();
    let blocks = op
        .blocks
        .iter()
        .map(|b| convert_block(b, function, names))
        .collect::<Result<_, _>>()?;
    let attributes = op
        .attributes
        .iter()
        .map(|(k, v)| Ok((k.clone(), literal_value(v, &context(&format!("[{k}]")))?)))
        .collect::<Result<_, ExportError>>()?;
    out.push(mil::Operation {
        r#type: op.op_type.clone(),
        inputs,
        outputs,
        blocks,
        attributes,
    });
    Ok(())
}

fn named_value_type(v: &NamedValue) -> mil::NamedValueType {
    mil::NamedValueType {
        name: v.name.clone(),
        r#type: Some(value_type(&v.ty)),
    }
}

pub fn data_type(dtype: DType) -> mil::DataType {
    use mil::DataType as P;
    match dtype {
        DType::Fp16 => P::Float16,
        DType::Fp32 => P::Float32,
        DType::Fp64 => P::Float64,
        DType::Bf16 => P::Bfloat16,
        DType::Int4 => P::Int4,
        DType::Int8 => P::Int8,
        DType::Int16 => P::Int16,
        DType::Int32 => P::Int32,
        DType::Int64 => P::Int64,
        DType::Uint1 => P::Uint1,
        DType::Uint2 => P::Uint2,
        DType::Uint3 => P::Uint3,
        DType::Uint4 => P::Uint4,
        DType::Uint6 => P::Uint6,
        DType::Uint8 => P::Uint8,
        DType::Uint16 => P::Uint16,
        DType::Uint32 => P::Uint32,
        DType::Uint64 => P::Uint64,
        DType::Bool => P::Bool,
        DType::String => P::String,
    }
}

fn tensor_value_type(ty: &TensorType) -> mil::ValueType {
    let dimensions = ty
        .shape
        .iter()
        .map(|d| mil::Dimension {
            dimension: Some(match d {
                Dim::Fixed(n) => {
                    mil::dimension::Dimension::Constant(mil::dimension::ConstantDimension {
                        size: *n as u64,
                    })
                }
                Dim::Symbol(_) => {
                    mil::dimension::Dimension::Unknown(mil::dimension::UnknownDimension {
                        variadic: false,
                    })
                }
            }),
        })
        .collect();
    mil::ValueType {
        r#type: Some(mil::value_type::Type::TensorType(mil::TensorType {
            data_type: data_type(ty.dtype) as i32,
            rank: ty.rank() as i64,
            dimensions,
            attributes: BTreeMap::new(),
        })),
    }
}

fn value_type(ty: &ValueType) -> mil::ValueType {
    match ty {
        ValueType::Tensor(t) => tensor_value_type(t),
        ValueType::Tuple(items) => mil::ValueType {
            r#type: Some(mil::value_type::Type::TupleType(mil::TupleType {
                types: items.iter().map(value_type).collect(),
            })),
        },
        ValueType::Dict { key, value } => mil::ValueType {
            r#type: Some(mil::value_type::Type::DictionaryType(Box::new(
                mil::DictionaryType {
                    key_type: Some(Box::new(tensor_value_type(&TensorType::scalar(*key)))),
                    value_type: Some(Box::new(tensor_value_type(&TensorType::scalar(*value)))),
                },
            ))),
        },
    }
}

pub(crate) fn literal_value(lit: &Literal, context: &str) -> Result<mil::Value, ExportError> {
    use mil::value::{immediate_value, ImmediateValue, Value as V};
    let value = match lit {
        Literal::Tensor { ty, data } => {
            let expected = ty.num_elements();
            if expected != Some(data.len()) {
                return Err(ExportError::LiteralLength {
                    context: context.to_string(),
                    ty: crate::ty_string(ty),
                    found: data.len(),
                });
            }
            V::ImmediateValue(ImmediateValue {
                value: Some(immediate_value::Value::Tensor(tensor_value(
                    ty, data, context,
                )?)),
            })
        }
        Literal::Blob { path, offset, .. } => V::BlobFileValue(mil::value::BlobFileValue {
            file_name: path.clone(),
            offset: *offset,
        }),
        Literal::Tuple(items) => V::ImmediateValue(ImmediateValue {
            value: Some(immediate_value::Value::Tuple(mil::TupleValue {
                values: items
                    .iter()
                    .map(|l| literal_value(l, context))
                    .collect::<Result<_, _>>()?,
            })),
        }),
        Literal::Dict { entries, .. } => V::ImmediateValue(ImmediateValue {
            value: Some(immediate_value::Value::Dictionary(mil::DictionaryValue {
                values: entries
                    .iter()
                    .map(|(k, v)| {
                        Ok(mil::dictionary_value::KeyValuePair {
                            key: Some(literal_value(k, context)?),
                            value: Some(literal_value(v, context)?),
                        })
                    })
                    .collect::<Result<_, ExportError>>()?,
            })),
        }),
    };
    Ok(mil::Value {
        doc_string: String::new(),
        r#type: Some(value_type(&lit.value_type())),
        value: Some(value),
    })
}

/// Immediate tensor data in the TensorValue field coremltools reads for the dtype: fp16, 8-bit,
/// sub-byte (packed low bits first) and uint32 as bytes; other ints as ints / longInts.
fn tensor_value(
    ty: &TensorType,
    data: &TensorData,
    context: &str,
) -> Result<mil::TensorValue, ExportError> {
    use mil::tensor_value::{
        RepeatedBools, RepeatedBytes, RepeatedDoubles, RepeatedFloats, RepeatedInts,
        RepeatedLongInts, RepeatedStrings, Value as T,
    };
    let mismatch = || ExportError::LiteralData {
        context: context.to_string(),
        ty: crate::ty_string(ty),
    };
    let value = match (ty.dtype, data) {
        (DType::Fp32, TensorData::Float(v)) => T::Floats(RepeatedFloats {
            values: v.iter().map(|&x| x as f32).collect(),
        }),
        (DType::Fp64, TensorData::Float(v)) => T::Doubles(RepeatedDoubles { values: v.clone() }),
        (DType::Fp16, TensorData::Float(v)) => T::Bytes(RepeatedBytes {
            values: v
                .iter()
                .flat_map(|&x| f16::from_f64(x).to_le_bytes())
                .collect(),
        }),
        (DType::Bool, TensorData::Bool(v)) => T::Bools(RepeatedBools { values: v.clone() }),
        (DType::String, TensorData::Str(v)) => T::Strings(RepeatedStrings { values: v.clone() }),
        (DType::Int64 | DType::Uint64, TensorData::Int(v)) => {
            T::LongInts(RepeatedLongInts { values: v.clone() })
        }
        (DType::Int16 | DType::Uint16 | DType::Int32, TensorData::Int(v)) => {
            T::Ints(RepeatedInts {
                values: v
                    .iter()
                    .map(|&x| i32::try_from(x).map_err(|_| mismatch()))
                    .collect::<Result<_, _>>()?,
            })
        }
        (DType::Uint32, TensorData::Int(v)) => T::Bytes(RepeatedBytes {
            values: v
                .iter()
                .map(|&x| {
                    u32::try_from(x)
                        .map(u32::to_le_bytes)
                        .map_err(|_| mismatch())
                })
                .collect::<Result<Vec<_>, _>>()?
                .concat(),
        }),
        (dtype, TensorData::Int(v)) if dtype.is_int() => {
            let bits = dtype.bits().ok_or_else(mismatch)?;
            let (lo, hi) = dtype.int_range().ok_or_else(mismatch)?;
            let mut bytes = vec![0u8; (v.len() * bits).div_ceil(8)];
            for (i, &x) in v.iter().enumerate() {
                if !(lo..=hi).contains(&(x as i128)) {
                    return Err(mismatch());
                }
                let field = (x as u64) & ((1u64 << bits) - 1);
                for b in 0..bits {
                    if field >> b & 1 == 1 {
                        let bit = i * bits + b;
                        bytes[bit / 8] |= 1 << (bit % 8);
                    }
                }
            }
            T::Bytes(RepeatedBytes { values: bytes })
        }
        _ => return Err(mismatch()),
    };
    Ok(mil::TensorValue { value: Some(value) })
}
