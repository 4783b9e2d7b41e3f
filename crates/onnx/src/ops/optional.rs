//! `OptionalHasElement` and `OptionalGetElement` on the values the importer holds. Every value is
//! a tensor (optional- and sequence-typed graph inputs are refused, and no `Optional` op builds
//! an empty optional), so an optional here is either a present tensor or a missing input.

use super::{one, Importer};
use crate::error::{invalid, OpResult};
use crate::node::Node;
use crate::proto::tensor_proto::DataType;
use crate::value::{Const, Data, Value};

pub const OPS: &[(&str, Importer)] = &[
    ("OptionalHasElement", has_element),
    ("OptionalGetElement", get_element),
];

/// A scalar bool: whether the input is given (an absent or empty-named input is an empty
/// optional).
fn has_element(n: &Node) -> OpResult<Vec<Value>> {
    let mut c = Const::new(vec![], Data::Bool(vec![n.opt(0).is_some()]))?;
    c.elem_type = DataType::Bool as i32;
    one(Value::Const(c))
}

fn get_element(n: &Node) -> OpResult<Vec<Value>> {
    match n.opt(0) {
        Some(v) => one(v.clone()),
        None => invalid("the optional input is empty"),
    }
}
