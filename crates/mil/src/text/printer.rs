//! [`print`]: a [`Program`] as `model.mil` text, laid out as Apple's compiled `model.mil` is
//! (functions indented 4, statements 12, the closing `} -> (..);` 8, no newline after the final
//! `}`), with literals spelled the `program(1.3)` way: `fp16(0x1p-1)`, `string("x")`,
//! `tensor<int32, [2, 2]>([[1, 2], [3, 4]])`.

use super::float::format_hex;
use super::lexer::escape;
use crate::ast::*;

const FUNCTION_INDENT: usize = 4;
const STATEMENT_INDENT: usize = 12;
const FUNCTION_CLOSE_INDENT: usize = 8;
const NESTED_INDENT_STEP: usize = 4;

/// Deterministic MIL text for `program`; [`super::parse`] reads it back to an equal program.
pub fn print(program: &Program) -> String {
    let mut out = String::new();
    out.push_str("program(");
    out.push_str(&program.version);
    out.push_str(")\n");
    if !program.attributes.is_empty() {
        attribute_list(&program.attributes, &mut out);
        out.push('\n');
    }
    out.push_str("{\n");
    for function in &program.functions {
        print_function(function, &mut out);
    }
    out.push('}');
    out
}

fn indent(n: usize, out: &mut String) {
    out.extend(std::iter::repeat_n(' ', n));
}

fn print_function(f: &Function, out: &mut String) {
    indent(FUNCTION_INDENT, out);
    out.push_str("func ");
    out.push_str(&f.name);
    out.push('<');
    out.push_str(&f.opset);
    out.push_str(">(");
    named_values(&f.inputs, out);
    out.push(')');
    if !f.attributes.is_empty() {
        out.push_str(" [");
        for (i, (name, lit)) in f.attributes.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            out.push_str(name);
            out.push_str(" = ");
            compound_literal(lit, out);
        }
        out.push(']');
    }
    out.push_str(" {\n");
    for op in &f.body.operations {
        operation(op, STATEMENT_INDENT, out);
    }
    indent(FUNCTION_CLOSE_INDENT, out);
    block_outputs(&f.body.outputs, out);
    out.push_str(";\n");
}

fn named_values(values: &[NamedValue], out: &mut String) {
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        value_type(&v.ty, out);
        out.push(' ');
        out.push_str(&v.name);
    }
}

fn block_outputs(outputs: &[String], out: &mut String) {
    out.push_str("} -> (");
    out.push_str(&outputs.join(", "));
    out.push(')');
}

/// `type a, type b = op(args)[attrs];` — several outputs are listed without parentheses, the form
/// Apple's compiler writes and its loader requires.
fn operation(op: &Operation, depth: usize, out: &mut String) {
    indent(depth, out);
    if !op.outputs.is_empty() {
        named_values(&op.outputs, out);
        out.push_str(" = ");
    }
    out.push_str(&op.op_type);
    out.push('(');
    for (i, (name, arg)) in op.inputs.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(name);
        out.push_str(" = ");
        argument(arg, out);
    }
    out.push(')');
    if !op.attributes.is_empty() {
        attribute_list(&op.attributes, out);
    }
    for block in &op.blocks {
        // Control-flow blocks: aneforge's own spelling (not checked against Apple's).
        out.push_str(" block(");
        named_values(&block.inputs, out);
        out.push_str(") {\n");
        for nested in &block.operations {
            operation(nested, depth + NESTED_INDENT_STEP, out);
        }
        indent(depth, out);
        block_outputs(&block.outputs, out);
    }
    out.push_str(";\n");
}

fn attribute_list(attributes: &[(String, Literal)], out: &mut String) {
    out.push('[');
    for (i, (name, lit)) in attributes.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(name);
        out.push_str(" = ");
        literal(lit, out);
    }
    out.push(']');
}

fn argument(arg: &Argument, out: &mut String) {
    match arg {
        Argument::Name(n) => out.push_str(n),
        Argument::Literal(l) => literal(l, out),
        Argument::List(items) => {
            out.push('(');
            for (i, a) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                argument(a, out);
            }
            out.push(')');
        }
    }
}

pub(crate) fn value_type(ty: &ValueType, out: &mut String) {
    match ty {
        ValueType::Tensor(t) => out.push_str(&crate::ty_string(t)),
        ValueType::Tuple(items) => {
            out.push_str("tuple<");
            for (i, t) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                value_type(t, out);
            }
            out.push('>');
        }
        ValueType::Dict { key, value } => {
            out.push_str(&format!("dict<{key}, {value}>"));
        }
    }
}

fn literal(lit: &Literal, out: &mut String) {
    match lit {
        Literal::Tensor { ty, data } => {
            out.push_str(&crate::ty_string(ty));
            out.push('(');
            if ty.is_scalar() {
                element(data, 0, out);
            } else {
                let shape = ty.static_shape().unwrap_or_default();
                let mut next = 0;
                nested(data, &shape, &mut next, out);
            }
            out.push(')');
        }
        Literal::Blob { ty, path, offset } => {
            out.push_str(&crate::ty_string(ty));
            out.push_str("(BLOBFILE(path = string(\"");
            escape(path, out);
            out.push_str(&format!("\"), offset = uint64({offset})))"));
        }
        Literal::Tuple(items) => {
            out.push('(');
            for (i, l) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                literal(l, out);
            }
            out.push(')');
        }
        Literal::Dict {
            key,
            value,
            entries,
        } => {
            out.push_str(&format!("dict<{key}, {value}>({{"));
            for (i, (k, v)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push('{');
                bare_scalar(k, out);
                out.push_str(", ");
                bare_scalar(v, out);
                out.push('}');
            }
            out.push_str("})");
        }
    }
}

/// A dict entry's key or value: bare (`"k"`, `3`) when it is a scalar, typed otherwise.
fn bare_scalar(lit: &Literal, out: &mut String) {
    match lit {
        Literal::Tensor { ty, data } if ty.is_scalar() && data.len() == 1 => element(data, 0, out),
        other => literal(other, out),
    }
}

/// Elements as nested `[...]` following `shape`; a shape that disagrees with the data (which
/// validation rejects) is printed flat so nothing is lost.
fn nested(data: &TensorData, shape: &[usize], next: &mut usize, out: &mut String) {
    let expected = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    if shape.is_empty() || expected != Some(data.len()) {
        out.push('[');
        for i in 0..data.len() {
            if i > 0 {
                out.push_str(", ");
            }
            element(data, i, out);
        }
        out.push(']');
        return;
    }
    nested_level(data, shape, next, out);
}

fn nested_level(data: &TensorData, shape: &[usize], next: &mut usize, out: &mut String) {
    out.push('[');
    let (&n, rest) = shape.split_first().unwrap_or((&0, &[]));
    for i in 0..n {
        if i > 0 {
            out.push_str(", ");
        }
        if rest.is_empty() {
            element(data, *next, out);
            *next += 1;
        } else {
            nested_level(data, rest, next, out);
        }
    }
    out.push(']');
}

fn element(data: &TensorData, i: usize, out: &mut String) {
    match data {
        TensorData::Float(v) => {
            if let Some(x) = v.get(i) {
                out.push_str(&format_hex(*x));
            }
        }
        TensorData::Int(v) => {
            if let Some(x) = v.get(i) {
                out.push_str(&x.to_string());
            }
        }
        TensorData::Bool(v) => {
            if let Some(x) = v.get(i) {
                out.push_str(if *x { "true" } else { "false" });
            }
        }
        TensorData::Str(v) => {
            if let Some(x) = v.get(i) {
                out.push('"');
                escape(x, out);
                out.push('"');
            }
        }
    }
}

fn compound_literal(lit: &CompoundLiteral, out: &mut String) {
    compound_type(&lit.ty, out);
    out.push('(');
    compound_value(&lit.value, out);
    out.push(')');
}

fn compound_type(ty: &CompoundType, out: &mut String) {
    match ty {
        CompoundType::Tensor(t) => out.push_str(&crate::ty_string(t)),
        CompoundType::Tuple(items) => {
            out.push_str("tuple<");
            for (i, t) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                compound_type(t, out);
            }
            out.push('>');
        }
        CompoundType::Dict(k, v) => {
            out.push_str("dict<");
            compound_type(k, out);
            out.push_str(", ");
            compound_type(v, out);
            out.push('>');
        }
        CompoundType::List(element, len) => {
            out.push_str("list<");
            compound_type(element, out);
            match len {
                Some(n) => out.push_str(&format!(", {n}>")),
                None => out.push_str(", ?>"),
            }
        }
    }
}

fn compound_value(v: &CompoundValue, out: &mut String) {
    let seq = |items: &[CompoundValue], open: char, close: char, out: &mut String| {
        out.push(open);
        for (i, x) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            compound_value(x, out);
        }
        out.push(close);
    };
    match v {
        CompoundValue::Str(s) => {
            out.push('"');
            escape(s, out);
            out.push('"');
        }
        CompoundValue::Int(i) => out.push_str(&i.to_string()),
        CompoundValue::Float(f) => out.push_str(&format_hex(*f)),
        CompoundValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        CompoundValue::List(items) => seq(items, '[', ']', out),
        CompoundValue::Tuple(items) => seq(items, '(', ')', out),
        CompoundValue::Dict(entries) => {
            out.push('{');
            for (i, (k, val)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push('{');
                compound_value(k, out);
                out.push_str(", ");
                compound_value(val, out);
                out.push('}');
            }
            out.push('}');
        }
    }
}
