//! `aneforge rag index` as a process: killed with SIGKILL in the middle of indexing, a second run
//! completes the index, and the index then holds exactly the chunker's chunks and units of every
//! file once, each unit with its vector; a change and a removal are re-indexed incrementally. Uses the real
//! MiniLM (skipped when absent: scripts/fetch-models.sh minilm).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use aneforge_models::encoders::{EncoderOptions, SentenceEncoder};
use aneforge_models::require_model;
use aneforge_serve::rag::ask::Reranker;
use aneforge_serve::rag::chunk::{chunk, ChunkOptions};
use aneforge_serve::rag::index::sha256_hex;
use aneforge_serve::rag::store::{Store, StoredChunk, StoredUnit};

const MINILM: &str = "sentence-transformers/all-MiniLM-L6-v2";
const FILES: usize = 16;

fn corpus() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/shakespeare.txt");
    std::fs::read_to_string(path).unwrap()
}

/// `FILES` documents of 80 consecutive lines of the corpus each.
fn write_docs(dir: &Path) {
    let text = corpus();
    let lines: Vec<&str> = text.lines().collect();
    for i in 0..FILES {
        let part = lines[1000 + i * 80..1000 + (i + 1) * 80].join("\n");
        std::fs::write(dir.join(format!("part{i:02}.txt")), part).unwrap();
    }
}

fn index_command(docs: &Path, db: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_aneforge"));
    c.args(["rag", "index"])
        .arg(docs)
        .arg("--db")
        .arg(db)
        .args(["--embed-model", MINILM, "-t", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn run_index(docs: &Path, db: &Path) -> String {
    let out = index_command(docs, db).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

/// The index holds each document's chunks and their units exactly once, as the chunker cuts them,
/// each unit with a vector that finds a chunk holding it first, and each file at its content's
/// hash.
fn assert_complete(docs: &Path, db: &Path) {
    let store = Store::open_existing(db).unwrap();
    let mut want = Vec::new();
    let mut want_units = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(docs)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let mut files = Vec::new();
    for name in &names {
        let text = std::fs::read_to_string(docs.join(name)).unwrap();
        files.push((name.clone(), sha256_hex(text.as_bytes())));
        for c in chunk(&text, &ChunkOptions::default()) {
            want_units.extend(c.units.iter().map(|u| StoredUnit {
                path: name.clone(),
                seq: c.seq,
                start_line: u.start_line,
                end_line: u.end_line,
                text: u.text.clone(),
            }));
            want.push(StoredChunk {
                path: name.clone(),
                seq: c.seq,
                start_line: c.start_line,
                end_line: c.end_line,
                text: c.text,
            });
        }
    }
    assert_eq!(store.files().unwrap(), files);
    let got = store.chunks().unwrap();
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
    let units = store.units().unwrap();
    assert!(units.len() > got.len());
    assert_eq!(units, want_units);
    let counts = store.counts().unwrap();
    assert_eq!(counts.units, units.len());
    assert_eq!(counts.vectors, counts.units);
    assert_eq!(counts.words, counts.units);
    let encoder = SentenceEncoder::load(MINILM, EncoderOptions::default()).unwrap();
    for u in units.iter().step_by(13) {
        let q = encoder.encode(&[u.text.as_str()]).unwrap();
        // a unit in the overlap of two chunks is in both: the first holding it is found
        let hit = &store.search(q.row(0).unwrap(), 1).unwrap()[0];
        assert_eq!(hit.path, u.path);
        assert!(
            hit.start_line <= u.start_line && u.end_line <= hit.end_line,
            "{hit:?} does not hold {u:?}"
        );
        assert!(hit.distance < 1e-4, "{}", hit.distance);
    }
}

#[test]
fn sigkill_during_indexing_then_a_rerun_leaves_a_complete_index() {
    let _model = require_model!(MINILM);
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    write_docs(&docs);
    let db = dir.path().join("index.db");

    let mut child = index_command(&docs, &db).spawn().unwrap();
    let started = Instant::now();
    let committed = loop {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "no file was indexed within 5 minutes"
        );
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "the indexer ended ({status}) before it could be killed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let files = Store::open_existing(&db)
            .ok()
            .and_then(|s| s.counts().ok())
            .map_or(0, |c| c.files);
        if files >= 2 {
            break files;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let after_kill = Store::open_existing(&db).unwrap().counts().unwrap();
    assert!(
        after_kill.files >= committed && after_kill.files < FILES,
        "{after_kill:?}"
    );
    assert_eq!(after_kill.vectors, after_kill.units);
    assert_eq!(after_kill.words, after_kill.units);

    let report = run_index(&docs, &db);
    assert!(
        report.contains(&format!(
            "{} added, 0 updated, {} unchanged, 0 removed",
            FILES - after_kill.files,
            after_kill.files
        )),
        "{report}"
    );
    assert_complete(&docs, &db);

    // a changed file is replaced, a removed one dropped, the rest untouched
    std::fs::write(
        docs.join("part03.txt"),
        "A new first line.\nAnd a second one.\n",
    )
    .unwrap();
    std::fs::remove_file(docs.join("part07.txt")).unwrap();
    let report = run_index(&docs, &db);
    assert!(
        report.contains(&format!(
            "0 added, 1 updated, {} unchanged, 1 removed",
            FILES - 2
        )),
        "{report}"
    );
    assert_complete(&docs, &db);
}

#[test]
fn an_index_built_with_another_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("index.db");
    drop(Store::open(&db, "some/model", 8).unwrap());
    let err = match Store::open(&db, "other/model", 8) {
        Ok(_) => panic!("opened an index of another model"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("some/model") && err.contains("other/model"),
        "{err}"
    );
    let not_there = dir.path().join("missing.db");
    let err = match Store::open_existing(&not_there) {
        Ok(_) => panic!("opened a missing index"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("aneforge rag index"), "{err}");
}

#[test]
fn an_index_cut_in_other_chunks_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("index.db");
    let store = Store::open(&db, "some/model", 8).unwrap();
    let first = ChunkOptions {
        max_chars: 300,
        overlap_chars: 60,
        unit_chars: 100,
    };
    store.check_chunking(&first).unwrap();
    drop(store);
    let store = Store::open(&db, "some/model", 8).unwrap();
    store.check_chunking(&first).unwrap();
    let other = ChunkOptions {
        max_chars: 800,
        overlap_chars: 200,
        unit_chars: 300,
    };
    let err = match store.check_chunking(&other) {
        Ok(()) => panic!("accepted chunks of another size"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("300/60") && err.contains("800/200"), "{err}");
}

#[derive(serde::Deserialize)]
struct RescoreCase {
    question: String,
    passages: Vec<String>,
    scores: Vec<f32>,
    order: Vec<usize>,
}

/// An embedding model as the reranking stage orders passages by their cosine to the question as
/// sentence-transformers does (tools/fixtures/rag/rescore.py, MiniLM), keeping the best `top_k`.
#[test]
fn rescoring_by_an_embedding_model_follows_sentence_transformers() {
    let model = require_model!(MINILM);
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/rag/out/rescore.json");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(doc["model"], MINILM);
    let cases: Vec<RescoreCase> = serde_json::from_value(doc["cases"].clone()).unwrap();
    assert_eq!(cases.len(), 3);
    let encoder = SentenceEncoder::from_dir(model.dir(), EncoderOptions::default()).unwrap();
    let reranker = Reranker::Embedding(std::sync::Arc::new(encoder));
    for case in &cases {
        let texts: Vec<&str> = case.passages.iter().map(String::as_str).collect();
        let all = reranker.rank(&case.question, &texts, texts.len()).unwrap();
        let order: Vec<usize> = all.iter().map(|&(i, _)| i).collect();
        assert_eq!(order, case.order, "{}", case.question);
        for &(i, score) in &all {
            assert!(
                (score - case.scores[i]).abs() < 1e-5,
                "{}: passage {i} scored {score}, sentence-transformers {}",
                case.question,
                case.scores[i]
            );
        }
        let best = reranker.rank(&case.question, &texts, 3).unwrap();
        assert_eq!(best, all[..3].to_vec(), "{}", case.question);
    }
}

#[test]
fn a_rescoring_model_and_a_cross_encoder_are_not_both_taken() {
    let out = Command::new(env!("CARGO_BIN_EXE_aneforge"))
        .args(["rag", "ask", "a question", "--db", "missing.db"])
        .args(["-m", "some/llm", "--rerank-model", "a/cross-encoder"])
        .args(["--rescore-model", "an/embedder"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--rescore-model") && stderr.contains("--rerank-model"),
        "{stderr}"
    );
}

#[derive(serde::Deserialize)]
struct Bm25Case {
    question: String,
    bm25: Vec<usize>,
    rescored: Vec<usize>,
    scores: Vec<f32>,
}

/// `rag ask QUESTION --retrieve-only` on the index at `db` with MiniLM, and `extra` arguments.
fn retrieve_only(db: &Path, question: &str, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_aneforge"))
        .args(["rag", "ask", question, "--db"])
        .arg(db)
        .args([
            "-m",
            "unused/llm",
            "--embed-model",
            MINILM,
            "--retrieve-only",
        ])
        .args(extra)
        .output()
        .unwrap()
}

/// The passages `rag ask --retrieve-only` cites, as indices of the fixture's passages (file
/// `pNN.txt` holds passage NN), with their scores.
fn cited(db: &Path, question: &str, extra: &[&str]) -> Vec<(usize, f32)> {
    let mut args = vec!["--format", "json", "-t", "1"];
    args.extend_from_slice(extra);
    let out = retrieve_only(db, question, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    doc[0]["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let path = s["path"].as_str().unwrap();
            let n = path.trim_start_matches('p').trim_end_matches(".txt");
            (n.parse().unwrap(), s["score"].as_f64().unwrap() as f32)
        })
        .collect()
}

/// With `--candidate-pool bm25` the candidates are the word search's ranking alone, as SQLite's
/// FTS5 ranks them for the same query, and `--rescore-model` reorders them as
/// sentence-transformers' cosine does (tools/fixtures/rag/bm25_rescore.py).
#[test]
fn bm25_candidates_follow_fts5_and_their_rescoring_sentence_transformers() {
    require_model!(MINILM);
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tools/fixtures/rag/out/bm25_rescore.json");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(doc["model"], MINILM);
    let passages: Vec<String> = serde_json::from_value(doc["passages"].clone()).unwrap();
    let cases: Vec<Bm25Case> = serde_json::from_value(doc["cases"].clone()).unwrap();
    assert_eq!((passages.len(), cases.len()), (40, 3));
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    for (i, p) in passages.iter().enumerate() {
        std::fs::write(docs.join(format!("p{i:02}.txt")), p).unwrap();
    }
    let db = dir.path().join("index.db");
    run_index(&docs, &db);
    let candidates = doc["candidates"].as_u64().unwrap().to_string();
    for case in &cases {
        let words = cited(
            &db,
            &case.question,
            &["--candidate-pool", "bm25", "-k", "5"],
        );
        let order: Vec<usize> = words.iter().map(|&(i, _)| i).collect();
        assert_eq!(order, case.bm25[..5], "{}", case.question);
        let rescored = cited(
            &db,
            &case.question,
            &[
                "--candidate-pool",
                "bm25",
                "--candidates",
                &candidates,
                "--rescore-model",
                MINILM,
                "-k",
                "3",
            ],
        );
        let order: Vec<usize> = rescored.iter().map(|&(i, _)| i).collect();
        assert_eq!(order, case.rescored[..3], "{}", case.question);
        for (&(_, got), want) in rescored.iter().zip(&case.scores) {
            assert!(
                (got - want).abs() < 1e-5,
                "{}: {got} against {want}",
                case.question
            );
        }
    }
}

#[test]
fn a_question_without_an_indexed_word_is_refused_for_bm25_candidates() {
    require_model!(MINILM);
    let dir = tempfile::tempdir().unwrap();
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs).unwrap();
    std::fs::write(
        docs.join("a.txt"),
        "Something is rotten in the state of Denmark.\n",
    )
    .unwrap();
    let db = dir.path().join("index.db");
    run_index(&docs, &db);
    let out = retrieve_only(&db, "zebras quagga", &["--candidate-pool", "bm25"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("no chunk of the index has a word of the question"),
        "{stderr}"
    );
}
