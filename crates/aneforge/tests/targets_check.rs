//! The program checker on hand-written MIL: each kind of violation is found and named, and a
//! clean program passes.

use aneforge::arch::{check_program, AneArch};

fn check(text: &str, arch: &str) -> Vec<String> {
    let program = aneforge_mil::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    check_program(&program, AneArch::new(arch).unwrap())
        .iter()
        .map(|v| v.to_string())
        .collect()
}

fn program(inputs: &str, body: &str, outputs: &str) -> String {
    format!(
        "program(1.3)\n{{\n    func main<ios18>({inputs}) {{\n{body}\n    }} -> ({outputs});\n}}\n"
    )
}

fn has(found: &[String], value: &str, needle: &str) {
    assert!(
        found
            .iter()
            .any(|v| v.contains(&format!("'{value}'")) && v.contains(needle)),
        "no '{needle}' for {value} in {found:#?}"
    );
}

#[test]
fn a_clean_program_passes() {
    let text = program(
        "tensor<fp16, [2, 8]> x",
        "        tensor<fp16, [2, 8]> r = relu(x = x)[name = string(\"r\")];\n        \
         tensor<fp16, [2, 8]> y = sin(x = r)[name = string(\"y\")];",
        "y",
    );
    assert!(check(&text, "h15").is_empty());
    has(&check(&text, "h14"), "y", "needs the A15/M3 family");
}

#[test]
fn each_violation_is_named() {
    let text = program(
        "tensor<int32, [4]> ids, tensor<fp16, [1, 20000]> wide, tensor<fp16, [8, 4]> t, tensor<fp16, [1, 1, 8, 32]> img",
        "        tensor<fp16, [4, 4]> g = gather(x = t, indices = ids, axis = int32(0))[name = string(\"g\")];\n        \
         tensor<fp16, [1, 20000]> w2 = relu(x = wide)[name = string(\"w2\")];\n        \
         tensor<fp16, [8, 4]> f = floor(x = t)[name = string(\"f\")];\n        \
         tensor<fp16, [8, 4]> m = mul(x = f, y = fp16(0x1p+1))[name = string(\"m\")];\n        \
         tensor<fp16, [8, 4]> s = square(x = t)[name = string(\"s\")];\n        \
         tensor<fp16, [1, 1, 16, 1]> k = const()[name = string(\"k\"), val = tensor<fp16, [1, 1, 16, 1]>([0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0])];\n        \
         tensor<fp16, [1, 1, 14, 1]> kw = const()[name = string(\"kw\"), val = tensor<fp16, [1, 1, 14, 1]>([0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0, 0x1p+0])];\n        \
         tensor<int32, [4]> c = cast(x = t, dtype = string(\"int32\"))[name = string(\"c\")];",
        "g, w2, m, s, t",
    );
    let found = check(&text, "h14");
    has(&found, "ids", "input dtype int32");
    has(&found, "g", "no ANE family runs it");
    has(&found, "wide", "20000 > 16384");
    has(&found, "w2", "20000 > 16384");
    has(&found, "m", "full-shape constant");
    has(&found, "s", "mul(x, x)");
    has(&found, "c", "value dtype int32");
    has(&found, "t", "output that is an input");
    assert!(
        check(&text, "h16").iter().all(|v| !v.contains("20000 > ")),
        "A16 allows 20000"
    );
}

#[test]
fn conv_kernels_matmul_contractions_masks_and_windows() {
    let text = program(
        "tensor<fp16, [1, 2, 4, 40]> x, tensor<fp16, [1, 20000]> a, tensor<fp16, [20000, 2]> b, tensor<fp16, [1, 4, 8]> q, tensor<fp16, [1, 4, 4]> mask, tensor<fp16, [2]> at",
        "        tensor<fp16, [3, 2, 1, 14]> w = const()[name = string(\"w\"), val = tensor<fp16, [3, 2, 1, 14]>(BLOBFILE(path = string(\"@model_path/weights/weight.bin\"), offset = uint64(64)))];\n        \
         tensor<fp16, [1, 3, 4, 27]> y = conv(x = x, weight = w, strides = tensor<int32, [2]>([1, 1]), pad_type = string(\"valid\"), dilations = tensor<int32, [2]>([1, 1]), groups = int32(1))[name = string(\"y\")];\n        \
         tensor<fp16, [1, 2]> p = matmul(x = a, y = b, transpose_x = bool(false), transpose_y = bool(false))[name = string(\"p\")];\n        \
         tensor<fp16, [1, 4, 8]> o = scaled_dot_product_attention(query = q, key = q, value = q, attn_mask = mask)[name = string(\"o\")];\n        \
         tensor<int32, [2]> ai = cast(x = at, dtype = string(\"int32\"))[name = string(\"ai\")];\n        \
         tensor<fp16, [1, 2]> win = slice_by_size(x = a, begin = ai, size = tensor<int32, [2]>([1, 2]))[name = string(\"win\")];",
        "y, p, o, win",
    );
    let found = check(&text, "h15");
    has(&found, "y", "kernel width 14 > 13");
    has(&found, "p", "contraction 20000 > 16384");
    has(&found, "o", "ignores masks");
    has(&found, "win", "data-dependent");
    let a16 = check(&text, "h16");
    assert!(a16.iter().all(|v| !v.contains("kernel width")), "{a16:#?}");
    has(&a16, "o", "ignores masks");
}
