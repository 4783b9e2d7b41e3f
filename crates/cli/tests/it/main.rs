//! Every integration test of this crate in one binary: each test binary links all
//! dependencies, so one binary instead of one per file keeps the build small and fast.

mod bench_scripts;
mod check_fp16_cli;
mod classify_cli;
mod common;
mod embed_rerank;
mod engine_run_bench;
mod export_cli;
mod finetune_cli;
mod flags_cli;
mod hints_cli;
mod import_cli;
mod install_cli;
mod llm_cli;
mod mil_check;
mod process_cli;
mod quantize_cli;
mod rag_cli;
mod stdin_cli;
mod targets_cli;
mod train_cli;
mod transcribe_cli;
