//! Small grey image datasets for the classifier demos: the 8×8 handwritten digits
//! (scikit-learn's copy of the UCI optical digits test set, committed as CSV) and Fashion-MNIST
//! (28×28, the IDX files Zalando publishes).
//!
//! Orders and splits are pure functions of a seed ([`batch_rng`]), so a run is reproducible.

use std::path::Path;

use aneforge::train::batch_rng;
use rand::RngExt;

use crate::data::DataError;
use crate::idx::read_idx;

fn invalid(what: &str, message: impl Into<String>) -> DataError {
    DataError::Invalid {
        what: what.to_string(),
        message: message.into(),
    }
}

/// `side × side` grey images scaled to [0, 1], row-major, with labels `0..classes`.
#[derive(Clone, Debug)]
pub struct ImageSet {
    pub side: usize,
    pub classes: usize,
    pub images: Vec<f32>,
    pub labels: Vec<i32>,
}

/// The ten Fashion-MNIST classes, in label order (Zalando's README).
pub const FASHION_CLASSES: [&str; 10] = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
];

/// Fashion-MNIST's file names inside its directory.
pub const FASHION_FILES: [&str; 4] = [
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
];

impl ImageSet {
    pub const DIGITS_SIDE: usize = 8;

    /// Parses the committed digits CSV: one image per line, 64 pixel values `0..=16`, then the
    /// label.
    pub fn parse_digits(text: &str, what: &str) -> Result<ImageSet, DataError> {
        let pixels = Self::DIGITS_SIDE * Self::DIGITS_SIDE;
        let mut images = Vec::new();
        let mut labels = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split(',').collect();
            if fields.len() != pixels + 1 {
                return Err(invalid(
                    what,
                    format!(
                        "line {}: {} fields, expected 65 (64 pixels and a label)",
                        n + 1,
                        fields.len()
                    ),
                ));
            }
            for f in &fields[..pixels] {
                let v: u8 = f.trim().parse().map_err(|_| {
                    invalid(what, format!("line {}: pixel {f:?} is not 0..=16", n + 1))
                })?;
                if v > 16 {
                    return Err(invalid(
                        what,
                        format!("line {}: pixel {v} exceeds 16", n + 1),
                    ));
                }
                images.push(f32::from(v) / 16.0);
            }
            let label: i32 = fields[pixels]
                .trim()
                .parse()
                .map_err(|_| invalid(what, format!("line {}: label is not an integer", n + 1)))?;
            if !(0..=9).contains(&label) {
                return Err(invalid(
                    what,
                    format!("line {}: label {label} is not 0..=9", n + 1),
                ));
            }
            labels.push(label);
        }
        if labels.is_empty() {
            return Err(invalid(what, "no images"));
        }
        Ok(ImageSet {
            side: Self::DIGITS_SIDE,
            classes: 10,
            images,
            labels,
        })
    }

    pub fn load_digits(path: &Path) -> Result<ImageSet, DataError> {
        let text = std::fs::read_to_string(path).map_err(|source| DataError::Io {
            path: path.display().to_string(),
            source,
        })?;
        ImageSet::parse_digits(&text, &path.display().to_string())
    }

    /// An IDX image file `[n, side, side]` (bytes 0..=255) and its IDX label file `[n]`
    /// (`0..classes`).
    pub fn load_idx(images: &Path, labels: &Path, classes: usize) -> Result<ImageSet, DataError> {
        let img = read_idx(images)?;
        let lab = read_idx(labels)?;
        let what = images.display().to_string();
        let (n, side) = match img.dims[..] {
            [n, h, w] if h == w && h > 0 => (n, h),
            _ => {
                return Err(invalid(
                    &what,
                    format!(
                        "dimensions {:?}, expected [images, side, side] (square images)",
                        img.dims
                    ),
                ))
            }
        };
        if lab.dims != [n] {
            return Err(invalid(
                &labels.display().to_string(),
                format!(
                    "dimensions {:?}, expected [{n}]: one label for each of the {n} images in {what}",
                    lab.dims
                ),
            ));
        }
        if n == 0 {
            return Err(invalid(&what, "no images"));
        }
        if let Some((i, &l)) = lab
            .data
            .iter()
            .enumerate()
            .find(|&(_, &l)| usize::from(l) >= classes)
        {
            return Err(invalid(
                &labels.display().to_string(),
                format!("label {l} of image {i} is not 0..{classes}"),
            ));
        }
        Ok(ImageSet {
            side,
            classes,
            images: img.data.iter().map(|&b| f32::from(b) / 255.0).collect(),
            labels: lab.data.iter().map(|&l| i32::from(l)).collect(),
        })
    }

    /// Fashion-MNIST's `(train, test)` sets (60,000 and 10,000 images) from a directory holding
    /// [`FASHION_FILES`].
    pub fn load_fashion_mnist(dir: &Path) -> Result<(ImageSet, ImageSet), DataError> {
        let f = |name: &str| dir.join(name);
        let train = ImageSet::load_idx(&f(FASHION_FILES[0]), &f(FASHION_FILES[1]), 10)?;
        let test = ImageSet::load_idx(&f(FASHION_FILES[2]), &f(FASHION_FILES[3]), 10)?;
        if train.side != test.side {
            return Err(invalid(
                &dir.display().to_string(),
                format!(
                    "training images are {0}×{0} but test images {1}×{1}",
                    train.side, test.side
                ),
            ));
        }
        Ok((train, test))
    }

    pub fn pixels(&self) -> usize {
        self.side * self.side
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The images at `indices`, in that order.
    pub fn subset(&self, indices: &[usize]) -> ImageSet {
        let (images, labels) = self.gather(indices);
        ImageSet {
            side: self.side,
            classes: self.classes,
            images,
            labels,
        }
    }

    /// A deterministic shuffle split into `(train, test)` with `test_fraction` of the images.
    pub fn split(&self, test_fraction: f64, seed: u64) -> (ImageSet, ImageSet) {
        let mut order: Vec<usize> = (0..self.len()).collect();
        let mut rng = batch_rng(seed, 7, 0);
        for i in (1..order.len()).rev() {
            let j = rng.random_range(0..=i);
            order.swap(i, j);
        }
        let test_n = ((self.len() as f64) * test_fraction).round() as usize;
        (self.subset(&order[test_n..]), self.subset(&order[..test_n]))
    }

    /// The images and labels at `indices` (`[n, 1, side, side]` row-major and `[n]`).
    pub fn gather(&self, indices: &[usize]) -> (Vec<f32>, Vec<i32>) {
        let p = self.pixels();
        let mut x = Vec::with_capacity(indices.len() * p);
        let mut y = Vec::with_capacity(indices.len());
        for &i in indices {
            x.extend_from_slice(&self.images[i * p..(i + 1) * p]);
            y.push(self.labels[i]);
        }
        (x, y)
    }

    /// [`gather`](Self::gather) with the images whose `flip` entry is set mirrored left to right.
    pub fn gather_flipped(&self, indices: &[usize], flip: &[bool]) -> (Vec<f32>, Vec<i32>) {
        let (mut x, y) = self.gather(indices);
        let s = self.side;
        for (img, _) in x.chunks_exact_mut(s * s).zip(flip).filter(|(_, &f)| f) {
            for row in img.chunks_exact_mut(s) {
                row.reverse();
            }
        }
        (x, y)
    }

    /// The image indices of epoch `epoch` in a shuffled order fixed by `seed`.
    pub fn epoch_order(&self, seed: u64, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.len()).collect();
        let mut rng = batch_rng(seed, 8, epoch);
        for i in (1..order.len()).rev() {
            let j = rng.random_range(0..=i);
            order.swap(i, j);
        }
        order
    }

    /// Whether each image of epoch `epoch` is mirrored (a fair coin per image, fixed by `seed`).
    pub fn epoch_flips(&self, seed: u64, epoch: u64) -> Vec<bool> {
        let mut rng = batch_rng(seed, 9, epoch);
        (0..self.len())
            .map(|_| rng.random_range(0..2u8) == 1)
            .collect()
    }
}
