//! Image classifiers end to end: a checkpoint (a `torch.save` state_dict or safetensors) whose
//! tensor names say which family it is, the family's preprocessing recipe, one compiled program
//! per batch size (`pixel_values[N, 3, H, W]` → `logits[N, classes]`), and top-k with ImageNet
//! names.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use aneforge::graph::input;
use aneforge::{Compress, DType, Engine, Target};

use crate::resolve::{resolve, ModelSource};
use crate::weights::{SafeTensorsFiles, TensorSource, TorchCheckpoint, VarBuilder};

use super::clip::ClipModel;
use super::efficientnet_lite::EfficientNetLite;
use super::image_input::{Preprocess, RgbImage};
use super::mobilenet_v2::MobileNetV2;
use super::mobilenet_v3::MobileNetV3;
use super::programs::{run_batched, Compiler, Programs};
use super::resample::Interpolation;
use super::resnet::{Layout as ResNetLayout, ResNet};
use super::vit::VisionTransformer;
use super::VisionError;

pub const PIXEL_VALUES: &str = "pixel_values";
pub const LOGITS: &str = "logits";

const IMAGENET_LABELS: &str = include_str!("imagenet_labels.txt");

/// ImageNet-1k class names in index order (torchvision's).
pub fn imagenet_labels() -> Vec<String> {
    IMAGENET_LABELS.lines().map(str::to_string).collect()
}

/// A loaded network of one of the supported families.
pub enum Network {
    EfficientNetLite(EfficientNetLite),
    ResNet(ResNet),
    MobileNetV2(MobileNetV2),
    MobileNetV3(MobileNetV3),
    VisionTransformer(VisionTransformer),
}

impl Network {
    /// Recognises the family from the checkpoint's tensor names and loads it; `config` is the
    /// model's `config.json` (only the vision transformers read it).
    pub fn load(
        vb: &VarBuilder,
        config: Option<&serde_json::Value>,
    ) -> Result<Network, VisionError> {
        if let Some(root) = VisionTransformer::detect(vb) {
            return Ok(Network::VisionTransformer(VisionTransformer::load(
                vb, root, config,
            )?));
        }
        if vb.contains("_conv_stem.weight") {
            let variant = EfficientNetLite::detect(vb);
            let classes = vb.meta("_fc.bias").map_or(1000, |m| m.shape[0]);
            return Ok(Network::EfficientNetLite(EfficientNetLite::load(
                vb, variant, classes,
            )?));
        }
        if let Some(layout) = ResNetLayout::detect(vb) {
            return Ok(Network::ResNet(ResNet::load(vb, layout)?));
        }
        if MobileNetV2::detect(vb) {
            return Ok(Network::MobileNetV2(MobileNetV2::load_torchvision(vb)?));
        }
        if vb.contains("features.0.0.weight") && vb.contains("classifier.3.weight") {
            return Ok(Network::MobileNetV3(MobileNetV3::load_torchvision(vb)?));
        }
        if ClipModel::detect(vb) {
            return Err(VisionError::Unsupported(format!(
                "{} is a CLIP model: it classifies zero-shot against labels (ClipModel; \
                 `aneforge classify --labels`)",
                vb.source().describe()
            )));
        }
        Err(VisionError::UnknownArchitecture {
            source_desc: vb.source().describe(),
            first_names: vb.source().names().into_iter().take(5).collect(),
        })
    }

    pub fn name(&self) -> String {
        match self {
            Network::EfficientNetLite(m) => format!("efficientnet-lite{}", m.variant),
            Network::ResNet(m) => m.name(),
            Network::MobileNetV2(m) => m.name(),
            Network::MobileNetV3(m) => m.name(),
            Network::VisionTransformer(m) => m.name(),
        }
    }

    pub fn forward(&self, x: &aneforge::Tensor) -> Result<aneforge::Tensor, VisionError> {
        match self {
            Network::EfficientNetLite(m) => m.forward(x),
            Network::ResNet(m) => m.forward(x),
            Network::MobileNetV2(m) => m.forward(x),
            Network::MobileNetV3(m) => m.forward(x),
            Network::VisionTransformer(m) => m.forward(x),
        }
    }

    pub fn classes(&self) -> usize {
        match self {
            Network::EfficientNetLite(m) => m.classes(),
            Network::ResNet(m) => m.classes(),
            Network::MobileNetV2(m) => m.classes(),
            Network::MobileNetV3(m) => m.classes(),
            Network::VisionTransformer(m) => m.classes(),
        }
    }

    /// The evaluation recipe the family's weights were trained with.
    pub fn default_preprocess(&self) -> Preprocess {
        match self {
            Network::EfficientNetLite(m) => {
                let size = m.resolution();
                let mut p = Preprocess::imagenet(
                    (size as f64 / 0.875) as usize,
                    size,
                    Interpolation::Bicubic,
                );
                // The TF-Lite models take (x - 127) / 128.
                p.mean = [127.0 / 255.0; 3];
                p.std = [128.0 / 255.0; 3];
                p
            }
            Network::ResNet(_) | Network::MobileNetV2(_) | Network::MobileNetV3(_) => {
                Preprocess::imagenet(256, 224, Interpolation::Bilinear)
            }
            Network::VisionTransformer(m) => m.default_preprocess(),
        }
    }
}

/// How a classifier is compiled and batched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassifierOptions {
    /// `Target::Cpu` (fp32) or `Target::Ane(arch)` (fp16).
    pub target: Target,
    pub engine: Engine,
    pub compress: Compress,
    /// Images per program execution.
    pub batch_size: usize,
    /// The CPU engine's arithmetic for the fp32 programs' many-row products, attention and
    /// ungrouped convolutions (depthwise ones keep f32).
    pub matmul: aneforge::engine::MatmulPrecision,
}

impl Default for ClassifierOptions {
    fn default() -> Self {
        ClassifierOptions {
            target: Target::Cpu,
            engine: Engine::Cpu,
            compress: Compress::None,
            batch_size: 8,
            matmul: aneforge::engine::MatmulPrecision::F32,
        }
    }
}

/// One class of a prediction.
#[derive(Clone, Debug, PartialEq)]
pub struct Prediction {
    pub index: usize,
    pub label: String,
    pub probability: f32,
    pub logit: f32,
}

/// `(batch, height, width)` of a compiled program.
type ProgramKey = (usize, usize, usize);

pub struct ImageClassifier {
    network: Network,
    pub preprocess: Preprocess,
    labels: Vec<String>,
    options: ClassifierOptions,
    /// Compiled programs by (batch, height, width).
    programs: Programs<ProgramKey>,
}

/// The checkpoint file of a model directory: `model.safetensors`, else its one `.pth`/`.pt`/`.bin`.
fn checkpoint_in(dir: &Path) -> Result<PathBuf, VisionError> {
    let st = dir.join("model.safetensors");
    if st.is_file() {
        return Ok(st);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| VisionError::Model {
            path: dir.to_path_buf(),
            message: format!("cannot list: {e}"),
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "pth" || x == "pt" || x == "bin")
        })
        .collect();
    found.sort();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(VisionError::Model {
            path: dir.to_path_buf(),
            message: "holds no model.safetensors and no .pth/.pt/.bin checkpoint".into(),
        }),
        _ => Err(VisionError::Model {
            path: dir.to_path_buf(),
            message: format!(
                "holds several checkpoints ({}); pass one file",
                found
                    .iter()
                    .filter_map(|p| p.file_name()?.to_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
    }
}

/// The JSON document at `file`, `None` when there is no such file.
pub(crate) fn read_json(file: &Path) -> Result<Option<serde_json::Value>, VisionError> {
    if !file.is_file() {
        return Ok(None);
    }
    let bad = |message: String| VisionError::Model {
        path: file.to_path_buf(),
        message,
    };
    let text = std::fs::read_to_string(file).map_err(|e| bad(e.to_string()))?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| bad(format!("not JSON: {e}")))
}

/// Opens a checkpoint file by its content: safetensors or a `torch.save` file.
pub fn open_checkpoint(path: &Path) -> Result<VarBuilder, VisionError> {
    let source: Arc<dyn TensorSource> = if path.extension().is_some_and(|x| x == "safetensors") {
        Arc::new(SafeTensorsFiles::open(path)?)
    } else {
        Arc::new(TorchCheckpoint::open(path)?)
    };
    Ok(VarBuilder::new(source))
}

impl ImageClassifier {
    /// `spec`: a checkpoint file, a model directory, or a hub id in the local cache.
    pub fn load(spec: &str, options: ClassifierOptions) -> Result<Self, VisionError> {
        let path = Path::new(spec);
        let file = if path.is_file() {
            path.to_path_buf()
        } else {
            let model = resolve(spec)?;
            match &model.source {
                ModelSource::Dir(dir) => checkpoint_in(dir)?,
                ModelSource::GgufFile(f) => {
                    return Err(VisionError::Model {
                        path: f.clone(),
                        message: "a GGUF file is not an image classifier".into(),
                    })
                }
            }
        };
        Self::from_checkpoint(&file, options)
    }

    /// The checkpoint at `path`; a `preprocessor_config.json` beside it sets the recipe and a
    /// `config.json` with an `id2label` for every class names the classes.
    pub fn from_checkpoint(path: &Path, options: ClassifierOptions) -> Result<Self, VisionError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let config = read_json(&dir.join("config.json"))?;
        let vb = open_checkpoint(path)?;
        let network = Network::load(&vb, config.as_ref())?;
        let mut clf = Self::new(network, options)?;
        let preprocessor = dir.join("preprocessor_config.json");
        if let Some(cfg) = read_json(&preprocessor)? {
            clf.preprocess = Preprocess::from_preprocessor_config(&cfg).map_err(|message| {
                VisionError::Model {
                    path: preprocessor,
                    message,
                }
            })?;
        }
        if let Some(cfg) = config {
            if let Some(map) = cfg["id2label"].as_object() {
                let classes = clf.network.classes();
                let labels: Option<Vec<String>> = (0..classes)
                    .map(|i| map.get(&i.to_string())?.as_str().map(str::to_string))
                    .collect();
                if let Some(labels) = labels {
                    clf.labels = labels;
                }
            }
        }
        Ok(clf)
    }

    pub fn new(network: Network, options: ClassifierOptions) -> Result<Self, VisionError> {
        if options.batch_size == 0 {
            return Err(VisionError::Unsupported(
                "batch size must be at least 1".into(),
            ));
        }
        let classes = network.classes();
        let labels = if classes == 1000 {
            imagenet_labels()
        } else {
            (0..classes).map(|i| format!("class {i}")).collect()
        };
        Ok(ImageClassifier {
            preprocess: network.default_preprocess(),
            network,
            labels,
            options,
            programs: Programs::default(),
        })
    }

    pub fn network(&self) -> &Network {
        &self.network
    }

    /// What weight compression did in each program compiled so far (one report per program;
    /// every report is empty without `compress`).
    pub fn compression(&self) -> Vec<aneforge::pipeline::CompressionReport> {
        self.programs.compression()
    }

    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// `[3, H, W]` input tensors of `images` under this model's recipe.
    pub fn pixel_values(&self, images: &[RgbImage]) -> Vec<Vec<f32>> {
        images.iter().map(|i| self.preprocess.tensor(i)).collect()
    }

    /// Logits of already preprocessed `[3, H, W]` tensors (all of one size), in order.
    /// `progress` is told how many inputs each finished batch held.
    pub fn logits_of(
        &self,
        inputs: &[Vec<f32>],
        (height, width): (usize, usize),
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<Vec<f32>>, VisionError> {
        run_batched(
            inputs,
            (height, width),
            self.options.batch_size,
            progress,
            |batch, feed| self.execute(batch, (height, width), feed),
        )
    }

    /// Preprocesses and classifies `images`: the `top_k` classes of each, most probable first.
    pub fn classify(
        &self,
        images: &[RgbImage],
        top_k: usize,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<Vec<Prediction>>, VisionError> {
        let size = match images.first() {
            Some(i) => self.preprocess.output_size(i.width, i.height),
            None => return Ok(Vec::new()),
        };
        if self.preprocess.crop.is_none() {
            for (i, img) in images.iter().enumerate() {
                if self.preprocess.output_size(img.width, img.height) != size {
                    return Err(VisionError::Unsupported(format!(
                        "image {i} preprocesses to a different size than image 0; \
                         without a centre crop a batch needs one size"
                    )));
                }
            }
        }
        let inputs = self.pixel_values(images);
        let logits = self.logits_of(&inputs, size, progress)?;
        Ok(logits.iter().map(|l| self.top_k(l, top_k)).collect())
    }

    /// The `k` most probable classes of one row of logits (softmax in f64).
    pub fn top_k(&self, logits: &[f32], k: usize) -> Vec<Prediction> {
        top_k(logits, &self.labels, k)
    }

    fn execute(
        &self,
        batch: usize,
        (h, w): (usize, usize),
        feed: &[f32],
    ) -> Result<Vec<f32>, VisionError> {
        let build = || {
            let x = input(PIXEL_VALUES, &[batch, 3, h, w], DType::F32)?;
            let logits = self.network.forward(&x)?;
            Compiler {
                target: self.options.target.clone(),
                engine: self.options.engine,
                compress: self.options.compress,
                matmul: self.options.matmul,
            }
            .load(&[(LOGITS, &logits)])
        };
        self.programs
            .run((batch, h, w), build, &[(PIXEL_VALUES, feed)], LOGITS)
    }
}

/// The `k` largest of `logits` (ties: the lower index first) with their softmax probabilities
/// (computed in f64) and names from `labels` (empty past its end).
pub fn top_k<S: AsRef<str>>(logits: &[f32], labels: &[S], k: usize) -> Vec<Prediction> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f64> = logits
        .iter()
        .map(|&l| (f64::from(l) - f64::from(max)).exp())
        .collect();
    let total: f64 = exp.iter().sum();
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    order
        .into_iter()
        .take(k)
        .map(|i| Prediction {
            index: i,
            label: labels
                .get(i)
                .map(|l| l.as_ref().to_string())
                .unwrap_or_default(),
            probability: (exp[i] / total) as f32,
            logit: logits[i],
        })
        .collect()
}
