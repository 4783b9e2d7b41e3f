//! Every integration test of this crate in one binary: each test binary links all
//! dependencies, so one binary instead of one per file keeps the build small and fast.

#[path = "../common/mod.rs"]
mod common;
mod constexpr_einsum;
mod conv_attention;
mod conv_direct;
mod conv_epilogue;
mod conv_expand;
mod elementwise;
mod fusion_state;
mod half_weights;
mod layout;
mod linalg;
mod mil_text;
mod profile;
mod quant;
mod quant_gemv;
mod quantize;
mod reduce_norm;
mod runtime_window;
