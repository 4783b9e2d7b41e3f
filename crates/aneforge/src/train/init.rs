//! Named trainable parameters with seeded initialisation.

use crate::graph::{parameter, GraphError, HostArray, Tensor};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use std::collections::HashMap;

/// How a weight's axes map to fan-in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightLayout {
    /// Convolution `[Cout, Cin/groups, *kernel]`: fan-in `Cin/groups · Πkernel`.
    Conv,
    /// Dense `[in, out]` (used with `x @ W`): fan-in `in`.
    InOut,
    /// Dense `[out, in]` (used with `linear`): fan-in `in`.
    OutIn,
}

/// The number of inputs feeding one output of a weight of `shape` in `layout`.
pub fn fan_in(shape: &[usize], layout: WeightLayout) -> usize {
    match layout {
        WeightLayout::Conv => shape[1..].iter().product(),
        WeightLayout::InOut => shape[0],
        WeightLayout::OutIn => shape[shape.len() - 1],
    }
}

/// Creates parameter leaves with unique names from one seeded generator, and remembers them in
/// creation order (the order a [`super::Trainer`] takes them in).
pub struct ParamStore {
    rng: StdRng,
    params: Vec<Tensor>,
    initial: HashMap<String, Vec<f32>>,
}

impl ParamStore {
    pub fn new(seed: u64) -> ParamStore {
        ParamStore {
            rng: StdRng::seed_from_u64(seed),
            params: Vec::new(),
            initial: HashMap::new(),
        }
    }

    /// Parameters created under these names start from the given values instead of their
    /// initialiser (to start from weights made elsewhere, e.g. by PyTorch).
    pub fn with_initial_values(mut self, values: HashMap<String, Vec<f32>>) -> ParamStore {
        self.initial = values;
        self
    }

    pub fn params(&self) -> &[Tensor] {
        &self.params
    }

    /// A parameter with the given initial values.
    pub fn with_values(
        &mut self,
        name: &str,
        shape: &[usize],
        values: Vec<f32>,
    ) -> Result<Tensor, GraphError> {
        if self
            .params
            .iter()
            .any(|p| matches!(p.op(), crate::graph::Op::Parameter { name: n, .. } if n == name))
        {
            return Err(GraphError::Name {
                name: name.to_string(),
                message: "a parameter of this name already exists".into(),
            });
        }
        let values = match self.initial.get(name) {
            Some(v) if v.len() == values.len() => v.clone(),
            Some(v) => {
                return Err(GraphError::DataLength {
                    shape: shape.to_vec(),
                    len: v.len(),
                    expected: values.len(),
                })
            }
            None => values,
        };
        let p = parameter(name, HostArray::from_f32(shape, values)?)?;
        self.params.push(p.clone());
        Ok(p)
    }

    pub fn constant(
        &mut self,
        name: &str,
        shape: &[usize],
        value: f32,
    ) -> Result<Tensor, GraphError> {
        let n = shape.iter().product();
        self.with_values(name, shape, vec![value; n])
    }

    pub fn zeros(&mut self, name: &str, shape: &[usize]) -> Result<Tensor, GraphError> {
        self.constant(name, shape, 0.0)
    }

    pub fn ones(&mut self, name: &str, shape: &[usize]) -> Result<Tensor, GraphError> {
        self.constant(name, shape, 1.0)
    }

    /// Normal with mean 0 and standard deviation `std`.
    pub fn normal(&mut self, name: &str, shape: &[usize], std: f32) -> Result<Tensor, GraphError> {
        let n: usize = shape.iter().product();
        let values = (0..n)
            .map(|_| {
                let z: f64 = StandardNormal.sample(&mut self.rng);
                (z * f64::from(std)) as f32
            })
            .collect();
        self.with_values(name, shape, values)
    }

    /// Uniform in `[-bound, bound)`.
    pub fn uniform(
        &mut self,
        name: &str,
        shape: &[usize],
        bound: f32,
    ) -> Result<Tensor, GraphError> {
        let n: usize = shape.iter().product();
        let values = (0..n)
            .map(|_| self.rng.random_range(-bound..bound))
            .collect();
        self.with_values(name, shape, values)
    }

    /// He (Kaiming) normal initialisation for ReLU layers: std `sqrt(2 / fan_in)`.
    pub fn he_normal(
        &mut self,
        name: &str,
        shape: &[usize],
        layout: WeightLayout,
    ) -> Result<Tensor, GraphError> {
        let std = (2.0 / fan_in(shape, layout).max(1) as f64).sqrt() as f32;
        self.normal(name, shape, std)
    }
}
