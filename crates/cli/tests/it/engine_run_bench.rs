//! `--engine`/`--target` across commands, `aneforge run` on both engines, and the CPU engine's
//! `bench gemm|gemv|conv|attention|overhead` at tiny sizes, as processes.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

const UNAVAILABLE: &str = "error: the ANE engine needs macOS on Apple Silicon, or \
                           ANEFORGE_E5RT_LIB pointing at an e5rt implementation (such as this \
                           repo's simulator)";

fn aneforge(args: &[&str], env: &[(&str, &Path)]) -> Output {
    common::run_with(args, env)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn simulator_library() -> PathBuf {
    e5rt_sim::test_library_path().unwrap_or_else(|e| panic!("{e}"))
}

/// A program adding two fp32 [2, 3] inputs and scaling by an int32 input cast to fp32.
const ADD_PROGRAM: &str = r#"program(1.3)
{
    func main<ios18>(tensor<fp32, [2, 3]> x, tensor<fp32, [2, 3]> y, tensor<int32, [1]> k) {
        tensor<fp32, [2, 3]> s = add(x = x, y = y)[name = string("s")];
        string fp32_dtype = const()[name = string("fp32_dtype"), val = string("fp32")];
        tensor<fp32, [1]> kf = cast(x = k, dtype = fp32_dtype)[name = string("kf")];
        tensor<fp32, [2, 3]> z = mul(x = s, y = kf)[name = string("z")];
    } -> (z);
}
"#;

fn write_npy_f32(path: &Path, shape: &[usize], data: &[f32]) {
    aneforge_models::npy::write(path, shape, data).unwrap();
}

fn write_npy_i32(path: &Path, shape: &[usize], data: &[i32]) {
    let tensor = aneforge::engine::HostTensor::I32(data.to_vec());
    aneforge_models::npy::write_tensor(path, shape, &tensor).unwrap();
}

#[test]
fn run_executes_a_program_directory_and_writes_npy_outputs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("add");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("model.mil"), ADD_PROGRAM).unwrap();
    let x: Vec<f32> = (0..6).map(|i| i as f32 * 0.75 - 2.0).collect();
    let y: Vec<f32> = (0..6).map(|i| 1.5 - i as f32 * 0.3).collect();
    let (xp, yp, kp) = (
        tmp.path().join("x.npy"),
        tmp.path().join("y.npy"),
        tmp.path().join("k.npy"),
    );
    write_npy_f32(&xp, &[2, 3], &x);
    write_npy_f32(&yp, &[2, 3], &y);
    write_npy_i32(&kp, &[1], &[3]);
    let out = tmp.path().join("out");
    let dir_s = dir.to_str().unwrap();
    let inputs = [
        format!("x={}", xp.display()),
        format!("y={}", yp.display()),
        format!("k={}", kp.display()),
    ];
    let mut args = vec!["run", dir_s, "--output-dir", out.to_str().unwrap()];
    for i in &inputs {
        args.extend(["--input", i.as_str()]);
    }
    let o = aneforge(&args, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (shape, z) = aneforge_models::npy::read(out.join("z.npy")).unwrap();
    assert_eq!(shape, vec![2, 3]);
    for i in 0..6 {
        let expected = (x[i] as f64 + y[i] as f64) * 3.0;
        assert!(
            (z[i] as f64 - expected).abs() <= 1e-6 * expected.abs().max(1.0),
            "z[{i}] = {} expected {expected}",
            z[i]
        );
    }
    // no temporary files are left beside the output
    let names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["z.npy".to_string()]);

    let o = aneforge(&["run", dir_s, "--ports"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("input k int32 [1]") && text.contains("output z fp32 [2, 3]"),
        "{text}"
    );

    // bad input is an error naming the file, port and what was expected
    let o = aneforge(
        &[
            "run",
            dir_s,
            "--input",
            &inputs[0],
            "--input",
            &format!("y={}", kp.display()),
        ],
        &[],
    );
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("k.npy") && err.contains("[1]") && err.contains("[2, 3]"),
        "{err}"
    );
    let o = aneforge(
        &["run", dir_s, "--input", &inputs[0], "--input", &inputs[1]],
        &[],
    );
    assert!(
        stderr(&o).contains("no --input for k int32 [1]"),
        "{}",
        stderr(&o)
    );
    let o = aneforge(&["run", dir_s, "--input", "w=a.npy"], &[]);
    assert!(stderr(&o).contains("no input \"w\""), "{}", stderr(&o));
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(empty.join("segment_0")).unwrap();
    let o = aneforge(&["run", empty.to_str().unwrap()], &[]);
    assert!(
        stderr(&o).contains("run each segment_N directory"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir(empty.join("segment_0")).unwrap();
    let o = aneforge(&["run", empty.to_str().unwrap()], &[]);
    assert!(stderr(&o).contains("model.mil"), "{}", stderr(&o));
    let o = aneforge(&["run", dir_s, "--function", "other"], &[]);
    assert!(
        stderr(&o).contains("no function \"other\""),
        "{}",
        stderr(&o)
    );
}

/// `aneforge compile` writes an ANE program; `aneforge run` on the ANE engine (backed by the e5rt
/// simulator) gives exactly the CPU engine's outputs.
#[test]
fn run_on_the_simulated_ane_engine_matches_the_cpu_engine() {
    let tmp = tempfile::tempdir().unwrap();
    let prog = tmp.path().join("mlp");
    let o = aneforge(
        &[
            "compile",
            "mlp",
            "--target",
            "h16",
            "--out",
            prog.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(prog.join("model.mil").is_file(), "one segment expected");
    let o = aneforge(&["run", prog.to_str().unwrap(), "--ports"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut args: Vec<String> = vec!["run".into(), prog.display().to_string()];
    let ports = stdout(&o);
    // lines `input NAME DTYPE [d0, d1, ...]`
    for (i, line) in ports
        .lines()
        .filter(|l| l.starts_with("input "))
        .enumerate()
    {
        let name = line.split_whitespace().nth(1).unwrap();
        let dims = line.split('[').nth(1).unwrap().trim_end_matches(']');
        let shape: Vec<usize> = dims.split(", ").map(|d| d.parse().unwrap()).collect();
        let n: usize = shape.iter().product();
        let data: Vec<f32> = (0..n)
            .map(|j| (((j * 37 + i * 11) % 23) as f32 - 11.0) / 8.0)
            .collect();
        let path = tmp.path().join(format!("in{i}.npy"));
        write_npy_f32(&path, &shape, &data);
        args.push("--input".into());
        args.push(format!("{name}={}", path.display()));
    }
    assert!(args.len() > 2, "{ports}");
    let run = |engine: &str, out: &Path, env: &[(&str, &Path)]| {
        let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
        a.extend(["--engine", engine, "--output-dir", out.to_str().unwrap()]);
        let o = aneforge(&a, env);
        assert!(o.status.success(), "{engine}: {}", stderr(&o));
    };
    let (cpu_out, ane_out) = (tmp.path().join("cpu"), tmp.path().join("ane"));
    run("cpu", &cpu_out, &[]);
    let sim = simulator_library();
    let cache = tmp.path().join("cache");
    run(
        "ane",
        &ane_out,
        &[("ANEFORGE_E5RT_LIB", &sim), ("ANEFORGE_CACHE", &cache)],
    );
    let mut compared = 0;
    for entry in std::fs::read_dir(&cpu_out).unwrap() {
        let name = entry.unwrap().file_name();
        let cpu = std::fs::read(cpu_out.join(&name)).unwrap();
        let ane = std::fs::read(ane_out.join(&name)).unwrap();
        assert_eq!(cpu, ane, "{name:?} differs between the engines");
        // fp16 program outputs are written as float16 .npy
        assert!(String::from_utf8_lossy(&cpu[..64]).contains("'<f2'"));
        compared += 1;
    }
    assert!(compared > 0);
}

#[test]
fn engine_ane_without_a_runtime_fails_with_the_reason_on_every_command() {
    if cfg!(target_os = "macos") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("add");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("model.mil"), ADD_PROGRAM).unwrap();
    let mut inputs = Vec::new();
    for (name, shape) in [("x", [2usize, 3]), ("y", [2, 3])] {
        let path = tmp.path().join(format!("{name}.npy"));
        write_npy_f32(&path, &shape, &[0.0; 6]);
        inputs.push(format!("{name}={}", path.display()));
    }
    let k = tmp.path().join("k.npy");
    write_npy_i32(&k, &[1], &[1]);
    inputs.push(format!("k={}", k.display()));
    let dir_s = dir.to_str().unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec![
            "run", dir_s, "-i", &inputs[0], "-i", &inputs[1], "-i", &inputs[2], "--engine", "ane",
        ],
        vec!["embed", "-m", "no/such-model", "--engine", "ane", "hello"],
        vec![
            "rerank",
            "-m",
            "no/such-model",
            "--engine",
            "ane",
            "--query",
            "q",
            "passage",
        ],
        vec![
            "generate",
            "-m",
            "no/such-model",
            "--engine",
            "ane",
            "hello",
        ],
        vec!["train-digits", "--engine", "ane"],
        vec!["demo", "--engine", "ane"],
        vec!["bench", "train", "--engine", "ane"],
    ];
    for args in commands {
        let o = aneforge(&args, &[]);
        assert!(!o.status.success(), "{args:?} succeeded");
        let err = stderr(&o);
        assert!(
            err.lines().next().unwrap_or("").starts_with(UNAVAILABLE),
            "{args:?}: {err}"
        );
    }
    // auto falls back to the CPU engine
    let mut args = vec!["run", dir_s, "--engine", "auto"];
    for i in &inputs {
        args.extend(["-i", i.as_str()]);
    }
    let o = aneforge(&args, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("z fp32 [2, 3]: [0, 0, 0"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn engine_and_target_flags_are_checked_the_same_way_everywhere() {
    for args in [
        vec!["embed", "-m", "x", "--target", "h99", "t"],
        vec!["generate", "-m", "x", "--target", "h99", "t"],
        vec!["train-digits", "--target", "h99"],
    ] {
        let o = aneforge(&args, &[]);
        assert!(!o.status.success());
        assert!(
            stderr(&o).contains("--target h99"),
            "{args:?}: {}",
            stderr(&o)
        );
    }
    let o = aneforge(&["embed", "-m", "x", "--engine", "gpu", "t"], &[]);
    assert!(
        stderr(&o).contains("unknown engine `gpu`: expected cpu, ane or auto"),
        "{}",
        stderr(&o)
    );
    // the ANE engine runs fp16 programs: an fp32 target is refused before anything loads
    let sim = simulator_library();
    let o = aneforge(
        &["train-digits", "--engine", "ane", "--target", "cpu"],
        &[("ANEFORGE_E5RT_LIB", &sim)],
    );
    assert!(stderr(&o).contains("drop --target cpu"), "{}", stderr(&o));
}

fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    assert!(o.status.success(), "{}", stderr(o));
    stdout(o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

#[test]
fn bench_kernels_at_tiny_sizes() {
    let o = aneforge(
        &[
            "bench",
            "gemm",
            "--sizes",
            "16,32",
            "--threads",
            "1,2",
            "--reps",
            "2",
            "--json",
        ],
        &[],
    );
    let rows = json_lines(&o);
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[0]["case"], "sgemm 16x16x16");
    assert_eq!(rows[3]["case"], "sgemm 32x32x32");
    assert_eq!(rows[3]["threads"], 2);
    assert_eq!(rows[1]["flops"], 2.0 * 32f64.powi(3));
    assert!(rows.iter().all(|r| r["best_s"].as_f64().unwrap() > 0.0));

    let o = aneforge(
        &[
            "bench",
            "conv",
            "--shapes",
            "4x6",
            "--threads",
            "1",
            "--reps",
            "1",
            "--json",
        ],
        &[],
    );
    let rows = json_lines(&o);
    assert_eq!(rows[0]["case"], "conv3x3 1x4x6x6 -> 4");
    assert_eq!(rows[0]["flops"], 2.0 * (4 * 36 * 4 * 9) as f64);

    let o = aneforge(
        &[
            "bench",
            "attention",
            "--seq",
            "8",
            "--heads",
            "2",
            "--head-dim",
            "4",
            "--threads",
            "1",
            "--json",
        ],
        &[],
    );
    assert_eq!(json_lines(&o)[0]["case"], "sdpa s=8 heads=2 d=4");

    let o = aneforge(
        &[
            "bench",
            "gemv",
            "--k",
            "64",
            "--n",
            "8",
            "--threads",
            "1",
            "--json",
        ],
        &[],
    );
    let rows = json_lines(&o);
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[1]["case"], "gemv int8 1x64 -> 8 (compressed)");

    let o = aneforge(&["bench", "overhead", "--reps", "2", "--json"], &[]);
    let rows = json_lines(&o);
    assert!(rows[0]["best_us"].as_f64().unwrap() > 0.0);

    let o = aneforge(&["bench", "gemm", "--sizes", "0"], &[]);
    assert!(
        stderr(&o).contains("--sizes takes sizes of at least 1"),
        "{}",
        stderr(&o)
    );
    let o = aneforge(&["bench", "conv", "--shapes", "64"], &[]);
    assert!(
        stderr(&o).contains("expected CHANNELSxSIZE"),
        "{}",
        stderr(&o)
    );
    let o = aneforge(&["bench", "gemv", "--k", "40", "--weights", "int4"], &[]);
    assert!(
        stderr(&o).contains("not a multiple of 32"),
        "{}",
        stderr(&o)
    );
}

/// The peer plumbing, with a stand-in "python" that answers like tools/bench/peer_numpy.py
/// --json with a known time, so the printed ratio can be checked against our own figure.
#[cfg(unix)]
#[test]
fn bench_peer_ratios_are_peer_time_over_ours() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let py = tmp.path().join("python");
    std::fs::write(
        &py,
        "#!/bin/sh\n# $1 = -c, $2 = the script, $3 = threads\n\
         case \"$2\" in *peer_numpy*) ;; *) echo not the numpy peer >&2; exit 1;; esac\n\
         echo '{\"system\": \"fake 1.0\", \"case\": \"sgemm 16x16x16\", \"threads\": '$3', \
         \"best_s\": 0.5, \"median_s\": 0.5, \"cpu_s\": 0.25, \"flops\": 8192}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = aneforge(
        &[
            "bench",
            "gemm",
            "--sizes",
            "16",
            "--threads",
            "1",
            "--reps",
            "1",
            "--peer-python",
            py.to_str().unwrap(),
            "--json",
        ],
        &[],
    );
    let rows = json_lines(&o);
    let ours = rows[0]["best_s"].as_f64().unwrap();
    let ours_cpu = rows[0]["on_cpu_s"].as_f64();
    let peer = &rows[0]["peer"];
    assert_eq!(peer["system"], "fake 1.0");
    let ratio = peer["best_ratio"].as_f64().unwrap();
    assert!(
        (ratio - 0.5 / ours).abs() <= 1e-9 * ratio,
        "{ratio} vs {}",
        0.5 / ours
    );
    if let Some(c) = ours_cpu {
        let r = peer["on_cpu_ratio"].as_f64().unwrap();
        assert!((r - 0.25 / c).abs() <= 1e-9 * r);
    }

    let o = aneforge(
        &[
            "bench",
            "gemm",
            "--sizes",
            "16",
            "--threads",
            "1",
            "--reps",
            "1",
            "--peer-python",
            py.to_str().unwrap(),
        ],
        &[],
    );
    let text = stdout(&o);
    assert!(
        text.contains("load average at start:") && text.contains("fake 1.0"),
        "{text}"
    );
    // the conv peer is torch's script: the stand-in refuses it, and the failure is reported
    let o = aneforge(
        &[
            "bench",
            "conv",
            "--shapes",
            "4x6",
            "--threads",
            "1",
            "--peer-python",
            py.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("peer_torch.py failed"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn bench_program_times_a_program_directory_and_refuses_bad_arguments() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("add");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("model.mil"), ADD_PROGRAM).unwrap();
    let (xp, yp, kp) = (
        tmp.path().join("x.npy"),
        tmp.path().join("y.npy"),
        tmp.path().join("k.npy"),
    );
    write_npy_f32(&xp, &[2, 3], &[1.0; 6]);
    write_npy_f32(&yp, &[2, 3], &[2.0; 6]);
    write_npy_i32(&kp, &[1], &[3]);
    let (x, y, k) = (
        format!("x={}", xp.display()),
        format!("y={}", yp.display()),
        format!("k={}", kp.display()),
    );
    let d = dir.to_str().unwrap();
    let o = aneforge(
        &[
            "bench", "program", d, "-i", &x, "-i", &y, "-i", &k, "--runs", "3", "-t", "1",
            "--format", "jsonl",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let report: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(report["runs"], 3);
    assert_eq!(report["threads"], 1);
    let (best, median) = (
        report["best_s"].as_f64().unwrap(),
        report["median_s"].as_f64().unwrap(),
    );
    assert!(best > 0.0 && best <= median, "{report}");
    let o = aneforge(
        &[
            "bench",
            "program",
            d,
            "-i",
            &x,
            "-i",
            &y,
            "-i",
            &k,
            "--runs",
            "2",
            "--profile",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(
        text.contains("profile: ") && text.contains("costliest kernels:") && text.contains("mul"),
        "{text}"
    );
    for (args, needle) in [
        (
            vec!["--runs", "0", "-i", &x, "-i", &y, "-i", &k],
            "--runs must be at least 1",
        ),
        (vec!["-i", &x, "-i", &y], "no --input for k"),
    ] {
        let mut all = vec!["bench", "program", d];
        all.extend(args);
        let o = aneforge(&all, &[]);
        assert_eq!(o.status.code(), Some(1), "{all:?}");
        assert!(stderr(&o).contains(needle), "{all:?}: {}", stderr(&o));
    }
    let o = aneforge(&["bench", "program", tmp.path().to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("model.mil"), "{}", stderr(&o));
}
