//! A tiny program builder for the corpus: values are named by the caller, types are declared by
//! the caller (coremltools checks them), weights go to one blob file.

use aneforge_mil::encode::{encode, EncodeOptions, Report, Scheme, Weight, WEIGHT_BLOB_PATH};
use aneforge_mil::{
    Argument, BlobFile, BlobWriter, Block, DType, Function, Literal, NamedValue, Operation,
    Program, TensorType,
};

/// An encoded weight whose reconstruction coremltools must reproduce.
pub struct Expectation {
    pub name: String,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
    pub report: Report,
}

pub struct Built {
    pub program: Program,
    pub blobs: BlobFile,
    pub expectations: Vec<Expectation>,
}

pub struct Builder {
    pub dtype: DType,
    expectations: Vec<Expectation>,
    opset: String,
    inputs: Vec<NamedValue>,
    operations: Vec<Operation>,
    pub blobs: BlobWriter,
    extra_functions: Vec<Function>,
}

pub fn t(dtype: DType, shape: &[usize]) -> TensorType {
    TensorType::new(dtype, shape)
}

pub fn n(name: &str) -> Argument {
    Argument::name(name)
}

pub fn ints(values: &[i64]) -> Argument {
    Argument::Literal(Literal::int_tensor(
        DType::Int32,
        &[values.len()],
        values.to_vec(),
    ))
}

pub fn int(v: i64) -> Argument {
    Argument::Literal(Literal::int(DType::Int32, v))
}

pub fn boolean(v: bool) -> Argument {
    Argument::Literal(Literal::bool(v))
}

pub fn bools(values: &[bool]) -> Argument {
    Argument::Literal(Literal::bool_tensor(&[values.len()], values.to_vec()))
}

pub fn string(s: &str) -> Argument {
    Argument::Literal(Literal::string(s))
}

pub fn list(names: &[&str]) -> Argument {
    Argument::List(names.iter().map(|s| n(s)).collect())
}

/// Deterministic values in about [-0.5, 0.5].
pub fn wave(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| (((i * 7 + seed * 13) % 23) as f32 - 11.0) / 22.0)
        .collect()
}

impl Builder {
    pub fn new(opset: &str, dtype: DType) -> Builder {
        Builder {
            dtype,
            expectations: Vec::new(),
            opset: opset.to_string(),
            inputs: Vec::new(),
            operations: Vec::new(),
            blobs: BlobWriter::new(),
            extra_functions: Vec::new(),
        }
    }

    pub fn input(&mut self, name: &str, ty: TensorType) -> &mut Self {
        self.inputs.push(NamedValue::new(name, ty));
        self
    }

    /// `output: ty = op_type(args)[name = output]`.
    pub fn op(&mut self, op_type: &str, args: Vec<(&str, Argument)>, output: &str, ty: TensorType) {
        self.op_multi(op_type, args, &[(output, ty)]);
    }

    pub fn op_multi(
        &mut self,
        op_type: &str,
        args: Vec<(&str, Argument)>,
        outputs: &[(&str, TensorType)],
    ) {
        let mut op = Operation::new(op_type);
        for (name, arg) in args {
            op = op.with_input(name, arg);
        }
        for (name, ty) in outputs {
            op = op.with_output(*name, ty.clone());
        }
        let name = outputs.first().map(|(n, _)| *n).unwrap_or(op_type);
        op = op.with_attribute("name", Literal::string(name));
        self.operations.push(op);
    }

    pub fn push(&mut self, op: Operation) {
        self.operations.push(op);
    }

    /// A `const` weight of the builder's dtype, stored in the blob file.
    pub fn weight(&mut self, name: &str, shape: &[usize], seed: usize) {
        let values = wave(shape.iter().product(), seed);
        self.weight_values(name, shape, &values);
    }

    pub fn weight_values(&mut self, name: &str, shape: &[usize], values: &[f32]) {
        let offset = match self.dtype {
            DType::Fp32 => self.blobs.add_f32(values),
            _ => {
                let halves: Vec<half::f16> =
                    values.iter().map(|&v| half::f16::from_f32(v)).collect();
                self.blobs.add_f16(&halves)
            }
        };
        self.push(
            Operation::new("const")
                .with_output(name, t(self.dtype, shape))
                .with_attribute("name", Literal::string(name))
                .with_attribute(
                    "val",
                    Literal::Blob {
                        ty: t(self.dtype, shape),
                        path: WEIGHT_BLOB_PATH.to_string(),
                        offset,
                    },
                ),
        );
    }

    /// A weight through one of the encoders (fp16 output).
    pub fn encoded_weight(&mut self, name: &str, shape: &[usize], values: &[f32], scheme: Scheme) {
        let weight = Weight {
            name,
            shape,
            values,
        };
        let encoded = encode(&mut self.blobs, &weight, scheme, &EncodeOptions::default())
            .unwrap_or_else(|e| panic!("corpus weight {name}: {e}"));
        self.operations.extend(encoded.operations);
        self.expectations.push(Expectation {
            name: name.to_string(),
            shape: shape.to_vec(),
            values: values.to_vec(),
            report: encoded.report,
        });
    }

    /// Closes the current body as function `name` and starts a new, empty one.
    pub fn finish_function(&mut self, name: &str, outputs: &[&str]) {
        self.extra_functions.push(Function {
            name: name.to_string(),
            opset: self.opset.clone(),
            inputs: std::mem::take(&mut self.inputs),
            attributes: Vec::new(),
            body: Block {
                inputs: Vec::new(),
                operations: std::mem::take(&mut self.operations),
                outputs: outputs.iter().map(|s| s.to_string()).collect(),
            },
        });
    }

    pub fn finish(mut self, outputs: &[&str]) -> Built {
        if !outputs.is_empty() || self.extra_functions.is_empty() {
            self.finish_function("main", outputs);
        }
        let program = Program {
            version: "1.3".to_string(),
            attributes: vec![(
                "buildInfo".to_string(),
                Literal::Dict {
                    key: DType::String,
                    value: DType::String,
                    entries: vec![(Literal::string("aneforge"), Literal::string("corpus"))],
                },
            )],
            functions: self.extra_functions,
        };
        let blobs = BlobFile::from_vec("weight.bin", self.blobs.finish()).expect("valid blob file");
        Built {
            program,
            blobs,
            expectations: self.expectations,
        }
    }
}
