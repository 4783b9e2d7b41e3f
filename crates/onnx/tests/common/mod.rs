//! Builders of small ONNX models for the importer's tests.
#![allow(dead_code)]

use aneforge_onnx::proto::{
    tensor_proto::DataType, tensor_shape_proto::dimension, tensor_shape_proto::Dimension,
    type_proto, TensorShapeProto, TypeProto, ValueInfoProto,
};

/// A float tensor value `name` with fixed (`Ok`) or symbolic (`Err`) dimensions.
pub fn value_info(name: &str, dims: &[Result<i64, &str>]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(DataType::Float as i32),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|d| Dimension {
                            value: Some(match d {
                                Ok(v) => dimension::Value::DimValue(*v),
                                Err(p) => dimension::Value::DimParam(p.to_string()),
                            }),
                            ..Dimension::default()
                        })
                        .collect(),
                }),
            })),
            ..TypeProto::default()
        }),
        ..ValueInfoProto::default()
    }
}
