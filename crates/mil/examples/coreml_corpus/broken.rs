//! Packages coremltools must reject, each with the fragment of the error it must give.

use crate::builder::*;
use crate::ops::Case;
use aneforge_mil::encode::WEIGHT_BLOB_PATH;
use aneforge_mil::{DType, Literal, Operation};

pub struct Broken {
    pub case: Case,
    /// A fragment of the message coremltools' check must fail with.
    pub expect: &'static str,
    /// Delete the package's weight.bin after export.
    pub drop_weights: bool,
}

fn broken(name: &str, built: Built, expect: &'static str) -> Broken {
    Broken {
        case: (name.to_string(), built),
        expect,
        drop_weights: false,
    }
}

pub fn all() -> Vec<Broken> {
    let dt = DType::Fp16;
    let mut out = Vec::new();

    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 8]));
    b.op("relu", vec![("input", n("x"))], "y", t(dt, &[2, 8]));
    out.push(broken(
        "wrong_argument_name",
        b.finish(&["y"]),
        "KeyError: 'input'",
    ));

    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 8]))
        .input("z", t(DType::Fp32, &[2, 8]));
    b.op(
        "add",
        vec![("x", n("x")), ("y", n("z"))],
        "y",
        t(dt, &[2, 8]),
    );
    out.push(broken(
        "wrong_argument_dtype",
        b.finish(&["y"]),
        "must have the same data type",
    ));

    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 4, 16]));
    b.weight("w", &[16, 8], 1);
    b.op(
        "matmul",
        vec![("x", n("x")), ("y", n("w"))],
        "y",
        t(dt, &[2, 4, 9]),
    );
    out.push(broken(
        "wrong_output_shape",
        b.finish(&["y"]),
        "Mismatch between var types",
    ));

    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 8]));
    b.op("relu", vec![("x", n("x"))], "y", t(DType::Fp32, &[2, 8]));
    out.push(broken(
        "wrong_output_dtype",
        b.finish(&["y"]),
        "Mismatch between var types",
    ));

    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 4, 8]));
    b.op("transpose", vec![("x", n("x"))], "y", t(dt, &[8, 4, 2]));
    out.push(broken(
        "missing_required_argument",
        b.finish(&["y"]),
        "Required input perm is missing",
    ));

    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 8]));
    b.op(
        "relu_with_a_twist",
        vec![("x", n("x"))],
        "y",
        t(dt, &[2, 8]),
    );
    out.push(broken("unknown_op", b.finish(&["y"]), "relu_with_a_twist"));

    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 16]));
    let indices = b
        .blobs
        .add(DType::Uint4, 8 * 16, &[0x21; 64])
        .expect("uint4 blob");
    let lut: Vec<half::f16> = (0..16)
        .map(|i| half::f16::from_f32(i as f32 / 16.0))
        .collect();
    let lut = b.blobs.add_f16(&lut);
    let blob = |dtype, shape: &[usize], offset| {
        aneforge_mil::Argument::Literal(Literal::Blob {
            ty: t(dtype, shape),
            path: WEIGHT_BLOB_PATH.to_string(),
            offset,
        })
    };
    b.push(
        Operation::new("constexpr_lut_to_dense")
            .with_input("indices", blob(DType::Uint4, &[8, 16], indices))
            .with_input("lut", blob(DType::Fp16, &[16, 1], lut))
            .with_output("w", t(dt, &[8, 16]))
            .with_attribute("name", Literal::string("w")),
    );
    b.op(
        "linear",
        vec![("x", n("x")), ("weight", n("w"))],
        "y",
        t(dt, &[2, 8]),
    );
    out.push(broken(
        "lut_wrong_rank",
        b.finish(&["y"]),
        "need to have 2 more dim",
    ));

    let mut b = Builder::new("ios18", dt);
    b.input("x", t(dt, &[2, 16]));
    b.weight("w", &[8, 16], 2);
    b.op(
        "linear",
        vec![("x", n("x")), ("weight", n("w"))],
        "y",
        t(dt, &[2, 8]),
    );
    let mut missing = broken("missing_blob", b.finish(&["y"]), "Could not open");
    missing.drop_weights = true;
    out.push(missing);

    out
}
