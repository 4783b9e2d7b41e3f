//! Host data exchange types of the engine API, as CONTRACTS.md defines them for `aneforge-cpu`.
//! Until the CPU engine lands on main these are declared here with the same shape; afterwards this
//! module re-exports the CPU engine's types so both engines share one API.

use aneforge_mil::DType;
use half::f16;

/// One function input or output: name, element type, shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortInfo {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl PortInfo {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Clone, Copy, Debug)]
pub enum HostSlice<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    I32(&'a [i32]),
    I8(&'a [i8]),
    U8(&'a [u8]),
    Bool(&'a [bool]),
}

impl HostSlice<'_> {
    pub fn len(&self) -> usize {
        match self {
            HostSlice::F32(v) => v.len(),
            HostSlice::F16(v) => v.len(),
            HostSlice::I32(v) => v.len(),
            HostSlice::I8(v) => v.len(),
            HostSlice::U8(v) => v.len(),
            HostSlice::Bool(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn kind(&self) -> &'static str {
        match self {
            HostSlice::F32(_) => "f32",
            HostSlice::F16(_) => "f16",
            HostSlice::I32(_) => "i32",
            HostSlice::I8(_) => "i8",
            HostSlice::U8(_) => "u8",
            HostSlice::Bool(_) => "bool",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum HostTensor {
    F32(Vec<f32>),
    F16(Vec<f16>),
    I32(Vec<i32>),
    I8(Vec<i8>),
    U8(Vec<u8>),
    Bool(Vec<bool>),
}

impl HostTensor {
    pub fn len(&self) -> usize {
        match self {
            HostTensor::F32(v) => v.len(),
            HostTensor::F16(v) => v.len(),
            HostTensor::I32(v) => v.len(),
            HostTensor::I8(v) => v.len(),
            HostTensor::U8(v) => v.len(),
            HostTensor::Bool(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            HostTensor::F32(v) => v.clone(),
            HostTensor::F16(v) => v.iter().map(|x| x.to_f32()).collect(),
            HostTensor::I32(v) => v.iter().map(|&x| x as f32).collect(),
            HostTensor::I8(v) => v.iter().map(|&x| x as f32).collect(),
            HostTensor::U8(v) => v.iter().map(|&x| x as f32).collect(),
            HostTensor::Bool(v) => v.iter().map(|&x| x as u8 as f32).collect(),
        }
    }
}

#[derive(Debug)]
pub enum BufferRef<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    I32(&'a [i32]),
    I8(&'a [i8]),
    U8(&'a [u8]),
    Bool(&'a [bool]),
}

#[derive(Debug)]
pub enum BufferMut<'a> {
    F32(&'a mut [f32]),
    F16(&'a mut [f16]),
    I32(&'a mut [i32]),
    I8(&'a mut [i8]),
    U8(&'a mut [u8]),
    Bool(&'a mut [bool]),
}
