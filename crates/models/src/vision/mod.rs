//! Vision models: images in ([`image_input`]), Pillow-exact resampling ([`resample`]), and
//! image classifiers.

pub mod image_input;
pub mod resample;

pub use image_input::{
    decode_image, load_image, CropRounding, ImageError, Preprocess, Resize, RgbImage,
    IMAGENET_MEAN, IMAGENET_STD,
};
pub use resample::Interpolation;
