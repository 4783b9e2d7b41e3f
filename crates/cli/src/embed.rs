//! `aneforge embed`: sentence embeddings, or a CLIP model's text embeddings (texts) or image
//! embeddings (`--images`), as JSON, JSON lines or NumPy `.npy`.

use std::io::Write;
use std::path::{Path, PathBuf};

use aneforge_models::encoders::{Embeddings, EncodeOptions, Pooling, SentenceEncoder};
use aneforge_models::vision::{load_image, ClassifierOptions, ClipModel};
use anyhow::{bail, Context};

use crate::encoder_args::{parse_compress, progress, EncoderArgs};
use crate::model_hints::{self, Wants};

#[derive(clap::Args)]
pub struct EmbedArgs {
    #[command(flatten)]
    pub encoder: EncoderArgs,
    /// Texts to embed (a sentence encoder, or a CLIP model's text tower), or image paths with
    /// --images (without them or --file, stdin is read, one per line; `-` too).
    pub texts: Vec<String>,
    /// The inputs are image files (JPEG, PNG, WebP, BMP), embedded by a CLIP model's image tower
    /// (L2-normalised, as `classify --labels` compares them).
    #[arg(long, conflicts_with_all = ["normalize", "pooling", "prompt_name", "prompt", "max_length"])]
    pub images: bool,
    /// A UTF-8 file with one text (or image path) per line (`-`: stdin).
    #[arg(long, short = 'f', conflicts_with = "texts")]
    pub file: Option<PathBuf>,
    /// json (a list of vectors), jsonl (one vector per line) or npy (float32 [texts, dim];
    /// needs --output).
    #[arg(long, value_enum, default_value_t = EmbedFormat::Json)]
    pub format: EmbedFormat,
    /// Write to this file instead of stdout.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// L2-normalise even if the model has no Normalize module.
    #[arg(long)]
    pub normalize: bool,
    /// Pooling instead of the model's: cls, mean, max, mean_sqrt_len_tokens, weightedmean,
    /// lasttoken; several comma-separated modes are concatenated.
    #[arg(long)]
    pub pooling: Option<String>,
    /// A prompt name from the model's config_sentence_transformers.json (e.g. query).
    #[arg(long, conflicts_with = "prompt")]
    pub prompt_name: Option<String>,
    /// A literal prompt prepended to every text.
    #[arg(long)]
    pub prompt: Option<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmbedFormat {
    Json,
    Jsonl,
    Npy,
}

fn parse_pooling(s: &str) -> anyhow::Result<Vec<Pooling>> {
    s.split(',')
        .map(|m| {
            Pooling::parse(m.trim()).with_context(|| {
                let names: Vec<&str> = Pooling::ALL.iter().map(|p| p.name()).collect();
                format!("--pooling {m}: expected one of {}", names.join(", "))
            })
        })
        .collect()
}

/// Writes `bytes` to `path` (see [`aneforge::output::write_output`]).
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    aneforge::output::write_output(path, bytes)
        .with_context(|| format!("cannot write {}", path.display()))
}

pub fn run(args: EmbedArgs) -> anyhow::Result<()> {
    if args.format == EmbedFormat::Npy && args.output.is_none() {
        bail!("--format npy writes binary data: give --output FILE");
    }
    if args.images {
        let embeddings = image_embeddings(&args)?;
        return write(&args, &embeddings);
    }
    let texts = crate::input::texts(&args.texts, args.file.as_deref(), "texts")?;
    if ClipModel::is_clip(&args.encoder.model) {
        let embeddings = clip_text_embeddings(&args, &texts)?;
        return write(&args, &embeddings);
    }
    let options = EncodeOptions {
        prompt_name: args.prompt_name.clone(),
        prompt: args.prompt.clone(),
        normalize: args.normalize,
        pooling: args.pooling.as_deref().map(parse_pooling).transpose()?,
        batch_size: None,
    };
    let encoder = SentenceEncoder::load(&args.encoder.model, args.encoder.options()?)
        .map_err(|e| model_hints::explain(e.into(), &args.encoder.model, Wants::Encoder))?;
    let bar = progress(
        texts.len(),
        args.encoder.batch_size,
        args.encoder.quiet,
        "texts",
    );
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let embeddings = encoder.encode_with(&refs, &options, &mut |n| bar.inc(n as u64))?;
    bar.finish_and_clear();
    write(&args, &embeddings)
}

/// The CLIP options `embed` takes: engine, target, compression and batch size.
fn clip_options(encoder: &EncoderArgs) -> anyhow::Result<ClassifierOptions> {
    if encoder.batch_size == 0 {
        bail!("--batch-size takes a count of at least 1");
    }
    let (engine, target) = encoder.engine.select()?;
    Ok(ClassifierOptions {
        compress: parse_compress(&encoder.compress, &target)?,
        matmul: encoder.matmul.precision(engine, &target)?,
        target,
        engine,
        batch_size: encoder.batch_size,
    })
}

/// The text embeddings of a CLIP model (L2-normalised, pooled at the end-of-text token), a
/// batch at a time; the sentence encoders' pooling, prompt, normalisation and length options
/// do not apply to it and are refused by name.
fn clip_text_embeddings(args: &EmbedArgs, texts: &[String]) -> anyhow::Result<Embeddings> {
    let encoder = &args.encoder;
    let sentence_only = [
        ("--pooling", args.pooling.is_some()),
        ("--prompt-name", args.prompt_name.is_some()),
        ("--prompt", args.prompt.is_some()),
        ("--normalize", args.normalize),
        ("--max-length", encoder.max_length.is_some()),
    ];
    if let Some((flag, _)) = sentence_only.iter().find(|(_, given)| *given) {
        bail!(
            "{flag} applies to sentence encoders; {} is a CLIP model, whose text embeddings are \
             its end-of-text token, projected and L2-normalised",
            encoder.model
        );
    }
    if texts.is_empty() {
        bail!("no texts given");
    }
    let clip = ClipModel::load(&encoder.model, clip_options(encoder)?)
        .with_context(|| format!("loading CLIP model {}", encoder.model))?;
    let bar = progress(texts.len(), encoder.batch_size, encoder.quiet, "texts");
    let mut data = Vec::with_capacity(texts.len() * clip.dimension());
    for chunk in texts.chunks(encoder.batch_size) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        for row in clip.text_embeddings(&refs)? {
            data.extend(row);
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    Ok(Embeddings {
        rows: texts.len(),
        dim: clip.dimension(),
        data,
    })
}

/// The image embeddings of a CLIP model, the paths decoded a batch at a time.
fn image_embeddings(args: &EmbedArgs) -> anyhow::Result<Embeddings> {
    let paths = crate::input::texts(&args.texts, args.file.as_deref(), "image paths")?;
    let paths: Vec<String> = paths.into_iter().filter(|p| !p.trim().is_empty()).collect();
    if paths.is_empty() {
        bail!("no images given");
    }
    let encoder = &args.encoder;
    let clip = ClipModel::load(&encoder.model, clip_options(encoder)?)
        .with_context(|| format!("loading CLIP model {} for --images", encoder.model))?;
    let bar = progress(paths.len(), encoder.batch_size, encoder.quiet, "images");
    let mut data = Vec::with_capacity(paths.len() * clip.dimension());
    for chunk in paths.chunks(encoder.batch_size) {
        let images = chunk
            .iter()
            .map(|p| load_image(Path::new(p)))
            .collect::<Result<Vec<_>, _>>()?;
        for row in clip.image_embeddings(&images, &mut |n| bar.inc(n as u64))? {
            data.extend(row);
        }
    }
    bar.finish_and_clear();
    Ok(Embeddings {
        rows: paths.len(),
        dim: clip.dimension(),
        data,
    })
}

/// `embeddings` in `args.format`, to `--output` or stdout.
fn write(args: &EmbedArgs, embeddings: &Embeddings) -> anyhow::Result<()> {
    let rows: Vec<&[f32]> = embeddings.iter().collect();
    let bytes = match args.format {
        EmbedFormat::Json => {
            let mut text = serde_json::to_string(&rows)?;
            text.push('\n');
            text.into_bytes()
        }
        EmbedFormat::Jsonl => {
            let mut text = String::new();
            for row in &rows {
                text.push_str(&serde_json::to_string(row)?);
                text.push('\n');
            }
            text.into_bytes()
        }
        EmbedFormat::Npy => {
            aneforge_models::npy::to_bytes(&[embeddings.rows, embeddings.dim], &embeddings.data)
        }
    };
    match &args.output {
        Some(path) => write_atomically(path, &bytes),
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&bytes)?;
            Ok(out.flush()?)
        }
    }
}
