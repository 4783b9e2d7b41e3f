//! Shape rules and construction errors of the graph.

use aneforge::graph::{
    self, concat, constant, einsum, input, sdpa, Conv2dParams, DType, GraphError, HostArray,
    Pool2dParams, Tensor,
};

fn f32_in(name: &str, shape: &[usize]) -> Tensor {
    input(name, shape, DType::F32).unwrap()
}

fn message(e: GraphError) -> String {
    e.to_string()
}

#[test]
fn broadcasting_follows_numpy() {
    let a = f32_in("a", &[2, 1, 3]);
    let b = f32_in("b", &[4, 1]);
    assert_eq!(a.add(&b).unwrap().shape(), &[2, 4, 3]);
    let s = a.add_scalar(1.0).unwrap();
    assert_eq!(s.shape(), &[2, 1, 3]);
    let err = message(a.mul(&f32_in("c", &[2, 2])).unwrap_err());
    assert!(
        err.contains("mul") && err.contains("[2, 1, 3]") && err.contains("[2, 2]"),
        "{err}"
    );
}

#[test]
fn rank_above_five_is_an_error() {
    let err = input("x", &[1, 1, 1, 1, 1, 1], DType::F32).unwrap_err();
    assert!(message(err).contains("rank 6"));
    let x = f32_in("x", &[2, 2, 2, 2, 2]);
    let err = x.expand_dims(&[0]).unwrap_err();
    assert!(message(err).contains("rank 6"));
    let err = HostArray::from_f32(&[1, 1, 1, 1, 1, 1], vec![0.0]).unwrap_err();
    assert!(message(err).contains("rank 6"));
}

#[test]
fn data_length_and_names_are_checked() {
    assert!(matches!(
        HostArray::from_f32(&[2, 3], vec![0.0; 5]),
        Err(GraphError::DataLength {
            len: 5,
            expected: 6,
            ..
        })
    ));
    assert!(input("1x", &[1], DType::F32).is_err());
    assert!(input("x-y", &[1], DType::F32).is_err());
    assert!(graph::parameter("", HostArray::scalar_f32(1.0)).is_err());
    assert!(input("zero", &[2, 0], DType::F32).is_err());
}

#[test]
fn matmul_and_linear_shapes() {
    let a = f32_in("a", &[3, 1, 4, 5]);
    let b = f32_in("b", &[2, 5, 6]);
    assert_eq!(a.matmul(&b).unwrap().shape(), &[3, 2, 4, 6]);
    assert_eq!(
        a.matmul_t(&f32_in("c", &[6, 4]), true, true)
            .unwrap()
            .shape(),
        &[3, 1, 5, 6]
    );
    let err = message(a.matmul(&f32_in("d", &[4, 6])).unwrap_err());
    assert!(err.contains("matmul") && err.contains("5 vs 4"), "{err}");
    let w = f32_in("w", &[7, 5]);
    assert_eq!(a.linear(&w, None).unwrap().shape(), &[3, 1, 4, 7]);
    assert!(a.linear(&w, Some(&f32_in("bias", &[5]))).is_err());
}

#[test]
fn conv_and_pool_shapes() {
    let x = f32_in("x", &[1, 4, 9, 7]);
    let w = f32_in("w", &[6, 2, 3, 3]);
    let p = Conv2dParams {
        stride: [2, 1],
        padding: [1, 0],
        dilation: [1, 2],
        groups: 2,
    };
    assert_eq!(x.conv2d(&w, None, p).unwrap().shape(), &[1, 6, 5, 3]);
    let err = message(x.conv2d(&f32_in("w3", &[6, 3, 3, 3]), None, p).unwrap_err());
    assert!(err.contains("conv"), "{err}");
    let pool = x.max_pool2d(Pool2dParams::new([2, 2])).unwrap();
    assert_eq!(pool.shape(), &[1, 4, 4, 3]);
    let ceil = Pool2dParams {
        ceil_mode: true,
        ..Pool2dParams::new([2, 2])
    };
    assert_eq!(x.avg_pool2d(ceil, true).unwrap().shape(), &[1, 4, 5, 4]);
}

#[test]
fn reductions_and_layout() {
    let x = f32_in("x", &[2, 3, 4]);
    assert_eq!(x.sum(&[-1, 0], false).unwrap().shape(), &[3]);
    assert_eq!(x.mean(&[1], true).unwrap().shape(), &[2, 1, 4]);
    assert_eq!(x.argmax(1, false).unwrap().dtype(), DType::I32);
    assert!(x.sum(&[1, -2], false).is_err());
    assert!(x.sum(&[3], false).is_err());
    assert_eq!(x.reshape(&[4, -1]).unwrap().shape(), &[4, 6]);
    assert!(x.reshape(&[5, -1]).is_err());
    assert_eq!(x.transpose(&[2, 0, 1]).unwrap().shape(), &[4, 2, 3]);
    assert!(x.transpose(&[0, 0, 1]).is_err());
    let parts = x.split(&[1, 2], 1).unwrap();
    assert_eq!(parts[1].shape(), &[2, 2, 4]);
    assert_eq!(concat(&parts, 1).unwrap().shape(), &[2, 3, 4]);
    assert_eq!(
        x.broadcast_to(&[5, 2, 3, 4]).unwrap().shape(),
        &[5, 2, 3, 4]
    );
    assert_eq!(x.squeeze(&[]).unwrap().shape(), &[2, 3, 4]);
    assert!(x.squeeze(&[0]).is_err());
}

#[test]
fn einsum_shapes() {
    let q = f32_in("q", &[2, 3, 5, 8]);
    let k = f32_in("k", &[2, 3, 7, 8]);
    assert_eq!(
        einsum("bhqd,bhkd->bhqk", &[&q, &k]).unwrap().shape(),
        &[2, 3, 5, 7]
    );
    let m = f32_in("m", &[4, 6]);
    assert_eq!(einsum("ij->ji", &[&m]).unwrap().shape(), &[6, 4]);
    assert_eq!(einsum("ij->", &[&m]).unwrap().shape(), &[] as &[usize]);
    assert!(einsum("ii->i", &[&f32_in("s", &[3, 3])]).is_err());
    assert!(einsum("ij,jk->ik", &[&m, &m]).is_err());
}

#[test]
fn sdpa_checks_operands() {
    let q = f32_in("q", &[2, 4, 5, 8]);
    let k = f32_in("k", &[2, 4, 7, 8]);
    let v = f32_in("v", &[2, 4, 7, 3]);
    assert_eq!(
        sdpa(&q, &k, &v, None, true, None).unwrap().shape(),
        &[2, 4, 5, 3]
    );
    let mask = input("mask", &[1, 1, 5, 7], DType::Bool).unwrap();
    assert!(sdpa(&q, &k, &v, Some(&mask), false, None).is_ok());
    let bad_mask = f32_in("bad", &[2, 4, 5, 6]);
    assert!(sdpa(&q, &k, &v, Some(&bad_mask), false, None).is_err());
    assert!(
        sdpa(&k, &q, &q, None, true, None).is_err(),
        "causal needs L <= S"
    );
}

#[test]
fn dtype_rules() {
    let i = input("i", &[3], DType::I32).unwrap();
    let f = f32_in("f", &[3]);
    let err = message(i.add(&f).unwrap_err());
    assert!(err.contains("add") && err.contains("i32, f32"), "{err}");
    assert!(i.relu().is_err());
    assert_eq!(i.add_scalar(2.0).unwrap().dtype(), DType::I32);
    assert!(i.add_scalar(0.5).is_err());
    assert_eq!(f.gt(&f).unwrap().dtype(), DType::Bool);
    let c = f.gt(&f).unwrap();
    assert!(c.select(&f, &i).is_err());
    assert_eq!(f.gather(&i, 0).unwrap().shape(), &[3]);
    assert!(f.gather(&f, 0).is_err());
}

#[test]
fn deep_chains_drop_without_recursion() {
    let mut t = constant(HostArray::scalar_f32(1.0));
    for _ in 0..200_000 {
        t = t.add_scalar(1.0).unwrap();
    }
    drop(t);
}

mod never_panics {
    use super::*;
    use aneforge::graph::{ConvAttrs, PadMode, PoolAttrs, PoolKind};
    use proptest::prelude::*;

    fn dim() -> impl Strategy<Value = usize> {
        prop_oneof![16 => 1usize..5, 1 => Just(0), 1 => Just(usize::MAX / 3)]
    }

    fn shape() -> impl Strategy<Value = Vec<usize>> {
        proptest::collection::vec(dim(), 0..7)
    }

    fn attr() -> impl Strategy<Value = usize> {
        prop_oneof![8 => 0usize..4, 1 => Just(usize::MAX / 2), 1 => Just(usize::MAX)]
    }

    fn axis() -> impl Strategy<Value = isize> {
        prop_oneof![8 => -6isize..6, 1 => Just(isize::MIN), 1 => Just(isize::MAX)]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// Whatever shapes and attributes arrive from data, construction returns `Ok` or `Err`.
        #[test]
        fn builders_return_errors_not_panics(
            sa in shape(), sb in shape(), sc in shape(),
            a1 in attr(), a2 in attr(), a3 in attr(), a4 in attr(),
            ax in axis(), ay in axis(),
            eq in prop_oneof![Just("ij,jk->ik"), Just("bhqd,bhkd->bhqk"), Just("ij->ji"), Just("i,i->"), Just("a..b->b"), Just("ii->i")],
        ) {
            let (Ok(x), Ok(y), Ok(z)) = (
                input("x", &sa, DType::F32),
                input("y", &sb, DType::F32),
                input("z", &sc, DType::F32),
            ) else {
                return Ok(());
            };
            let _ = x.add(&y);
            let _ = x.matmul_t(&y, a1 % 2 == 0, a2 % 2 == 0);
            let _ = x.linear(&y, Some(&z));
            let _ = x.reshape(&[a1 as isize, -1]);
            let _ = x.reshape(&[-1, ax]);
            let _ = x.transpose(&[a1, a2, a3]);
            let _ = x.sum(&[ax, ay], a1 % 2 == 0);
            let _ = x.argmax(ax, true);
            let _ = x.softmax(ay);
            let _ = x.squeeze(&[ax]);
            let _ = x.expand_dims(&[ax, ay]);
            let _ = x.flatten(ax, ay);
            let _ = x.broadcast_to(&sb);
            let _ = x.narrow(ax, a1, a2);
            let _ = x.split(&[a1, a2], ax);
            let _ = x.chunk(a1, ay);
            let _ = x.slice(&[a1, a2], &[a3, a4], &[a2, a1]);
            let _ = x.slice_update(&y, &[a1, a2, a3]);
            let _ = x.pad(&[(a1, a2), (a3, a4)], PadMode::Reflect, 0.0);
            let _ = x.tile(&[a1, a2]);
            let _ = x.space_to_depth(a1);
            let _ = x.depth_to_space(a2);
            let _ = x.cumsum(ax, true, false);
            let _ = x.layer_norm(&[ax], Some(&y), None, 1e-5);
            let _ = x.group_norm(a1, Some(&y), Some(&z), 1e-5);
            let _ = x.batch_norm(&y, &y, None, Some(&z), 1e-5);
            let _ = x.l2_normalize(ax, 1e-12);
            let _ = x.log_softmax(ay);
            let _ = x.upsample_nearest2d(a1, a2);
            let _ = x.upsample_bilinear2d(a1, a2, true);
            let attrs = ConvAttrs { strides: vec![a1, a2], pads: vec![(a3, a4), (a1, a2)], dilations: vec![a4, a3], groups: a2 };
            let _ = x.conv(&y, Some(&z), attrs.clone());
            let _ = x.conv_transpose2d(&y, None, graph::ConvTranspose2dParams {
                stride: [a1, a2], padding: [a3, a4], output_padding: [a2, a1], dilation: [a4, a1], groups: a3,
            });
            let _ = x.pool(PoolAttrs { kind: PoolKind::Avg { count_pad: true }, kernel: vec![a1, a2], strides: vec![a3, a4], pads: vec![(a1, a1), (a2, a2)], ceil_mode: a1 % 2 == 0 });
            let _ = sdpa(&x, &y, &z, None, a1 % 2 == 0, Some(0.5));
            let _ = einsum(eq, &[&x, &y]);
            let _ = einsum(eq, &[&x]);
            let _ = concat(&[x.clone(), y.clone(), z.clone()], ax);
        }
    }
}
