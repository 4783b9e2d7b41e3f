//! Writes the Core ML export corpus: `OUT/ok/*.mlpackage` (every op aneforge emits; coremltools
//! must load each) and `OUT/broken/*.mlpackage` with `*.expect` (deliberate mistakes; coremltools
//! must reject each with the expected message). `tools/coreml_check.py` checks both.
//!
//! Every valid program must also pass `aneforge_mil::validate_with_blobs` and survive
//! `parse(print(p)) == p`, so coremltools' verdict covers our validator and MIL text too.
//!
//! Usage: `cargo run -p aneforge-mil --example coreml_corpus -- OUT`

mod broken;
mod builder;
mod ops;

use aneforge_mil::encode::WEIGHT_BLOB_PATH;
use aneforge_mil::mlpackage::{export, ExportOptions};
use std::path::{Path, PathBuf};

fn main() {
    let out = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            eprintln!("usage: coreml_corpus OUT_DIR");
            std::process::exit(2)
        });
    if let Err(e) = run(&out) {
        eprintln!("coreml_corpus: {e}");
        std::process::exit(1);
    }
}

/// `{name: {shape, values, max_abs, rel_l2}}`: the original weight and the error the encoder
/// reported; coremltools' own decompression must give the same error figures.
fn expectations_json(expectations: &[builder::Expectation]) -> String {
    let map: serde_json::Map<String, serde_json::Value> = expectations
        .iter()
        .map(|e| {
            (
                e.name.clone(),
                serde_json::json!({
                    "scheme": e.report.scheme.name(),
                    "shape": e.shape,
                    "values": e.values.iter().map(|&v| v as f64).collect::<Vec<f64>>(),
                    "max_abs": e.report.max_abs,
                    "rel_l2": e.report.rel_l2,
                }),
            )
        })
        .collect();
    serde_json::Value::Object(map).to_string()
}

fn run(out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let options = ExportOptions {
        author: "aneforge".into(),
        short_description: "aneforge Core ML export corpus".into(),
        ..ExportOptions::default()
    };
    let ok_dir = out.join("ok");
    let broken_dir = out.join("broken");
    for dir in [&ok_dir, &broken_dir] {
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        std::fs::create_dir_all(dir)?;
    }
    let ok = ops::all();
    for (name, built) in &ok {
        // Programs coremltools accepts must also pass our own validator and MIL text round trip.
        aneforge_mil::validate_with_blobs(&built.program, &blobs_of(built))
            .map_err(|e| format!("{name}: aneforge_mil::validate rejects it: {e}"))?;
        let text = aneforge_mil::print(&built.program);
        let parsed =
            aneforge_mil::parse(&text).map_err(|e| format!("{name}: parse(print): {e}"))?;
        if parsed != built.program {
            return Err(format!("{name}: parse(print(p)) != p").into());
        }
        let path = ok_dir.join(format!("{name}.mlpackage"));
        export(
            &built.program,
            &[(WEIGHT_BLOB_PATH, &built.blobs)],
            &path,
            &options,
        )
        .map_err(|e| format!("{name}: {e}"))?;
        if !built.expectations.is_empty() {
            std::fs::write(
                ok_dir.join(format!("{name}.weights.json")),
                expectations_json(&built.expectations),
            )?;
        }
    }
    let broken = broken::all();
    for case in &broken {
        let (name, built) = &case.case;
        let path = broken_dir.join(format!("{name}.mlpackage"));
        export(
            &built.program,
            &[(WEIGHT_BLOB_PATH, &built.blobs)],
            &path,
            &options,
        )
        .map_err(|e| format!("{name}: {e}"))?;
        if case.drop_weights {
            std::fs::remove_file(path.join("Data/com.apple.CoreML/weights/weight.bin"))?;
        }
        std::fs::write(broken_dir.join(format!("{name}.expect")), case.expect)?;
    }
    println!(
        "wrote {} packages to {} and {} broken ones to {}",
        ok.len(),
        ok_dir.display(),
        broken.len(),
        broken_dir.display()
    );
    Ok(())
}

fn blobs_of(built: &builder::Built) -> std::collections::BTreeMap<String, aneforge_mil::BlobFile> {
    [(WEIGHT_BLOB_PATH.to_string(), built.blobs.clone())].into()
}
