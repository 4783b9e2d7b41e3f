//! Model files and loaders: resolving a model id to local files, safetensors and GGUF weights,
//! Hugging Face and sentence-transformers configs, tokenizers, and the encoder and decoder models
//! built on them.

pub mod activation;
pub mod config;
pub mod encoders;
pub mod gguf;
pub mod llm;
pub mod model_dir;
pub mod npy;
pub mod resolve;
pub mod sentence_transformers;
pub mod testing;
pub mod tokenizer;
pub mod tokenizer_config;
pub mod vision;
pub mod weights;
pub mod whisper;

pub use activation::Activation;
pub use config::{ConfigError, ModelConfig};
pub use model_dir::ModelDir;
pub use resolve::{resolve, ModelSource, ResolveError, ResolvedModel, Resolver};
pub use tokenizer::{BatchEncoding, Padding, TextTokenizer, TokenizerError};
pub use weights::{HostArray, SafeTensorsFiles, TensorSource, VarBuilder, WeightError};
