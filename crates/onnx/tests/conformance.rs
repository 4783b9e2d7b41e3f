//! ONNX's backend node test cases (`node/<case>/model.onnx` with `test_data_set_0/*.pb`, as the
//! onnx wheel ships them; `scripts/fetch-models.sh onnx-node-tests`) imported and run on the CPU
//! target, compared with ONNX's own expected outputs at its default tolerances.
//!
//! `conformance_expected_cases_pass` runs the cases listed in `tests/conformance/expected_pass.txt`
//! and fails if any of them fails. With `ANEFORGE_ONNX_REPORT=1`, `conformance_report` runs every
//! case and rewrites `docs/onnx.md` (the per-op table) and the expected list.

use aneforge::engine::HostSlice;
use aneforge::{compile_named, CompileOptions, HostArray};
use aneforge_onnx::proto::TensorProto;
use aneforge_onnx::{
    const_from_proto, import_model, read_model, Const, Data, ImportOptions, OnnxError,
};
use prost::Message;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const EXPECTED: &str = include_str!("conformance/expected_pass.txt");
const RTOL: f64 = 1e-3;
const ATOL: f64 = 1e-7;
/// Ops whose every output sums a whole axis of products in float32. ONNX's expected outputs for
/// them come from numpy's complex64 FFT, whose round-off is of the order of one float32 ulp of
/// the largest output: test_dft_inverse expects 1.9e-7 where the exact value is 0, and
/// onnxruntime differs from the data by up to 6.4e-7 of the largest output (test_dft). Their
/// absolute tolerance is one such ulp (`f32::EPSILON` times the largest expected magnitude)
/// instead of `ATOL`.
const WHOLE_AXIS_SUMS: &[&str] = &["DFT", "STFT"];

/// Cases whose shipped expected outputs contradict the op's specification, with expected outputs
/// from onnxruntime on the case's inputs (`tools/fixtures/onnx/conformance_errata.py`, which
/// checks that only the contradicted values differ).
fn errata_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/onnx/out/conformance_errata")
}

#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    Pass,
    Fail(String),
    Unsupported(String),
}

fn node_dir() -> Option<PathBuf> {
    let model = aneforge_models::testing::model_or_skip("onnx/backend-node-tests")?;
    Some(model.dir().join("node"))
}

fn read_pb(path: &Path) -> Result<Const, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let t =
        TensorProto::decode(bytes.as_slice()).map_err(|e| format!("{}: {e}", path.display()))?;
    const_from_proto(&t).map_err(|e| format!("{}: {e}", path.display()))
}

fn data_files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut files: Vec<(usize, PathBuf)> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let index = name
                        .strip_prefix(prefix)?
                        .strip_suffix(".pb")?
                        .parse()
                        .ok()?;
                    Some((index, e.path()))
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files.into_iter().map(|(_, p)| p).collect()
}

fn values_of(c: &Const) -> Vec<f64> {
    match &c.data {
        Data::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        Data::Int(v) => v.iter().map(|&x| x as f64).collect(),
        Data::Bool(v) => v.iter().map(|&x| f64::from(u8::from(x))).collect(),
    }
}

fn array_values(a: &HostArray) -> Vec<f64> {
    if let Some(v) = a.to_f32_vec() {
        return v.iter().map(|&x| f64::from(x)).collect();
    }
    if let Some(v) = a.as_i32() {
        return v.iter().map(|&x| f64::from(x)).collect();
    }
    a.as_bool()
        .map(|v| v.iter().map(|&x| f64::from(u8::from(x))).collect())
        .unwrap_or_default()
}

fn compare(
    name: &str,
    got: &[f64],
    got_shape: &[usize],
    want: &Const,
    whole_axis_sums: bool,
) -> Result<(), String> {
    if got_shape != want.shape.as_slice() {
        return Err(format!(
            "output {name}: shape {got_shape:?}, expected {:?}",
            want.shape
        ));
    }
    let want = values_of(want);
    let atol = if whole_axis_sums {
        let largest = want.iter().fold(0f64, |m, w| m.max(w.abs()));
        ATOL.max(f64::from(f32::EPSILON) * largest)
    } else {
        ATOL
    };
    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
        let close = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= atol + RTOL * w.abs();
        if !close {
            return Err(format!("output {name}[{i}]: {g}, expected {w}"));
        }
    }
    Ok(())
}

fn run_case(dir: &Path) -> Outcome {
    let model = match read_model(&dir.join("model.onnx")) {
        Ok(m) => m,
        Err(e) => return Outcome::Fail(e.to_string()),
    };
    // the test data of sequence-, map- and optional-typed values are not TensorProtos
    if let Some(g) = &model.graph {
        let not_tensor = g.input.iter().chain(&g.output).find(|i| {
            !matches!(
                i.r#type.as_ref().and_then(|t| t.value.as_ref()),
                Some(aneforge_onnx::proto::type_proto::Value::TensorType(_))
            )
        });
        if let Some(i) = not_tensor {
            return Outcome::Unsupported(format!(
                "graph value {:?} is a sequence, map or optional (only tensors)",
                i.name()
            ));
        }
    }
    let data = dir.join("test_data_set_0");
    let inputs: Vec<Const> = match data_files(&data, "input_")
        .iter()
        .map(|p| read_pb(p))
        .collect()
    {
        Ok(v) => v,
        Err(e) => return Outcome::Unsupported(format!("test data: {e}")),
    };
    let case = dir.file_name().unwrap_or_default().to_string_lossy();
    let corrected = data_files(&errata_dir(), &format!("{case}_output_"));
    let expected_files = if corrected.is_empty() {
        data_files(&data, "output_")
    } else {
        corrected
    };
    let expected: Vec<Const> = match expected_files.iter().map(|p| read_pb(p)).collect() {
        Ok(v) => v,
        Err(e) => return Outcome::Unsupported(format!("test data: {e}")),
    };
    let graph = model
        .graph
        .as_ref()
        .expect("read_model rejects graph-less models");
    let initialized: std::collections::HashSet<&str> =
        graph.initializer.iter().map(|t| t.name()).collect();
    let input_names: Vec<String> = graph
        .input
        .iter()
        .filter(|i| !initialized.contains(i.name()))
        .map(|i| i.name().to_string())
        .collect();
    let declared = |infos: Vec<&aneforge_onnx::proto::ValueInfoProto>| -> Vec<i32> {
        infos
            .iter()
            .map(|i| match i.r#type.as_ref().and_then(|t| t.value.as_ref()) {
                Some(aneforge_onnx::proto::type_proto::Value::TensorType(t)) => t.elem_type(),
                _ => 0,
            })
            .collect()
    };
    let input_types = declared(
        graph
            .input
            .iter()
            .filter(|i| !initialized.contains(i.name()))
            .collect(),
    );
    let inputs: Vec<Const> = inputs
        .into_iter()
        .zip(input_types.iter().chain(std::iter::repeat(&0)))
        .map(|(c, &t)| bfloat16_bits(c, t))
        .collect();
    let output_types = declared(graph.output.iter().collect());
    let expected: Vec<Const> = expected
        .into_iter()
        .zip(output_types.iter().chain(std::iter::repeat(&0)))
        .map(|(c, &t)| bfloat16_bits(c, t))
        .collect();
    if input_names.len() != inputs.len() {
        return Outcome::Unsupported(format!(
            "{} graph inputs, {} input files (optional inputs)",
            input_names.len(),
            inputs.len()
        ));
    }
    if expected.iter().any(|c| c.shape.contains(&0)) {
        return Outcome::Unsupported("empty outputs".into());
    }
    // Inputs that determine shapes (axes, sizes, scales, pads, ...) must be known when the
    // program is compiled: empty inputs (which no program can take) are bound as constants from
    // the start, and each graph input an import names as needing a constant is bound and the
    // case imported again.
    let mut bound: Vec<String> = Vec::new();
    for (name, c) in input_names.iter().zip(&inputs) {
        if c.shape.contains(&0) {
            bound.push(name.clone());
        }
    }
    let import = |bound: &[String]| -> Result<aneforge_onnx::Imported, Outcome> {
        let constant_inputs: Vec<(String, Const)> = input_names
            .iter()
            .zip(&inputs)
            .filter(|(n, _)| bound.contains(n))
            .map(|(n, c)| (n.clone(), c.clone()))
            .collect();
        let options = ImportOptions {
            input_shapes: input_names
                .iter()
                .cloned()
                .zip(inputs.iter().map(|c| c.shape.clone()))
                .filter(|(n, _)| !bound.contains(n))
                .collect(),
            constant_inputs,
            ..ImportOptions::default()
        };
        import_model(&model, &options).map_err(|e| match e {
            OnnxError::Unsupported { .. }
            | OnnxError::UnsupportedModel(_)
            | OnnxError::UnsupportedInput { .. } => Outcome::Unsupported(e.to_string()),
            e => Outcome::Fail(e.to_string()),
        })
    };
    let imported = loop {
        match import(&bound) {
            Ok(i) => break i,
            Err(Outcome::Unsupported(m)) if m.contains("must be a constant") => {
                let named = m.split('"').find(|part| {
                    input_names.iter().any(|n| n == part) && !bound.iter().any(|b| b == part)
                });
                let scalars_and_ints: Vec<String> = input_names
                    .iter()
                    .zip(&inputs)
                    .filter(|(n, c)| {
                        !bound.contains(n) && (matches!(c.data, Data::Int(_)) || c.shape.is_empty())
                    })
                    .map(|(n, _)| n.clone())
                    .collect();
                match named {
                    Some(name) => bound.push(name.to_string()),
                    // a value computed from inputs: bind the integer and scalar inputs at once
                    None if !scalars_and_ints.is_empty() => bound.extend(scalars_and_ints),
                    None => return Outcome::Unsupported(m),
                }
            }
            Err(o) => return o,
        }
    };
    if imported.outputs.len() != expected.len() {
        return Outcome::Fail(format!(
            "{} outputs, {} expected",
            imported.outputs.len(),
            expected.len()
        ));
    }
    // outputs that folded to constants are compared on the host; the rest run on the CPU engine
    let mut results: Vec<Option<(Vec<f64>, Vec<usize>)>> = imported
        .outputs
        .iter()
        .map(|o| {
            o.tensor
                .constant_value()
                .map(|a| (array_values(a), a.shape().to_vec()))
        })
        .collect();
    let to_run: Vec<(&str, &aneforge::Tensor)> = imported
        .outputs
        .iter()
        .filter(|o| o.tensor.constant_value().is_none())
        .map(|o| (o.port.as_str(), &o.tensor))
        .collect();
    if !to_run.is_empty() {
        let mut program = match compile_named(&to_run, &CompileOptions::default()) {
            Ok(p) => p,
            Err(e) => return Outcome::Fail(format!("compile: {e}")),
        };
        let program_inputs: Vec<String> = program
            .input_names()
            .iter()
            .map(|s| s.to_string())
            .collect();
        for port in &imported.inputs {
            if !program_inputs.contains(&port.port) {
                continue;
            }
            let Some(i) = input_names.iter().position(|n| *n == port.onnx_name) else {
                return Outcome::Fail(format!("no test data for input {}", port.onnx_name));
            };
            let c = &inputs[i];
            let r = match (&c.data, port.dtype) {
                (Data::F32(v), aneforge::DType::F32) => {
                    program.set_input(&port.port, HostSlice::F32(v))
                }
                (Data::Bool(v), aneforge::DType::Bool) => {
                    program.set_input(&port.port, HostSlice::Bool(v))
                }
                (Data::Int(v), aneforge::DType::I32) => {
                    let Ok(narrow) = v
                        .iter()
                        .map(|&x| i32::try_from(x))
                        .collect::<Result<Vec<i32>, _>>()
                    else {
                        return Outcome::Unsupported("input values beyond i32".into());
                    };
                    program.set_input(&port.port, HostSlice::I32(&narrow))
                }
                _ => return Outcome::Fail(format!("input {}: dtype mismatch", port.onnx_name)),
            };
            if let Err(e) = r {
                return Outcome::Fail(format!("input {}: {e}", port.onnx_name));
            }
        }
        if let Err(e) = program.execute() {
            return Outcome::Fail(format!("execute: {e}"));
        }
        for (k, o) in imported.outputs.iter().enumerate() {
            if results[k].is_some() {
                continue;
            }
            let values = match program.read_output(&o.port) {
                Ok(t) => host_values(&t),
                Err(e) => return Outcome::Fail(format!("output {}: {e}", o.onnx_name)),
            };
            results[k] = Some((values, o.tensor.shape().to_vec()));
        }
    }
    for (k, o) in imported.outputs.iter().enumerate() {
        let Some((values, shape)) = &results[k] else {
            return Outcome::Fail(format!("output {} was not computed", o.onnx_name));
        };
        let whole_axis_sums = graph
            .node
            .iter()
            .any(|n| WHOLE_AXIS_SUMS.contains(&n.op_type()));
        if let Err(e) = compare(&o.onnx_name, values, shape, &expected[k], whole_axis_sums) {
            return Outcome::Fail(e);
        }
    }
    Outcome::Pass
}

/// ONNX's test data stores BFLOAT16 tensors as UINT16 tensors of their bits: read as the values
/// the model declares.
fn bfloat16_bits(c: Const, declared: i32) -> Const {
    const UINT16: i32 = 4;
    const BFLOAT16: i32 = 16;
    match (&c.data, c.elem_type, declared) {
        (Data::Int(bits), UINT16, BFLOAT16) => Const {
            data: Data::F32(
                bits.iter()
                    .map(|&b| f32::from_bits((b as u32) << 16))
                    .collect(),
            ),
            elem_type: BFLOAT16,
            shape: c.shape,
        },
        _ => c,
    }
}

fn host_values(t: &aneforge::engine::HostTensor) -> Vec<f64> {
    use aneforge::engine::HostTensor as H;
    match t {
        H::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        H::F16(v) => v.iter().map(|&x| f64::from(x.to_f32())).collect(),
        H::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        H::I8(v) => v.iter().map(|&x| f64::from(x)).collect(),
        H::U8(v) => v.iter().map(|&x| f64::from(x)).collect(),
        H::Bool(v) => v.iter().map(|&x| f64::from(u8::from(x))).collect(),
    }
}

/// With `ANEFORGE_ONNX_CASES=<substring>[,<substring>...]`, runs the cases whose name contains one
/// of them and prints each outcome (nothing is rewritten): the loop for working on one op.
#[test]
fn conformance_cases_matching() {
    let Ok(pattern) = std::env::var("ANEFORGE_ONNX_CASES") else {
        eprintln!("SKIP: set ANEFORGE_ONNX_CASES=<substring>[,...] to run matching cases");
        return;
    };
    let Some(root) = node_dir() else { return };
    let mut cases: Vec<String> = std::fs::read_dir(&root)
        .expect("node directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|c| pattern.split(',').any(|p| c.contains(p)))
        .collect();
    cases.sort();
    let mut passed = 0;
    for case in &cases {
        let outcome = run_guarded(&root.join(case));
        passed += usize::from(outcome == Outcome::Pass);
        eprintln!("{case}: {outcome:?}");
    }
    eprintln!("{passed} of {} pass", cases.len());
}

/// Runs one case, turning a panic into a failure that names it.
fn run_guarded(dir: &Path) -> Outcome {
    match std::panic::catch_unwind(|| run_case(dir)) {
        Ok(o) => o,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Outcome::Fail(format!("panic: {msg}"))
        }
    }
}

fn expected_cases() -> Vec<&'static str> {
    EXPECTED
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn conformance_expected_cases_pass() {
    let Some(root) = node_dir() else { return };
    let cases = expected_cases();
    assert!(!cases.is_empty(), "the expected-pass list is empty");
    let mut failures = Vec::new();
    for case in &cases {
        match run_guarded(&root.join(case)) {
            Outcome::Pass => {}
            other => failures.push(format!("{case}: {other:?}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} expected-pass cases fail:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// The op a case tests: its node's op type, or for a multi-node (expanded) case the op type
/// whose name, lowercased without underscores, is the longest prefix of the case name's.
fn case_op(case: &str, dir: &Path, known: &[String]) -> String {
    let ops: Vec<String> = read_model(&dir.join("model.onnx"))
        .ok()
        .and_then(|m| m.graph)
        .map(|g| g.node.iter().map(|n| n.op_type().to_string()).collect())
        .unwrap_or_default();
    if let [single] = ops.as_slice() {
        return single.clone();
    }
    let rest = case.trim_start_matches("test_").replace('_', "");
    let aliases = [
        ("sce", "SoftmaxCrossEntropyLoss"),
        ("nllloss", "NegativeLogLikelihoodLoss"),
    ];
    if let Some((_, op)) = aliases.iter().find(|(a, _)| rest.starts_with(a)) {
        return op.to_string();
    }
    known
        .iter()
        .filter(|op| rest.starts_with(&op.to_lowercase()))
        .max_by_key(|op| op.len())
        .cloned()
        .unwrap_or_else(|| ops.first().cloned().unwrap_or_else(|| "?".into()))
}

#[test]
fn conformance_report() {
    if std::env::var("ANEFORGE_ONNX_REPORT").map_or(true, |v| v.is_empty() || v == "0") {
        eprintln!("SKIP: set ANEFORGE_ONNX_REPORT=1 to run every case and rewrite docs/onnx.md");
        return;
    }
    let Some(root) = node_dir() else { return };
    let mut cases: Vec<String> = std::fs::read_dir(&root)
        .expect("node directory")
        .flatten()
        .filter(|e| e.path().join("model.onnx").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    cases.sort();
    let mut known: Vec<String> = Vec::new();
    for case in &cases {
        if let Some(g) = read_model(&root.join(case).join("model.onnx"))
            .ok()
            .and_then(|m| m.graph)
        {
            if let [n] = g.node.as_slice() {
                known.push(n.op_type().to_string());
            }
        }
    }
    known.sort();
    known.dedup();
    let mut by_op: BTreeMap<String, Vec<(String, Outcome)>> = BTreeMap::new();
    for case in &cases {
        let dir = root.join(case);
        let outcome = match run_guarded(&dir) {
            Outcome::Fail(m) => Outcome::Fail(m.replace(&root.display().to_string(), "node")),
            Outcome::Unsupported(m) => {
                Outcome::Unsupported(m.replace(&root.display().to_string(), "node"))
            }
            Outcome::Pass => Outcome::Pass,
        };
        by_op
            .entry(case_op(case, &dir, &known))
            .or_default()
            .push((case.clone(), outcome));
    }
    write_report(&by_op, cases.len());
}

/// The heading from which docs/onnx.md is written by hand.
const HAND_WRITTEN: &str = "## Exported and real models";

fn write_report(by_op: &BTreeMap<String, Vec<(String, Outcome)>>, total: usize) {
    let count = |f: fn(&Outcome) -> bool| -> usize {
        by_op.values().flatten().filter(|(_, o)| f(o)).count()
    };
    let pass = count(|o| *o == Outcome::Pass);
    let fail = count(|o| matches!(o, Outcome::Fail(_)));
    let unsupported = count(|o| matches!(o, Outcome::Unsupported(_)));
    let claimed = aneforge_onnx::supported_ops();
    let mut md = String::new();
    md.push_str("# ONNX import: conformance\n\n");
    md.push_str(
        "Generated by `ANEFORGE_ONNX_REPORT=1 cargo test -p aneforge-onnx --test conformance \
         conformance_report` over ONNX's backend node test cases (the onnx 1.17.0 wheel, \
         `scripts/fetch-models.sh onnx-node-tests`), each imported, compiled for the CPU target, \
         run on the CPU engine and compared with ONNX's expected outputs (rtol 1e-3, atol 1e-7; \
         for DFT and STFT, whose expected outputs carry numpy's float32 FFT round-off, atol is \
         one float32 ulp of the largest expected magnitude). The int8 QLinearMatMul cases, whose \
         data wrap around where the specification saturates (onnx/onnx issues 6169 and 7835), \
         are compared with onnxruntime's outputs instead \
         (`tools/fixtures/onnx/conformance_errata.py`). \
         Graph inputs that a node needs as constants (axes, sizes, scales, pads, ...) are bound to \
         the case's input values, since a compiled program is specialised on them; doubles \
         and the narrow floats (FLOAT16, BFLOAT16, FLOAT8*) compute as f32, Cast and \
         QuantizeLinear rounding onto the narrow formats exactly (BFLOAT16 toward zero, as \
         ONNX's test data do), and ONNX's BFLOAT16 test data (stored as UINT16 bits) are read as \
         the values the model declares. Do not edit by hand, except the sections from \
         `## Exported and real models` on, which the report keeps. The cases that pass are \
         listed in `crates/onnx/tests/conformance/expected_pass.txt`; CI fails when one of them \
         fails.\n\n",
    );
    md.push_str(&format!(
        "**{pass} of {total} cases pass ({:.1}%)**; {fail} fail, {unsupported} are unsupported \
         (an op, attribute or dtype the importer reports as unsupported).\n\n",
        100.0 * pass as f64 / total.max(1) as f64
    ));
    md.push_str(
        "| op | claimed | pass | fail | unsupported | first failure or unsupported reason |\n",
    );
    md.push_str("|---|---|---|---|---|---|\n");
    for (op, cases) in by_op {
        let p = cases.iter().filter(|(_, o)| *o == Outcome::Pass).count();
        let f = cases
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::Fail(_)))
            .count();
        let u = cases.len() - p - f;
        let note = cases
            .iter()
            .find_map(|(c, o)| match o {
                Outcome::Fail(m) => Some(format!("{c}: {m}")),
                _ => None,
            })
            .or_else(|| {
                cases.iter().find_map(|(c, o)| match o {
                    Outcome::Unsupported(m) => Some(format!("{c}: {m}")),
                    _ => None,
                })
            })
            .unwrap_or_default();
        let note: String = note
            .replace('|', "\\|")
            .replace('\n', " ")
            .chars()
            .take(160)
            .collect();
        let is_claimed = if claimed.contains(&op.as_str()) {
            "yes"
        } else {
            ""
        };
        md.push_str(&format!(
            "| {op} | {is_claimed} | {p} | {f} | {u} | {note} |\n"
        ));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = root.join("../../docs/onnx.md");
    // the hand-written sections after the generated table are kept
    let old = std::fs::read_to_string(&doc).unwrap_or_default();
    if let Some(at) = old.find(&format!("\n{HAND_WRITTEN}\n")) {
        md.push_str(&old[at..]);
    }
    std::fs::write(&doc, md).expect("write docs/onnx.md");
    let mut list = String::from(
        "# Backend node cases that pass on the CPU target; conformance_expected_cases_pass fails if\n\
         # one of them fails. Regenerated by ANEFORGE_ONNX_REPORT=1 (see tests/conformance.rs).\n",
    );
    for (case, _) in by_op
        .values()
        .flatten()
        .filter(|(_, o)| *o == Outcome::Pass)
    {
        list.push_str(case);
        list.push('\n');
    }
    std::fs::write(root.join("tests/conformance/expected_pass.txt"), list)
        .expect("write expected_pass.txt");
}
