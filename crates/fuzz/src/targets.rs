//! One function per file parser, `fn(&[u8]) -> bool`: the bytes go through the public entry point
//! the CLI uses for that file kind (from memory where one exists, else from a file written into a
//! scratch directory), followed by the first things the CLI does with the result. The result says
//! whether the input was accepted; an error is a normal outcome, a panic, an abort or a hang is a
//! bug.

use aneforge_models::weights::{TensorSource, TorchCheckpoint};
use aneforge_models::{vision, whisper, ModelConfig, SafeTensorsFiles, TextTokenizer};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A fuzz target: a parser's entry point and where its seed inputs come from.
pub struct Target {
    pub name: &'static str,
    pub run: fn(&[u8]) -> bool,
    pub seeds: fn() -> Vec<Vec<u8>>,
}

/// Every target, in the order the driver runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "mil",
        run: mil_text,
        seeds: crate::seeds::mil,
    },
    Target {
        name: "weight_bin",
        run: weight_bin,
        seeds: crate::seeds::weight_bin,
    },
    Target {
        name: "npy",
        run: npy,
        seeds: crate::seeds::npy,
    },
    Target {
        name: "safetensors",
        run: safetensors,
        seeds: crate::seeds::safetensors,
    },
    Target {
        name: "gguf",
        run: gguf,
        seeds: crate::seeds::gguf,
    },
    Target {
        name: "tokenizer_json",
        run: tokenizer_json,
        seeds: crate::seeds::tokenizer_json,
    },
    Target {
        name: "config_json",
        run: config_json,
        seeds: crate::seeds::config_json,
    },
    Target {
        name: "onnx",
        run: onnx,
        seeds: crate::seeds::onnx,
    },
    Target {
        name: "audio",
        run: audio,
        seeds: crate::seeds::audio,
    },
    Target {
        name: "image",
        run: image,
        seeds: crate::seeds::image,
    },
    Target {
        name: "pth",
        run: pth,
        seeds: crate::seeds::pth,
    },
    Target {
        name: "ct2",
        run: ct2,
        seeds: crate::seeds::ct2,
    },
    Target {
        name: "idx",
        run: idx,
        seeds: crate::seeds::idx,
    },
];

pub fn find(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// `data` written to `name` in this process's scratch directory (under the system temporary
/// directory, `TMPDIR`), for entry points that take a path.
fn scratch_file(name: &str, data: &[u8]) -> PathBuf {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    // statics are never dropped, so the directory is removed by an exit handler instead
    extern "C" fn remove_scratch() {
        if let Some(dir) = DIR.get() {
            let _ = std::fs::remove_dir_all(dir.path());
        }
    }
    let dir = DIR.get_or_init(|| {
        // SAFETY: registers a plain function that touches only this module's static.
        unsafe { libc::atexit(remove_scratch) };
        tempfile::Builder::new()
            .prefix("aneforge-fuzz")
            .tempdir()
            .expect("a scratch directory for fuzz inputs")
    });
    let path = dir.path().join(name);
    // a new file each time: ext4 flushes a file truncated by a rewrite (auto_da_alloc), which
    // costs milliseconds per input
    let _ = std::fs::remove_file(&path);
    std::fs::write(&path, data).expect("writing a fuzz input to the scratch directory");
    path
}

/// MIL text as `aneforge mil check` takes it: parsed, validated with the seed `weight.bin`, and
/// planned by the CPU engine (static shapes, arena size) for every function.
pub fn mil_text(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    check_program(text, crate::seeds::weights_blob())
}

/// A `weight.bin` under a fixed program that reads its entries, checked as [`mil_text`] does.
pub fn weight_bin(data: &[u8]) -> bool {
    check_program(crate::seeds::WEIGHTS_PROGRAM, data.to_vec())
}

fn check_program(text: &str, weights: Vec<u8>) -> bool {
    let Ok(program) = aneforge_mil::parse(text) else {
        return false;
    };
    let Ok(dir) = aneforge_mil::ProgramDir::with_weights(program, weights) else {
        return false;
    };
    let options = aneforge_cpu::CompileOptions::default();
    dir.program
        .functions
        .iter()
        .all(|f| aneforge_cpu::compile_dir(&dir, &f.name, &options).is_ok())
}

pub fn npy(data: &[u8]) -> bool {
    aneforge_models::npy::parse(data).is_ok()
}

/// A `.safetensors` file opened (header parsed, mapped) and every tensor read as the loaders do.
pub fn safetensors(data: &[u8]) -> bool {
    let path = scratch_file("model.safetensors", data);
    match SafeTensorsFiles::open(&path) {
        Ok(files) => read_all(&files),
        Err(_) => false,
    }
}

/// Every tensor of a source read as f32, or as integers where it holds integers.
fn read_all(source: &dyn TensorSource) -> bool {
    source
        .names()
        .iter()
        .all(|name| source.read_f32(name).is_ok() || source.read_i64(name).is_ok())
}

/// A GGUF file: metadata, the LLM config, tokenizer and chat template read from it, every tensor
/// dequantized. Accepted when the file and its tensors are.
pub fn gguf(data: &[u8]) -> bool {
    use aneforge_models::gguf::{GgufFile, GgufTokenizer};
    let Ok(file) = GgufFile::from_bytes("fuzz.gguf", data.to_vec()) else {
        return false;
    };
    let _ = aneforge_models::llm::LlmConfig::from_gguf(&file);
    if let Ok(t) = GgufTokenizer::from_gguf(&file) {
        exercise_tokenizer(&t.tokenizer);
    }
    if let Ok(Some(source)) = file.chat_template() {
        render_chat(source);
    }
    let tensors = file
        .tensors()
        .iter()
        .all(|info| file.dequantize(&info.name).is_ok() || file.read_ints(&info.name).is_ok());
    tensors
}

/// A chat template compiled and rendered for a two-turn conversation, as `aneforge chat` does.
fn render_chat(source: &str) -> bool {
    use aneforge_models::llm::{ChatMessage, ChatTemplate};
    let Ok(template) = ChatTemplate::new(source, Some("<s>".into()), Some("</s>".into())) else {
        return false;
    };
    let messages = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "What is the capital of France?"),
    ];
    template.render(&messages, true).is_ok()
}

/// A `tokenizer.json` loaded as the encoders and LLMs load it, then used on a text.
pub fn tokenizer_json(data: &[u8]) -> bool {
    let path = scratch_file("tokenizer.json", data);
    TextTokenizer::from_file(&path).is_ok_and(|t| exercise_tokenizer(&t))
}

fn exercise_tokenizer(tokenizer: &TextTokenizer) -> bool {
    let Ok(one) = tokenizer.encode("Hello, world! Ünïcode 東京 123") else {
        return false;
    };
    let pair = tokenizer.encode_pair("a question?", "an answer.").is_ok();
    let decoded = tokenizer.decode(&one.ids, true).is_ok();
    pair && decoded
}

/// A `config.json` as every model family reads it: the decoder LLM, encoder and Whisper configs,
/// and an image classifier's preprocessing.
pub fn config_json(data: &[u8]) -> bool {
    let path = scratch_file("config.json", data);
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let Ok(config) = ModelConfig::from_text(path.clone(), text.to_string()) else {
        return false;
    };
    let llm = aneforge_models::llm::LlmConfig::from_hf(&config).is_ok();
    let encoder = aneforge_models::encoders::EncoderConfig::from_model_config(&config).is_ok();
    let whisper = whisper::WhisperConfig::from_hf_json(&path).is_ok();
    let preprocess =
        vision::image_input::Preprocess::from_preprocessor_config(config.value()).is_ok();
    llm || encoder || whisper || preprocess
}

/// An ONNX model decoded and imported into a graph (`aneforge import`), fixed input shapes.
pub fn onnx(data: &[u8]) -> bool {
    let Ok(model) = aneforge_onnx::decode_model(data) else {
        return false;
    };
    aneforge_onnx::import_model(&model, &aneforge_onnx::ImportOptions::default()).is_ok()
}

/// An audio file decoded and resampled to 16 kHz mono (`aneforge transcribe`). The container is
/// found from the content; the name's extension is only a hint.
pub fn audio(data: &[u8]) -> bool {
    let path = scratch_file("audio.wav", data);
    whisper::audio::load_audio(&path).is_ok()
}

/// An image decoded and preprocessed as ImageNet classifiers take it (`aneforge classify`).
pub fn image(data: &[u8]) -> bool {
    let Ok(img) = vision::image_input::decode_image(data, Path::new("fuzz-image")) else {
        return false;
    };
    let preprocess = vision::image_input::Preprocess::imagenet(
        36,
        32,
        vision::resample::Interpolation::Bilinear,
    );
    !preprocess.tensor(&img).is_empty()
}

/// A `torch.save` checkpoint through the restricted unpickler, every tensor read.
pub fn pth(data: &[u8]) -> bool {
    let path = scratch_file("model.pt", data);
    TorchCheckpoint::open(&path).is_ok_and(|c| read_all(&c))
}

/// A CTranslate2 `model.bin` indexed and its tensors viewed under transformers names.
pub fn ct2(data: &[u8]) -> bool {
    let path = scratch_file("model.bin", data);
    whisper::Ct2Model::open(&path).is_ok_and(|m| {
        let _ = whisper::WhisperConfig::from_ct2(&m);
        true
    })
}

/// An IDX file (MNIST layout), raw or gzipped.
pub fn idx(data: &[u8]) -> bool {
    let path = scratch_file("images.idx", data);
    aneforge_apps::idx::read_idx(&path).is_ok()
}
