//! How each source names a decoder's tensors. A [`NameMap`] per source (Hugging Face, GPT-2's
//! Hugging Face layout, llama.cpp's GGUF) is all that differs between them; one loader reads
//! every source through it.

use crate::llm::LlmError;

/// The role of one of a layer's tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Part {
    AttnNorm,
    Q,
    K,
    V,
    /// q, k and v stored as one matrix.
    Qkv,
    QNorm,
    KNorm,
    O,
    /// Normalises the attention output before the residual add (Gemma 3).
    PostAttnNorm,
    MlpNorm,
    /// Normalises the MLP output before the residual add (Gemma 3).
    PostMlpNorm,
    Gate,
    Up,
    /// Gate and up stored as one matrix `[gate; up]` (Phi-3).
    GateUp,
    Down,
    /// The mixture of experts' router `[experts, hidden]`.
    Router,
    /// One expert's (or, stacked, every expert's) gate, up and down projections.
    ExpertGate,
    ExpertUp,
    ExpertDown,
    /// The shared expert's gate, up and down projections (Qwen2-MoE).
    SharedGate,
    SharedUp,
    SharedDown,
    /// The shared expert's one-output gate `[1, hidden]`, whose sigmoid scales its output.
    SharedGateInp,
}

/// How a source stores a layer's experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ExpertLayout {
    /// One tensor per expert: `{layers}{i}.{prefix}{e}.{stem}` (Hugging Face).
    PerExpert { prefix: &'static str },
    /// Every expert in one `[experts, rows, cols]` tensor `{layers}{i}.{stem}` (llama.cpp's
    /// `ffn_*_exps`).
    Stacked,
}

pub(super) struct NameMap {
    /// Layer `i`'s tensors are `{layers}{i}.{stem}.weight` (and `.bias`).
    layers: String,
    /// The stem of each part this source stores; `None` for parts it never has.
    stem: fn(Part) -> Option<&'static str>,
    pub embed: String,
    /// Learned position embeddings, for sources that have them.
    pub positions: Option<String>,
    /// The final norm's stem (`.weight`, `.bias`).
    pub final_norm: String,
    pub head: String,
    /// Layer matrices are stored `[in, out]` (GPT-2's Conv1D) and are transposed on load.
    pub transposed: bool,
    /// q and k rows are in llama.cpp's interleaved RoPE order.
    pub rope_permuted: bool,
    pub experts: ExpertLayout,
}

impl NameMap {
    /// Hugging Face's Llama-style names (`model.layers.N.self_attn.q_proj.weight`).
    pub fn hf() -> NameMap {
        NameMap {
            layers: "model.layers.".into(),
            stem: |part| {
                Some(match part {
                    Part::AttnNorm => "input_layernorm",
                    Part::Q => "self_attn.q_proj",
                    Part::K => "self_attn.k_proj",
                    Part::V => "self_attn.v_proj",
                    Part::Qkv => return None,
                    Part::QNorm => "self_attn.q_norm",
                    Part::KNorm => "self_attn.k_norm",
                    Part::O => "self_attn.o_proj",
                    Part::PostAttnNorm | Part::PostMlpNorm => return None,
                    Part::MlpNorm => "post_attention_layernorm",
                    Part::Gate => "mlp.gate_proj",
                    Part::Up => "mlp.up_proj",
                    Part::GateUp => return None,
                    Part::Down => "mlp.down_proj",
                    Part::Router => "mlp.gate",
                    Part::ExpertGate => "gate_proj",
                    Part::ExpertUp => "up_proj",
                    Part::ExpertDown => "down_proj",
                    Part::SharedGate => "mlp.shared_expert.gate_proj",
                    Part::SharedUp => "mlp.shared_expert.up_proj",
                    Part::SharedDown => "mlp.shared_expert.down_proj",
                    Part::SharedGateInp => "mlp.shared_expert_gate",
                })
            },
            embed: "model.embed_tokens.weight".into(),
            positions: None,
            final_norm: "model.norm".into(),
            head: "lm_head.weight".into(),
            transposed: false,
            rope_permuted: false,
            experts: ExpertLayout::PerExpert {
                prefix: "mlp.experts.",
            },
        }
    }

    /// Phi-3's Hugging Face names: Llama's, with q|k|v in `self_attn.qkv_proj` and gate|up in
    /// `mlp.gate_up_proj`.
    pub fn hf_phi3() -> NameMap {
        NameMap {
            stem: |part| {
                Some(match part {
                    Part::Q | Part::K | Part::V | Part::Gate | Part::Up => return None,
                    Part::Qkv => "self_attn.qkv_proj",
                    Part::GateUp => "mlp.gate_up_proj",
                    other => return (NameMap::hf().stem)(other),
                })
            },
            ..NameMap::hf()
        }
    }

    /// Mixtral's Hugging Face names: Llama's, with `block_sparse_moe.experts.N.w1` (gate), `w3`
    /// (up) and `w2` (down).
    pub fn hf_mixtral() -> NameMap {
        NameMap {
            stem: |part| {
                Some(match part {
                    Part::Router => "block_sparse_moe.gate",
                    Part::ExpertGate => "w1",
                    Part::ExpertUp => "w3",
                    Part::ExpertDown => "w2",
                    other => return (NameMap::hf().stem)(other),
                })
            },
            experts: ExpertLayout::PerExpert {
                prefix: "block_sparse_moe.experts.",
            },
            ..NameMap::hf()
        }
    }

    /// Gemma 3's Hugging Face names: Llama's, with a norm on each side of both sublayers (so
    /// `post_attention_layernorm` is the attention output's norm, not the MLP input's).
    pub fn hf_gemma3() -> NameMap {
        NameMap {
            stem: |part| {
                Some(match part {
                    Part::PostAttnNorm => "post_attention_layernorm",
                    Part::MlpNorm => "pre_feedforward_layernorm",
                    Part::PostMlpNorm => "post_feedforward_layernorm",
                    other => return (NameMap::hf().stem)(other),
                })
            },
            ..NameMap::hf()
        }
    }

    /// GPT-2's Hugging Face names (`h.N.attn.c_attn.weight`), under `prefix` (`transformer.` in
    /// `GPT2LMHeadModel` checkpoints, empty in bare `GPT2Model` ones).
    pub fn hf_gpt2(prefix: &str) -> NameMap {
        NameMap {
            layers: format!("{prefix}h."),
            stem: |part| {
                Some(match part {
                    Part::AttnNorm => "ln_1",
                    Part::Qkv => "attn.c_attn",
                    Part::O => "attn.c_proj",
                    Part::MlpNorm => "ln_2",
                    Part::Up => "mlp.c_fc",
                    Part::Down => "mlp.c_proj",
                    _ => return None,
                })
            },
            embed: format!("{prefix}wte.weight"),
            positions: Some(format!("{prefix}wpe.weight")),
            final_norm: format!("{prefix}ln_f"),
            head: "lm_head.weight".into(),
            transposed: true,
            rope_permuted: false,
            experts: ExpertLayout::Stacked,
        }
    }

    /// llama.cpp's names (`blk.N.attn_q.weight`, `token_embd.weight`, ...). Llama-architecture
    /// files store q and k permuted for llama.cpp's adjacent-pair RoPE.
    pub fn gguf(rope_permuted: bool) -> NameMap {
        NameMap {
            layers: "blk.".into(),
            stem: |part| {
                Some(match part {
                    Part::AttnNorm => "attn_norm",
                    Part::Q => "attn_q",
                    Part::K => "attn_k",
                    Part::V => "attn_v",
                    Part::Qkv => "attn_qkv",
                    Part::QNorm => "attn_q_norm",
                    Part::KNorm => "attn_k_norm",
                    Part::O => "attn_output",
                    Part::PostAttnNorm => "post_attention_norm",
                    Part::MlpNorm => "ffn_norm",
                    Part::PostMlpNorm => "post_ffw_norm",
                    Part::Gate => "ffn_gate",
                    Part::Up => "ffn_up",
                    Part::GateUp => return None,
                    Part::Down => "ffn_down",
                    Part::Router => "ffn_gate_inp",
                    Part::ExpertGate => "ffn_gate_exps",
                    Part::ExpertUp => "ffn_up_exps",
                    Part::ExpertDown => "ffn_down_exps",
                    Part::SharedGate => "ffn_gate_shexp",
                    Part::SharedUp => "ffn_up_shexp",
                    Part::SharedDown => "ffn_down_shexp",
                    Part::SharedGateInp => "ffn_gate_inp_shexp",
                })
            },
            embed: "token_embd.weight".into(),
            positions: Some("position_embd.weight".into()),
            final_norm: "output_norm".into(),
            head: "output.weight".into(),
            transposed: false,
            rope_permuted,
            experts: ExpertLayout::Stacked,
        }
    }

    /// llama.cpp's Phi-3 names: its `ffn_up` holds gate|up `[2·I, hidden]`.
    pub fn gguf_phi3() -> NameMap {
        NameMap {
            stem: |part| {
                Some(match part {
                    Part::Gate | Part::Up => return None,
                    Part::GateUp => "ffn_up",
                    other => return (NameMap::gguf(false).stem)(other),
                })
            },
            ..NameMap::gguf(false)
        }
    }

    pub fn has(&self, part: Part) -> bool {
        (self.stem)(part).is_some()
    }

    /// The stem of layer `i`'s `part`: append `.weight` or `.bias`.
    pub fn layer(&self, i: usize, part: Part) -> Result<String, LlmError> {
        let stem = (self.stem)(part).ok_or_else(|| {
            LlmError::Internal(format!("no tensor name for {part:?} in {}", self.layers))
        })?;
        Ok(format!("{}{i}.{stem}", self.layers))
    }

    /// The stem of expert `e`'s `part` in layer `i` (sources with [`ExpertLayout::PerExpert`]).
    pub fn expert(&self, i: usize, e: usize, part: Part) -> Result<String, LlmError> {
        let (ExpertLayout::PerExpert { prefix }, Some(stem)) = (self.experts, (self.stem)(part))
        else {
            return Err(LlmError::Internal(format!(
                "no per-expert name for {part:?} in {}",
                self.layers
            )));
        };
        Ok(format!("{}{i}.{prefix}{e}.{stem}", self.layers))
    }
}
