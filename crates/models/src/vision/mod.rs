//! Vision models: images in ([`image_input`]), Pillow-exact resampling ([`resample`]), and image
//! classifiers ([`classifier`]) of the EfficientNet-Lite, ResNet and MobileNetV2/V3 families, with
//! BatchNorm folded into the convolutions ([`layers`]), and the vision transformers ViT and DeiT
//! ([`vit`]) on the pre-norm encoder ([`transformer`]); CLIP zero-shot classification and
//! embeddings ([`clip`]); compiled programs and batching ([`programs`]).

pub mod classifier;
pub mod clip;
pub mod efficientnet_lite;
pub mod image_input;
pub mod layers;
pub mod mobilenet_v2;
pub mod mobilenet_v3;
pub mod programs;
pub mod resample;
pub mod resnet;
pub mod transformer;
pub mod vit;

use std::path::PathBuf;

pub use classifier::{
    imagenet_labels, open_checkpoint, ClassifierOptions, ImageClassifier, Network, Prediction,
    LOGITS, PIXEL_VALUES,
};
pub use clip::{ClipModel, EosPooling};
pub use image_input::{
    decode_image, load_image, CropRounding, ImageError, Preprocess, Resize, RgbImage,
    IMAGENET_MEAN, IMAGENET_STD,
};
pub use resample::Interpolation;

#[derive(Debug, thiserror::Error)]
pub enum VisionError {
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Resolve(#[from] crate::resolve::ResolveError),
    #[error(transparent)]
    Weights(#[from] crate::weights::WeightError),
    #[error("building the vision graph: {0}")]
    Graph(#[from] aneforge::GraphError),
    #[error("vision program: {0}")]
    Program(#[from] aneforge::Error),
    #[error("{}: {message}", path.display())]
    Model { path: PathBuf, message: String },
    #[error("{source_desc}: no known image classifier layout (EfficientNet-Lite, torchvision ResNet, MobileNetV2 or MobileNetV3, Hugging Face ResNet, ViT or DeiT); first tensors: {}", first_names.join(", "))]
    UnknownArchitecture {
        source_desc: String,
        first_names: Vec<String>,
    },
    #[error("{0}")]
    Unsupported(String),
}
