//! Ports: the inputs and outputs of a function as engines exchange them with the host, read from
//! the function's signature; and the one error type of port access, which every engine's error
//! wraps.

use aneforge_mil::{DType, Function, ValueType};

/// One input or output of a loaded function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl Port {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes per element; `None` for dtypes no port carries.
    pub fn elem_bytes(&self) -> Option<usize> {
        crate::tensor::Elem::from_dtype(self.dtype).map(|e| e.size())
    }

    /// Bytes of the port's elements densely packed (the codec's form).
    pub fn dense_bytes(&self) -> usize {
        self.len() * self.elem_bytes().unwrap_or(0)
    }

    /// The ports of `function` as its signature declares them: its inputs, and its outputs with
    /// the types their defining ops declare. No planning is needed to learn them.
    pub fn signature(function: &Function) -> Result<(Vec<Port>, Vec<Port>), PortError> {
        let port = |name: &str, ty: Option<&ValueType>| -> Result<Port, PortError> {
            let bad = |problem: String| PortError::Declared {
                function: function.name.clone(),
                port: name.to_string(),
                problem,
            };
            let tensor = ty
                .and_then(ValueType::tensor)
                .ok_or_else(|| bad("is not a tensor".into()))?;
            let shape = tensor
                .static_shape()
                .ok_or_else(|| bad("has a symbolic shape; engines need static shapes".into()))?;
            let port = Port {
                name: name.to_string(),
                dtype: tensor.dtype,
                shape,
            };
            match port.elem_bytes() {
                Some(_) => Ok(port),
                None => Err(bad(format!(
                    "has dtype {}, which cannot be exchanged with the host",
                    port.dtype
                ))),
            }
        };
        let inputs = function
            .inputs
            .iter()
            .map(|v| port(&v.name, Some(&v.ty)))
            .collect::<Result<Vec<_>, _>>()?;
        let outputs = function
            .body
            .outputs
            .iter()
            .map(|name| port(name, function.value_type(name)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((inputs, outputs))
    }
}

/// `name dtype [shape]`, as listings show a port.
impl std::fmt::Display for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} {:?}", self.name, self.dtype, self.shape)
    }
}

/// Which side of a function a port is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Input,
    Output,
}

impl std::fmt::Display for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Direction::Input => "input",
            Direction::Output => "output",
        })
    }
}

/// The index of the port named `name` among `ports` (all on side `direction`).
pub fn find_port(ports: &[Port], direction: Direction, name: &str) -> Result<usize, PortError> {
    ports
        .iter()
        .position(|p| p.name == name)
        .ok_or_else(|| PortError::unknown(direction, name, ports.iter().map(|p| p.name.as_str())))
}

/// A port used wrongly: the same on every engine.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    #[error("no {direction} port named `{name}` (ports: {available})")]
    UnknownPort {
        direction: Direction,
        name: String,
        available: String,
    },
    #[error("port `{port}` {shape:?} holds {expected} elements, got {found}")]
    Length {
        port: String,
        shape: Vec<usize>,
        expected: usize,
        found: usize,
    },
    #[error("port `{port}` holds {expected} bytes, got {found}")]
    Bytes {
        port: String,
        expected: usize,
        found: usize,
    },
    #[error("port `{port}` is {expected}, host data is {found}")]
    Dtype {
        port: String,
        expected: DType,
        found: &'static str,
    },
    #[error("port `{port}`: {message}")]
    View { port: String, message: String },
    #[error("share_buffer({output}, {input}): {message}")]
    Share {
        output: String,
        input: String,
        message: String,
    },
    #[error("input `{port}` was never set (set it, share it with an output, or write its view)")]
    Unset { port: String },
    #[error("input `{port}` is given twice")]
    Repeated { port: String },
    #[error("port `{port}` of function `{function}` {problem}")]
    Declared {
        function: String,
        port: String,
        problem: String,
    },
}

impl PortError {
    /// No port on side `direction` is named `name`; `available` names those there are.
    pub fn unknown<'a>(
        direction: Direction,
        name: &str,
        available: impl IntoIterator<Item = &'a str>,
    ) -> PortError {
        PortError::UnknownPort {
            direction,
            name: name.to_string(),
            available: available.into_iter().collect::<Vec<_>>().join(", "),
        }
    }
}
