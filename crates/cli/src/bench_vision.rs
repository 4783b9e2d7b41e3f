//! `aneforge bench vision`: image-classifier (or CLIP image-tower) throughput (images/s) at given
//! batch sizes, on deterministic synthetic inputs (preprocessing excluded, as in
//! tools/bench/vision_peers.py), with the process's on-CPU time per image beside the wall time.

use std::path::Path;
use std::time::Instant;

use aneforge_models::vision::{open_checkpoint, ClassifierOptions, ClipModel, ImageClassifier};
use anyhow::bail;

use crate::encoder_args::parse_compress;
use crate::engine_args::EngineArgs;
use crate::output::FormatArgs;

#[derive(clap::Args)]
pub struct BenchVisionArgs {
    /// Model id, directory or checkpoint file (as for `classify`); a CLIP directory measures its
    /// image embeddings.
    #[arg(short = 'm', long = "model")]
    pub model: String,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub matmul: crate::engine_args::MatmulArgs,
    /// Weight compression of ANE-target programs: none, auto, int8 or int4.
    #[arg(long, default_value = "none")]
    pub compress: String,
    /// Batch sizes to measure, comma-separated.
    #[arg(long, default_value = "1,8", value_delimiter = ',')]
    pub batch_sizes: Vec<usize>,
    /// Timed executions per batch size, after two untimed ones.
    #[arg(long, default_value_t = 10)]
    pub runs: usize,
    #[command(flatten)]
    pub format: FormatArgs,
}

/// What is measured: a classifier's logits or a CLIP model's image embeddings.
enum Model {
    Classifier(Box<ImageClassifier>),
    Clip(Box<ClipModel>),
}

impl Model {
    fn load(spec: &str, options: ClassifierOptions) -> anyhow::Result<Model> {
        let weights = Path::new(spec).join("model.safetensors");
        if weights.is_file() && ClipModel::detect(&open_checkpoint(&weights)?) {
            return Ok(Model::Clip(Box::new(ClipModel::load(spec, options)?)));
        }
        Ok(Model::Classifier(Box::new(ImageClassifier::load(
            spec, options,
        )?)))
    }

    /// The input's `(height, width)`.
    fn size(&self) -> (usize, usize) {
        let preprocess = match self {
            Model::Classifier(clf) => &clf.preprocess,
            Model::Clip(clip) => &clip.preprocess,
        };
        preprocess.crop.unwrap_or((224, 224))
    }

    fn name(&self) -> String {
        match self {
            Model::Classifier(clf) => clf.network().name(),
            Model::Clip(clip) => format!("clip image tower (dim {})", clip.dimension()),
        }
    }

    fn run(&self, inputs: &[Vec<f32>], size: (usize, usize)) -> anyhow::Result<()> {
        match self {
            Model::Classifier(clf) => clf.logits_of(inputs, size, &mut |_| {})?,
            Model::Clip(clip) => clip.image_embeddings_of(inputs, &mut |_| {})?,
        };
        Ok(())
    }
}

fn cpu_seconds() -> f64 {
    crate::bench_train::process_cpu_seconds().unwrap_or(f64::NAN)
}

pub fn run(args: BenchVisionArgs) -> anyhow::Result<()> {
    if args.runs == 0 || args.batch_sizes.contains(&0) {
        bail!("--runs and every --batch-sizes entry must be at least 1");
    }
    let (engine, target) = args.engine.select()?;
    let threads = rayon::current_num_threads();
    for &batch in &args.batch_sizes {
        let options = ClassifierOptions {
            compress: parse_compress(&args.compress, &target)?,
            matmul: args.matmul.precision(engine, &target)?,
            target: target.clone(),
            engine,
            batch_size: batch,
        };
        let model = Model::load(&args.model, options)?;
        let (h, w) = model.size();
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let inputs: Vec<Vec<f32>> = (0..batch)
            .map(|_| {
                (0..3 * h * w)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        (state >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
                    })
                    .collect()
            })
            .collect();
        let start = Instant::now();
        model.run(&inputs, (h, w))?;
        let first_s = start.elapsed().as_secs_f64();
        model.run(&inputs, (h, w))?;
        let mut wall = Vec::with_capacity(args.runs);
        let mut cpu = Vec::with_capacity(args.runs);
        for _ in 0..args.runs {
            let (t0, c0) = (Instant::now(), cpu_seconds());
            model.run(&inputs, (h, w))?;
            wall.push(t0.elapsed().as_secs_f64());
            cpu.push(cpu_seconds() - c0);
        }
        wall.sort_by(f64::total_cmp);
        cpu.sort_by(f64::total_cmp);
        let (median, best, median_cpu) = (wall[wall.len() / 2], wall[0], cpu[cpu.len() / 2]);
        let name = model.name();
        if args.format.is_text() {
            println!(
                "aneforge {name} batch {batch}, {threads} threads, target {target}: {:.1} images/s \
                 (median of {}, best {:.1}); {:.1} ms CPU per image; first run {:.2} s incl. compiling",
                batch as f64 / median,
                args.runs,
                batch as f64 / best,
                1e3 * median_cpu / batch as f64,
                first_s
            );
        } else {
            let report = serde_json::json!({
                "system": "aneforge",
                "model": name,
                "batch": batch,
                "threads": threads,
                "target": target.to_string(),
                "images_per_s": batch as f64 / median,
                "best_images_per_s": batch as f64 / best,
                "cpu_ms_per_image": 1e3 * median_cpu / batch as f64,
                "first_run_s": first_s,
            });
            println!("{report}");
        }
    }
    Ok(())
}
