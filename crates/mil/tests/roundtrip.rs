//! `parse(print(p)) == p` over random programs, printing is deterministic, and NaN survives.

mod common;

use aneforge_mil::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parse_inverts_print(seed in any::<u64>()) {
        let program = common::program(&mut common::Rng::new(seed));
        let text = print(&program);
        let parsed = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&parsed, &program, "{}", text);
        prop_assert_eq!(print(&parsed), text);
    }
}

#[test]
fn nan_survives_the_trip_in_every_float_dtype() {
    for dtype in [DType::Fp16, DType::Fp32, DType::Fp64, DType::Bf16] {
        let mut f = Function::new("main", "ios18");
        f.body.operations.push(
            Operation::new("const")
                .with_output("c", TensorType::new(dtype, &[2]))
                .with_attribute(
                    "val",
                    Literal::float_tensor(dtype, &[2], vec![f64::NAN, -0.0]),
                ),
        );
        f.body.outputs.push("c".into());
        let p = Program {
            version: "1.3".into(),
            attributes: vec![],
            functions: vec![f],
        };
        let text = print(&p);
        assert!(text.contains("([nan, -0x0p+0])"), "{text}");
        let back = parse(&text).unwrap();
        let Some(Literal::Tensor {
            data: TensorData::Float(v),
            ..
        }) = back.functions[0].body.operations[0].attribute("val")
        else {
            panic!("float literal")
        };
        assert!(v[0].is_nan());
        assert_eq!(v[1].to_bits(), (-0.0f64).to_bits());
    }
}
