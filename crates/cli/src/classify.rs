//! `aneforge classify`: the top-k classes of images (a classifier's own, or zero-shot labels for
//! a CLIP model), as text, JSON or JSON lines.

use std::path::{Path, PathBuf};

use aneforge_models::vision::{
    load_image, ClassifierOptions, ClipModel, ImageClassifier, Prediction, RgbImage,
};
use anyhow::{bail, Context};

use crate::encoder_args::{parse_compress, progress};
use crate::engine_args::EngineArgs;
use crate::output::{Format, FormatArgs};

#[derive(clap::Args)]
pub struct ClassifyArgs {
    /// Model id (ORG/NAME in the Hugging Face cache), directory, or checkpoint file (.pth, .pt,
    /// .safetensors): EfficientNet-Lite, ResNet, MobileNetV2/V3, ViT, DeiT; or a CLIP model
    /// directory with --labels.
    #[arg(short = 'm', long = "model")]
    pub model: String,
    /// Image files (JPEG, PNG, WebP, BMP). Without images or --file, stdin is read, one path per
    /// line; `-` too.
    pub images: Vec<String>,
    /// A file with one image path per line (`-`: stdin).
    #[arg(long, short = 'f', conflicts_with = "images")]
    pub file: Option<PathBuf>,
    /// Zero-shot labels for a CLIP model, comma-separated ("a cat,a dog"): each image is ranked
    /// against these.
    #[arg(long, value_delimiter = ',')]
    pub labels: Vec<String>,
    /// The prompt each zero-shot label is put into; `{}` stands for the label (e.g.
    /// "a photo of a {}.").
    #[arg(long, default_value = "{}", requires = "labels")]
    pub template: String,
    /// Classes reported per image, most probable first.
    #[arg(long, short = 'k', default_value_t = 5)]
    pub top_k: usize,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub matmul: crate::engine_args::MatmulArgs,
    /// Weight compression of ANE-target programs: none, auto, int8 or int4.
    #[arg(long, default_value = "none")]
    pub compress: String,
    /// Images per program execution.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// No progress bar.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    #[command(flatten)]
    pub format: FormatArgs,
}

#[derive(serde::Serialize)]
struct Class<'a> {
    index: usize,
    label: &'a str,
    probability: f32,
    logit: f32,
}

#[derive(serde::Serialize)]
struct ImageResult<'a> {
    image: &'a str,
    predictions: Vec<Class<'a>>,
}

fn result<'a>(image: &'a str, predictions: &'a [Prediction]) -> ImageResult<'a> {
    ImageResult {
        image,
        predictions: predictions
            .iter()
            .map(|p| Class {
                index: p.index,
                label: &p.label,
                probability: p.probability,
                logit: p.logit,
            })
            .collect(),
    }
}

/// A classifier with its own classes, or CLIP against the given labels.
enum Classifier<'a> {
    Fixed(Box<ImageClassifier>),
    ZeroShot {
        model: Box<ClipModel>,
        labels: Vec<&'a str>,
        template: &'a str,
    },
}

impl Classifier<'_> {
    fn classify(
        &self,
        images: &[RgbImage],
        top_k: usize,
        progress: &mut dyn FnMut(usize),
    ) -> anyhow::Result<Vec<Vec<Prediction>>> {
        Ok(match self {
            Classifier::Fixed(clf) => clf.classify(images, top_k, progress)?,
            Classifier::ZeroShot {
                model,
                labels,
                template,
            } => model.zero_shot(images, labels, template, top_k, progress)?,
        })
    }
}

pub fn run(args: ClassifyArgs) -> anyhow::Result<()> {
    if args.top_k == 0 {
        bail!("--top-k takes a count of at least 1");
    }
    if args.batch_size == 0 {
        bail!("--batch-size takes a count of at least 1");
    }
    let paths = crate::input::texts(&args.images, args.file.as_deref(), "image paths")?;
    let paths: Vec<String> = paths.into_iter().filter(|p| !p.trim().is_empty()).collect();
    if paths.is_empty() {
        bail!("no images given");
    }
    let (engine, target) = args.engine.select()?;
    let options = ClassifierOptions {
        compress: parse_compress(&args.compress, &target)?,
        matmul: args.matmul.precision(engine, &target)?,
        target,
        engine,
        batch_size: args.batch_size,
    };
    let labels: Vec<&str> = args
        .labels
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect();
    let clf = if args.labels.is_empty() {
        Classifier::Fixed(Box::new(
            ImageClassifier::load(&args.model, options)
                .with_context(|| format!("loading image classifier {}", args.model))?,
        ))
    } else {
        if labels.is_empty() {
            bail!("--labels holds no label");
        }
        Classifier::ZeroShot {
            model: Box::new(
                ClipModel::load(&args.model, options)
                    .with_context(|| format!("loading CLIP model {}", args.model))?,
            ),
            labels,
            template: &args.template,
        }
    };
    let format = args.format.get();
    let bar = progress(paths.len(), args.batch_size, args.quiet, "images");
    let mut all = Vec::new();
    // Decoded a batch at a time, so a long list never holds more than one batch of images.
    for chunk in paths.chunks(args.batch_size) {
        let images = chunk
            .iter()
            .map(|p| load_image(Path::new(p)))
            .collect::<Result<Vec<_>, _>>()?;
        let predictions = clf.classify(&images, args.top_k, &mut |n| bar.inc(n as u64))?;
        for (path, preds) in chunk.iter().zip(predictions) {
            match format {
                Format::Text => {
                    bar.suspend(|| {
                        println!("{path}");
                        for p in &preds {
                            println!(
                                "  {:>7.3}%  {} ({})",
                                100.0 * p.probability,
                                p.label,
                                p.index
                            );
                        }
                    });
                }
                Format::Jsonl => bar.suspend(|| {
                    println!(
                        "{}",
                        serde_json::to_string(&result(path, &preds)).unwrap_or_default()
                    )
                }),
                Format::Json => all.push((path.clone(), preds)),
            }
        }
    }
    bar.finish_and_clear();
    if format == Format::Json {
        let docs: Vec<ImageResult> = all.iter().map(|(p, preds)| result(p, preds)).collect();
        println!("{}", serde_json::to_string(&docs)?);
    }
    Ok(())
}
