//! Plans whose run-time memory exceeds the limit fail at compile time, naming the op, instead of
//! aborting in the allocator when the program runs. One test: it sets `ANEFORGE_MAX_MEMORY`.
use aneforge_cpu::{compile, BlobStore, CompileOptions, MAX_MEMORY_ENV};
use aneforge_mil::parse;

fn compile_err(text: &str) -> String {
    let program = parse(text).expect("parses");
    match compile(
        &program,
        "main",
        &BlobStore::new(),
        &CompileOptions::default(),
    ) {
        Ok(_) => panic!("compiled:\n{text}"),
        Err(e) => e.to_string(),
    }
}

const OUTER: &str = r#"program(1.3)
{
    func main<ios17>(tensor<fp32, [1048576, 1]> a, tensor<fp32, [1, 1048576]> b) {
            tensor<fp32, [1048576, 1048576]> y = matmul(x = a, y = b)[name = string("outer")];
        } -> (y);
}
"#;

const TILE: &str = r#"program(1.3)
{
    func main<ios17>(tensor<fp32, [1, 1]> x) {
            tensor<int32, [2]> reps = const()[name = string("reps"), val = tensor<int32, [2]>([1048576, 1048576])];
            tensor<fp32, [1048576, 1048576]> y = tile(reps = reps, x = x)[name = string("big_tile")];
        } -> (y);
}
"#;

const SMALL: &str = r#"program(1.3)
{
    func main<ios17>(tensor<fp32, [1024, 1]> a, tensor<fp32, [1, 1024]> b) {
            tensor<fp32, [1024, 1024]> y = matmul(x = a, y = b)[name = string("small_outer")];
        } -> (y);
}
"#;

#[test]
fn plans_over_the_memory_limit_name_the_op() {
    std::env::remove_var(MAX_MEMORY_ENV);
    // 4 TiB results: over three quarters of any machine's RAM
    let err = compile_err(OUTER);
    assert!(err.contains("outer") && err.contains("matmul"), "{err}");
    assert!(err.contains("4398046511104"), "{err}");
    let err = compile_err(TILE);
    assert!(err.contains("big_tile") && err.contains("tile"), "{err}");

    // a 4 MiB result against a 1 MiB limit
    std::env::set_var(MAX_MEMORY_ENV, "1M");
    let err = compile_err(SMALL);
    assert!(
        err.contains("small_outer") && err.contains("1048576"),
        "{err}"
    );
    std::env::set_var(MAX_MEMORY_ENV, "lots");
    let err = compile_err(SMALL);
    assert!(
        err.contains(MAX_MEMORY_ENV) && err.contains("lots"),
        "{err}"
    );
    std::env::set_var(MAX_MEMORY_ENV, "64M");
    let program = parse(SMALL).unwrap();
    compile(
        &program,
        "main",
        &BlobStore::new(),
        &CompileOptions::default(),
    )
    .unwrap();
    std::env::remove_var(MAX_MEMORY_ENV);
}
