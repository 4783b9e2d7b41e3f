//! Structural checks of a [`Program`]: names, def-before-use, known ops and arguments (from the
//! [`crate::ops`] registry), output counts, inline literal data, and BLOBFILE references against
//! the blob files' descriptors. Every problem found is reported, each naming its function and op.

use crate::ast::*;
use crate::blob::BlobFile;
use crate::ops::{self, Opset};
use crate::text::float::representable;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

/// One problem: where (function, op) and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidationError {
    pub function: String,
    /// `op 'h' (linear #3)`, `op #3 (relu)`, `inputs`, `outputs`, or empty for program-level.
    pub location: String,
    pub problem: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.function.is_empty(), self.location.is_empty()) {
            (true, _) => write!(f, "program: {}", self.problem),
            (false, true) => write!(f, "function '{}': {}", self.function, self.problem),
            (false, false) => write!(
                f,
                "function '{}', {}: {}",
                self.function, self.location, self.problem
            ),
        }
    }
}

/// Everything wrong with a program, in program order.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationErrors(pub Vec<ValidationError>);

impl fmt::Display for ValidationErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(f, "{n} problem{}:", if n == 1 { "" } else { "s" })?;
        for e in &self.0 {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

/// Where BLOBFILE paths (as written, `@model_path/weights/weight.bin`) are looked up.
pub trait BlobSource {
    fn blob_file(&self, path: &str) -> Option<&BlobFile>;
}

impl BlobSource for BTreeMap<String, BlobFile> {
    fn blob_file(&self, path: &str) -> Option<&BlobFile> {
        self.get(path)
    }
}

impl<S: std::hash::BuildHasher> BlobSource for HashMap<String, BlobFile, S> {
    fn blob_file(&self, path: &str) -> Option<&BlobFile> {
        self.get(path)
    }
}

/// Checks everything but the BLOBFILE payloads (their shape and dtype are still checked).
pub fn validate(program: &Program) -> Result<(), ValidationErrors> {
    Checker::new(None).program(program)
}

/// [`validate`], plus every BLOBFILE reference resolved in `blobs` and checked against its
/// descriptor (dtype, payload size for the declared type).
pub fn validate_with_blobs(
    program: &Program,
    blobs: &dyn BlobSource,
) -> Result<(), ValidationErrors> {
    Checker::new(Some(blobs)).program(program)
}

/// A MIL identifier: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

struct Checker<'a> {
    blobs: Option<&'a dyn BlobSource>,
    errors: Vec<ValidationError>,
    function: String,
    location: String,
}

impl<'a> Checker<'a> {
    fn new(blobs: Option<&'a dyn BlobSource>) -> Checker<'a> {
        Checker {
            blobs,
            errors: Vec::new(),
            function: String::new(),
            location: String::new(),
        }
    }

    fn report(&mut self, problem: impl Into<String>) {
        self.errors.push(ValidationError {
            function: self.function.clone(),
            location: self.location.clone(),
            problem: problem.into(),
        });
    }

    fn program(mut self, program: &Program) -> Result<(), ValidationErrors> {
        if program.functions.is_empty() {
            self.report("the program has no functions");
        }
        let mut seen = HashSet::new();
        for f in &program.functions {
            if !seen.insert(f.name.as_str()) {
                self.report(format!("function '{}' is defined twice", f.name));
            }
        }
        for (name, lit) in &program.attributes {
            self.location = format!("attribute '{name}'");
            self.literal(lit);
        }
        for f in &program.functions {
            self.function_body(f);
        }
        if self.errors.is_empty() {
            Ok(())
        } else {
            Err(ValidationErrors(self.errors))
        }
    }

    fn function_body(&mut self, f: &Function) {
        self.function = f.name.clone();
        self.location = String::new();
        if !is_identifier(&f.name) {
            self.report("the function name is not an identifier");
        }
        let Some(opset) = Opset::parse(&f.opset) else {
            self.report(format!(
                "unknown opset '{}' (expected ios15..ios18 or CoreML5..CoreML8)",
                f.opset
            ));
            return;
        };
        let mut defined: HashSet<&str> = HashSet::new();
        self.location = "inputs".into();
        for input in &f.inputs {
            self.define(&input.name, &mut defined);
            self.value_type(&input.ty);
        }
        for (index, op) in f.body.operations.iter().enumerate() {
            self.location = match op.name() {
                Some(n) => format!("op '{n}' ({} #{index})", op.op_type),
                None => format!("op #{index} ({})", op.op_type),
            };
            self.operation(op, opset, &defined);
            for out in &op.outputs {
                self.define(&out.name, &mut defined);
                self.value_type(&out.ty);
            }
        }
        self.location = "outputs".into();
        if f.body.outputs.is_empty() {
            self.report("the function has no outputs");
        }
        for out in &f.body.outputs {
            if !defined.contains(out.as_str()) {
                self.report(format!("output '{out}' is not defined in the function"));
            }
        }
    }

    fn define<'p>(&mut self, name: &'p str, defined: &mut HashSet<&'p str>) {
        if !is_identifier(name) {
            self.report(format!("'{name}' is not a valid value name"));
        }
        if !defined.insert(name) {
            self.report(format!("value '{name}' is defined more than once"));
        }
    }

    fn value_type(&mut self, ty: &ValueType) {
        match ty {
            ValueType::Tensor(t) => self.tensor_type(t),
            ValueType::Tuple(items) => items.iter().for_each(|t| self.value_type(t)),
            ValueType::Dict { .. } => {}
        }
    }

    fn tensor_type(&mut self, t: &TensorType) {
        for d in &t.shape {
            if let Dim::Symbol(s) = d {
                if s != "?" && !is_identifier(s) {
                    self.report(format!("'{s}' is not a valid symbolic dimension"));
                }
            }
        }
    }

    fn operation(&mut self, op: &Operation, opset: Opset, defined: &HashSet<&str>) {
        if !op.blocks.is_empty() {
            self.report("control-flow blocks are not supported");
        }
        let mut seen_args = HashSet::new();
        for (name, arg) in &op.inputs {
            if !seen_args.insert(name.as_str()) {
                self.report(format!("argument '{name}' is given twice"));
            }
            for r in arg.referenced_names() {
                if !defined.contains(r) {
                    self.report(format!(
                        "argument '{name}' uses '{r}', which is not defined before this op"
                    ));
                }
            }
            self.argument_literals(arg);
        }
        let mut seen_attrs = HashSet::new();
        for (name, lit) in &op.attributes {
            if !seen_attrs.insert(name.as_str()) {
                self.report(format!("attribute '{name}' is given twice"));
            }
            self.literal(lit);
        }
        if let Some(name) = op.attribute("name") {
            if name.as_str().is_none() {
                self.report("the 'name' attribute must be a string");
            }
        }

        let Some(signature) = ops::lookup(&op.op_type, opset) else {
            match ops::first_opset(&op.op_type) {
                Some(first) => self.report(format!(
                    "{} needs opset {first} or later, but the function is {opset}",
                    op.op_type
                )),
                None => self.report(format!("unknown op type '{}'", op.op_type)),
            }
            return;
        };
        for (name, _) in &op.inputs {
            if signature.arg(name).is_none() {
                self.report(format!(
                    "{} has no argument '{name}' (expected one of: {})",
                    op.op_type,
                    arg_names(signature)
                ));
            }
        }
        for (name, _) in &op.attributes {
            let known = name == "name"
                || (op.op_type == "const" && name == "val")
                || signature.arg(name).is_some();
            if !known {
                self.report(format!("{} has no attribute '{name}'", op.op_type));
            }
            if signature.arg(name).is_some() && seen_args.contains(name.as_str()) {
                self.report(format!(
                    "'{name}' is given both as an argument and as an attribute"
                ));
            }
        }
        for arg in signature.required_args() {
            let present = op.input(arg.name).is_some() || op.attribute(arg.name).is_some();
            if !present {
                self.report(format!(
                    "required argument '{}' of {} is missing",
                    arg.name, op.op_type
                ));
            }
        }
        if !signature.outputs.accepts(op.outputs.len()) {
            self.report(format!(
                "{} produces {}, but the statement declares {}",
                op.op_type,
                signature.outputs,
                op.outputs.len()
            ));
        }
        if op.op_type == "const" {
            match op.attribute("val") {
                None => self.report("const has no 'val' attribute"),
                Some(val) => {
                    if let [out] = op.outputs.as_slice() {
                        if out.ty != val.value_type() {
                            self.report(format!(
                                "const '{}' is declared {} but its value is {}",
                                out.name,
                                type_string(&out.ty),
                                type_string(&val.value_type())
                            ));
                        }
                    }
                }
            }
        }
    }

    fn argument_literals(&mut self, arg: &Argument) {
        match arg {
            Argument::Name(_) => {}
            Argument::Literal(l) => self.literal(l),
            Argument::List(items) => items.iter().for_each(|a| self.argument_literals(a)),
        }
    }

    fn literal(&mut self, lit: &Literal) {
        match lit {
            Literal::Tensor { ty, data } => self.inline_tensor(ty, data),
            Literal::Blob { ty, path, offset } => self.blob_reference(ty, path, *offset),
            Literal::Tuple(items) => items.iter().for_each(|l| self.literal(l)),
            Literal::Dict {
                key,
                value,
                entries,
            } => {
                for (k, v) in entries {
                    for (lit, dtype, role) in [(k, key, "key"), (v, value, "value")] {
                        match lit {
                            Literal::Tensor { ty, .. } if ty.is_scalar() && ty.dtype == *dtype => {
                                self.literal(lit)
                            }
                            other => self.report(format!(
                                "dict {role} of type {} in a dict<{key}, {value}>",
                                type_string(&other.value_type())
                            )),
                        }
                    }
                }
            }
        }
    }

    fn inline_tensor(&mut self, ty: &TensorType, data: &TensorData) {
        let ty_text = crate::ty_string(ty);
        let Some(count) = ty.num_elements() else {
            self.report(format!("inline literal of {ty_text} needs a fixed shape"));
            return;
        };
        if data.len() != count {
            self.report(format!(
                "inline literal of {ty_text} has {} elements, expected {count}",
                data.len()
            ));
        }
        let dtype = ty.dtype;
        match data {
            TensorData::Float(v) if dtype.is_float() => {
                if let Some((i, x)) = v
                    .iter()
                    .enumerate()
                    .find(|(_, &x)| !representable(x, dtype))
                {
                    self.report(format!(
                        "element {i} of a {ty_text} literal ({x:e}) is not exactly representable in {dtype}"
                    ));
                }
            }
            TensorData::Int(v) if dtype.is_int() => {
                let (lo, hi) = dtype.int_range().unwrap_or((i128::MIN, i128::MAX));
                if let Some((i, x)) = v
                    .iter()
                    .enumerate()
                    .find(|(_, &x)| (x as i128) < lo || (x as i128) > hi)
                {
                    self.report(format!(
                        "element {i} of a {ty_text} literal ({x}) is out of range for {dtype}"
                    ));
                }
            }
            TensorData::Bool(_) if dtype == DType::Bool => {}
            TensorData::Str(_) if dtype == DType::String => {}
            _ => self.report(format!(
                "a {ty_text} literal holds {} data",
                match data {
                    TensorData::Float(_) => "floating-point",
                    TensorData::Int(_) => "integer",
                    TensorData::Bool(_) => "boolean",
                    TensorData::Str(_) => "string",
                }
            )),
        }
    }

    fn blob_reference(&mut self, ty: &TensorType, path: &str, offset: u64) {
        let ty_text = crate::ty_string(ty);
        if ty.num_elements().is_none() {
            self.report(format!("BLOBFILE literal of {ty_text} needs a fixed shape"));
            return;
        }
        if crate::blob::dtype_code(ty.dtype).is_none() {
            self.report(format!(
                "{} cannot be stored in a weights.bin blob",
                ty.dtype
            ));
            return;
        }
        let Some(blobs) = self.blobs else { return };
        match blobs.blob_file(path) {
            None => self.report(format!(
                "BLOBFILE path \"{path}\" is not a loaded blob file"
            )),
            Some(file) => {
                if let Err(e) = file.payload(offset, ty) {
                    self.report(format!("BLOBFILE {ty_text}: {e}"));
                }
            }
        }
    }
}

fn arg_names(signature: &ops::OpSignature) -> String {
    signature
        .args
        .iter()
        .map(|a| a.name)
        .collect::<Vec<_>>()
        .join(", ")
}

fn type_string(ty: &ValueType) -> String {
    let mut s = String::new();
    crate::text::value_type_string(ty, &mut s);
    s
}
