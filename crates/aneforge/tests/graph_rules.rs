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
