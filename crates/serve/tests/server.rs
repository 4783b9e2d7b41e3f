//! The server in-process on an ephemeral loopback port, spoken to over HTTP: chat and text
//! completions (plain and streamed) against the library's own generation of the same prompt,
//! embeddings against the encoder, reranking against sentence-transformers' ranking of the tiny
//! cross-encoder fixture (tools/fixtures/encoders/tiny_models.py), OpenAI-style errors for bad
//! requests, and cancellation when a client disconnects mid-stream. Real models (SmolLM2-135M,
//! MiniLM) skip when absent (scripts/fetch-models.sh smollm2 minilm).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use aneforge_models::encoders::{CrossEncoder, EncoderOptions, SentenceEncoder};
use aneforge_models::llm::{
    generate, ChatMessage, GenerateOptions, Llm, LoadOptions, Runner, RunnerOptions,
    SamplingOptions, WeightFormat,
};
use aneforge_models::testing::model_or_skip;
use aneforge_serve::rag::ask::{AskOptions, Rag};
use aneforge_serve::rag::chunk::ChunkOptions;
use aneforge_serve::rag::index::index;
use aneforge_serve::rag::store::Store;
use aneforge_serve::{AppState, ChatModel, EmbedModel, Limits, Metrics, RerankModel, Scheduler};
use futures_util::StreamExt;
use serde_json::{json, Value};

const LLM: &str = "HuggingFaceTB/SmolLM2-135M-Instruct";
const EMBED: &str = "sentence-transformers/all-MiniLM-L6-v2";
const RERANK: &str = "ce-bert-tiny";
const CONTEXT: usize = 512;

/// The retrieval chat's documents: each answers one question.
const RAG_DOCS: [(&str, &str); 3] = [
    (
        "bees.txt",
        "Honey bees live in hives.\nA colony has one queen, many workers and some drones.\n",
    ),
    (
        "trains.txt",
        "The first public steam railway opened in 1825.\nIt ran between Stockton and Darlington.\n",
    ),
    (
        "tea.txt",
        "Green tea is brewed with water below boiling.\nBlack tea takes boiling water.\n",
    ),
];

fn runner_options() -> RunnerOptions {
    RunnerOptions {
        max_context: CONTEXT,
        min_context: 256,
        ..RunnerOptions::default()
    }
}

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/encoders/out")
}

struct Server {
    base: String,
    /// Holds the RAG index's directory for the life of the process.
    _docs: tempfile::TempDir,
    llm: Arc<Llm>,
    encoder: Arc<SentenceEncoder>,
    state: Arc<AppState>,
}

/// One server for every test of this file (loading and compiling the models once), serving on
/// its own runtime thread until the test process exits.
fn server() -> Option<&'static Server> {
    static SERVER: OnceLock<Option<Server>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            model_or_skip(LLM)?;
            model_or_skip(EMBED)?;
            let llm = Arc::new(Llm::load(LLM, LoadOptions::new(WeightFormat::Stored)).unwrap());
            let encoder =
                Arc::new(SentenceEncoder::load(EMBED, EncoderOptions::default()).unwrap());
            let cross =
                CrossEncoder::from_dir(fixture_dir().join("ce_bert"), EncoderOptions::default())
                    .unwrap();
            let docs = tempfile::tempdir().unwrap();
            for (name, text) in RAG_DOCS {
                std::fs::write(docs.path().join(name), text).unwrap();
            }
            let db = docs.path().join("index.db");
            let mut store = Store::open(&db, EMBED, encoder.dimension()).unwrap();
            index(
                docs.path(),
                &mut store,
                &encoder,
                &ChunkOptions::default(),
                &mut |_, _| {},
            )
            .unwrap();
            drop(store);
            let rag = Rag::open(
                "rag",
                &db,
                EMBED,
                encoder.clone(),
                None,
                AskOptions {
                    top_k: 1,
                    candidates: 1,
                    ..AskOptions::default()
                },
            )
            .unwrap();
            let metrics = Arc::new(Metrics::default());
            let scheduler =
                Scheduler::start(llm.clone(), runner_options(), 2, 64, metrics.clone()).unwrap();
            let state = Arc::new(AppState {
                llm: Some(ChatModel {
                    id: LLM.into(),
                    llm: llm.clone(),
                    template: Some(llm.chat().unwrap()),
                    scheduler,
                }),
                embed: Some(EmbedModel {
                    id: EMBED.into(),
                    encoder: encoder.clone(),
                }),
                rerank: Some(RerankModel {
                    id: RERANK.into(),
                    encoder: Arc::new(cross),
                }),
                rag: Some(Arc::new(rag)),
                limits: Limits {
                    max_body_bytes: 64 << 10,
                    max_tokens: 1024,
                    ..Limits::default()
                },
                metrics,
            });
            let (tx, rx) = std::sync::mpsc::channel();
            let serving = state.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                    tx.send(listener.local_addr().unwrap()).unwrap();
                    aneforge_serve::serve(listener, serving, std::future::pending())
                        .await
                        .unwrap();
                });
            });
            let addr = rx.recv().unwrap();
            Some(Server {
                base: format!("http://{addr}"),
                _docs: docs,
                llm,
                encoder,
                state,
            })
        })
        .as_ref()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn post(s: &Server, path: &str, body: &Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{}{path}", s.base))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// The `data:` payloads of a server-sent-event stream, `[DONE]` included.
async fn stream(s: &Server, path: &str, body: &Value) -> Vec<String> {
    let r = reqwest::Client::new()
        .post(format!("{}{path}", s.base))
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let text = r.text().await.unwrap();
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| e.strip_prefix("data: ").expect("a data event").to_string())
        .collect()
}

/// What the library generates for `prompt` on a fresh runner, greedily.
fn library_greedy(llm: &Arc<Llm>, prompt: &[u32], n: usize, stop: &[&str]) -> (String, usize) {
    let mut runner = Runner::new(llm.clone(), runner_options()).unwrap();
    let opts = GenerateOptions {
        max_new_tokens: n,
        sampling: SamplingOptions::greedy(),
        stop: stop.iter().map(|s| s.to_string()).collect(),
        stop_at_eos: true,
    };
    let g = generate(&mut runner, prompt, &opts, &mut |_| true).unwrap();
    (g.text, g.tokens.len())
}

fn chat_prompt(llm: &Llm, question: &str) -> Vec<u32> {
    let text = llm
        .chat()
        .unwrap()
        .render(&[ChatMessage::new("user", question)], true)
        .unwrap();
    llm.encode_raw(&text).unwrap()
}

#[test]
fn greedy_chat_is_the_library_generation_plain_and_streamed() {
    let Some(s) = server() else { return };
    let question = "What is the capital of France?";
    let prompt = chat_prompt(&s.llm, question);
    let (want, want_tokens) = library_greedy(&s.llm, &prompt, 24, &[]);
    assert!(!want.is_empty());
    rt().block_on(async {
        let body = json!({
            "model": LLM,
            "messages": [{"role": "user", "content": question}],
            "temperature": 0,
            "max_tokens": 24,
        });
        let (status, r) = post(s, "/v1/chat/completions", &body).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["object"], "chat.completion");
        assert_eq!(r["choices"][0]["message"]["role"], "assistant");
        assert_eq!(r["choices"][0]["message"]["content"], want.as_str());
        assert_eq!(r["usage"]["prompt_tokens"], prompt.len());
        assert_eq!(r["usage"]["completion_tokens"], want_tokens);
        assert_eq!(r["usage"]["total_tokens"], prompt.len() + want_tokens);
        let reason = if want_tokens == 24 { "length" } else { "stop" };
        assert_eq!(r["choices"][0]["finish_reason"], reason);

        let mut body = body.clone();
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
        let events = stream(s, "/v1/chat/completions", &body).await;
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let text: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(text, want);
        let usage = chunks.last().unwrap();
        assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
        assert_eq!(usage["usage"]["completion_tokens"], want_tokens);
        let finish = &chunks[chunks.len() - 2];
        assert_eq!(finish["choices"][0]["finish_reason"], reason);
        assert!(chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk"));
    });
}

#[test]
fn completions_follow_the_library_with_stop_strings_and_seeds() {
    let Some(s) = server() else { return };
    let text = "The three primary colours are";
    let prompt = s.llm.encode(text).unwrap();
    let (full, _) = library_greedy(&s.llm, &prompt, 16, &[]);
    // a stop string taken from the greedy continuation itself cuts it there
    let word = full
        .split_whitespace()
        .nth(2)
        .expect("a continuation of at least three words")
        .to_string();
    let (want, want_tokens) = library_greedy(&s.llm, &prompt, 16, &[&word]);
    assert!(!want.contains(&word));
    rt().block_on(async {
        let body = json!({"model": LLM, "prompt": text, "temperature": 0, "max_tokens": 16, "stop": [word]});
        let (status, r) = post(s, "/v1/completions", &body).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["object"], "text_completion");
        assert_eq!(r["choices"][0]["text"], want.as_str());
        assert_eq!(r["choices"][0]["finish_reason"], "stop");
        assert_eq!(r["usage"]["prompt_tokens"], prompt.len());
        assert_eq!(r["usage"]["completion_tokens"], want_tokens);

        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let events = stream(s, "/v1/completions", &streamed).await;
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        let joined: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["text"].as_str())
            .collect();
        assert_eq!(joined, want);
        assert_eq!(chunks.last().unwrap()["choices"][0]["finish_reason"], "stop");

        // sampling with a seed repeats itself
        let sampled = json!({"model": LLM, "prompt": text, "temperature": 0.9, "top_p": 0.9, "seed": 7, "max_tokens": 12});
        let (_, a) = post(s, "/v1/completions", &sampled).await;
        let (_, b) = post(s, "/v1/completions", &sampled).await;
        assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"]);
    });
}

#[test]
fn concurrent_requests_all_get_the_greedy_answer() {
    let Some(s) = server() else { return };
    let question = "Name a fruit.";
    let (want, _) = library_greedy(&s.llm, &chat_prompt(&s.llm, question), 12, &[]);
    rt().block_on(async {
        let body = json!({
            "model": LLM,
            "messages": [{"role": "user", "content": question}],
            "temperature": 0,
            "max_tokens": 12,
        });
        let replies =
            futures_util::future::join_all((0..5).map(|_| post(s, "/v1/chat/completions", &body)))
                .await;
        for (status, r) in replies {
            assert_eq!(status, 200, "{r}");
            assert_eq!(r["choices"][0]["message"]["content"], want.as_str());
        }
    });
}

#[test]
fn embeddings_are_the_encoders_in_floats_and_base64() {
    let Some(s) = server() else { return };
    let texts = ["a sentence", "To be, or not to be, that is the question"];
    let want = s.encoder.encode(&texts).unwrap();
    rt().block_on(async {
        let (status, r) = post(
            s,
            "/v1/embeddings",
            &json!({"model": EMBED, "input": texts}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["object"], "list");
        for (i, row) in want.iter().enumerate() {
            assert_eq!(r["data"][i]["index"], i);
            let got: Vec<f32> = r["data"][i]["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            assert_eq!(got, row, "row {i}");
        }
        let (status, r) = post(
            s,
            "/v1/embeddings",
            &json!({"model": EMBED, "input": texts[1], "encoding_format": "base64"}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(r["data"][0]["embedding"].as_str().unwrap())
            .unwrap();
        let got: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(got, want.row(1).unwrap());
        let tokens = s.encoder.tokenizer().encode(texts[1]).unwrap().ids.len();
        assert_eq!(r["usage"]["prompt_tokens"], tokens);
    });
}

#[derive(serde::Deserialize)]
struct RankEntry {
    corpus_id: usize,
    score: f64,
}

#[test]
fn rerank_orders_documents_as_sentence_transformers_does() {
    let Some(s) = server() else { return };
    #[derive(serde::Deserialize)]
    struct Meta {
        queries: Vec<String>,
        passages: Vec<String>,
        rank: Vec<Vec<RankEntry>>,
    }
    let meta: Meta =
        serde_json::from_str(&std::fs::read_to_string(fixture_dir().join("ce_bert.json")).unwrap())
            .unwrap();
    rt().block_on(async {
        // Cohere's string documents, top_n
        let body = json!({"model": RERANK, "query": meta.queries[0], "documents": meta.passages, "top_n": 3});
        let (status, r) = post(s, "/v1/rerank", &body).await;
        assert_eq!(status, 200, "{r}");
        let results = r["results"].as_array().unwrap();
        assert_eq!(results.len(), 3);
        for (got, want) in results.iter().zip(&meta.rank[0]) {
            assert_eq!(got["index"], want.corpus_id);
            let score = got["relevance_score"].as_f64().unwrap();
            assert!((score - want.score).abs() < 1e-3, "{score} vs {}", want.score);
            assert!(got.get("document").is_none());
        }
        // Jina's object documents, returned
        let docs: Vec<Value> = meta.passages.iter().map(|p| json!({"text": p})).collect();
        let body = json!({"model": RERANK, "query": meta.queries[1], "documents": docs, "return_documents": true});
        let (status, r) = post(s, "/rerank", &body).await;
        assert_eq!(status, 200, "{r}");
        let results = r["results"].as_array().unwrap();
        assert_eq!(results.len(), meta.passages.len());
        for (got, want) in results.iter().zip(&meta.rank[1]) {
            assert_eq!(got["index"], want.corpus_id);
            assert_eq!(got["document"]["text"], meta.passages[want.corpus_id].as_str());
        }
    });
}

fn assert_error(
    status: u16,
    body: &Value,
    want_status: u16,
    param: Option<&str>,
    code: Option<&str>,
) {
    assert_eq!(status, want_status, "{body}");
    let e = &body["error"];
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(e["type"].as_str().is_some(), "{body}");
    assert_eq!(e["param"].as_str(), param, "{body}");
    assert_eq!(e["code"].as_str(), code, "{body}");
}

#[test]
fn bad_requests_get_openai_errors_and_the_server_keeps_serving() {
    let Some(s) = server() else { return };
    rt().block_on(async {
        let client = reqwest::Client::new();
        let url = format!("{}/v1/chat/completions", s.base);
        let r = client
            .post(&url)
            .header("content-type", "application/json")
            .body("{\"model\": ")
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        assert_error(status, &r.json().await.unwrap(), 400, None, None);

        let user = json!([{"role": "user", "content": "hi"}]);
        let (status, r) = post(
            s,
            "/v1/chat/completions",
            &json!({"model": "no-such-model", "messages": user}),
        )
        .await;
        assert_error(status, &r, 404, Some("model"), Some("model_not_found"));
        assert!(r["error"]["message"].as_str().unwrap().contains(LLM));

        let (status, r) = post(
            s,
            "/v1/chat/completions",
            &json!({"model": EMBED, "messages": user}),
        )
        .await;
        assert_error(status, &r, 400, Some("model"), Some("model_not_supported"));

        let (status, r) = post(
            s,
            "/v1/chat/completions",
            &json!({"model": LLM, "messages": user, "max_tokens": -5}),
        )
        .await;
        assert_error(status, &r, 400, Some("max_tokens"), None);

        let (status, r) = post(
            s,
            "/v1/chat/completions",
            &json!({"model": LLM, "messages": user, "max_tokens": 100000}),
        )
        .await;
        assert_error(status, &r, 400, Some("max_tokens"), None);

        let long = "all work and no play makes jack a dull boy ".repeat(80);
        let (status, r) = post(s, "/v1/completions", &json!({"model": LLM, "prompt": long})).await;
        assert_error(
            status,
            &r,
            400,
            Some("prompt"),
            Some("context_length_exceeded"),
        );
        assert!(r["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&CONTEXT.to_string()));

        let (status, r) = post(
            s,
            "/v1/chat/completions",
            &json!({"model": LLM, "messages": user, "temperature": -1}),
        )
        .await;
        assert_error(status, &r, 400, Some("temperature"), None);

        let (status, r) = post(
            s,
            "/v1/chat/completions",
            &json!({"model": LLM, "messages": [{"role": "robot", "content": "hi"}]}),
        )
        .await;
        assert_error(status, &r, 400, Some("messages[0].role"), None);

        let (status, r) = post(s, "/v1/embeddings", &json!({"model": EMBED, "input": []})).await;
        assert_error(status, &r, 400, Some("input"), None);

        let (status, r) = post(
            s,
            "/v1/rerank",
            &json!({"model": RERANK, "query": "q", "documents": ["a"], "top_n": 0}),
        )
        .await;
        assert_error(status, &r, 400, Some("top_n"), None);

        let big = "x".repeat(100 << 10);
        let (status, r) = post(s, "/v1/embeddings", &json!({"model": EMBED, "input": big})).await;
        assert_error(status, &r, 413, None, None);

        let r = client
            .get(format!("{}/v1/nothing", s.base))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        assert_error(status, &r.json().await.unwrap(), 404, None, None);

        // still serving
        let (status, r) = post(
            s,
            "/v1/chat/completions",
            &json!({"model": LLM, "messages": user, "max_tokens": 2}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        let health: Value = client
            .get(format!("{}/health", s.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(health["status"], "ok");
        let models: Value = client
            .get(format!("{}/v1/models", s.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let ids: Vec<&str> = models["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, [LLM, "rag", EMBED, RERANK]);
    });
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("{name} missing from the metrics"))
        .parse()
        .unwrap()
}

#[test]
fn a_client_that_disconnects_mid_stream_cancels_its_generation() {
    let Some(s) = server() else { return };
    rt().block_on(async {
        let client = reqwest::Client::new();
        let before = s.state.metrics.cancelled_total();
        let body = json!({
            "model": LLM,
            "messages": [{"role": "user", "content": "Write a long story about a dragon and a knight."}],
            "temperature": 0,
            "max_tokens": 400,
            "stream": true,
        });
        let r = client
            .post(format!("{}/v1/chat/completions", s.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        let mut bytes = r.bytes_stream();
        let first = bytes.next().await.unwrap().unwrap();
        assert!(first.starts_with(b"data: "));
        drop(bytes);
        let mut waited = 0;
        while s.state.metrics.cancelled_total() == before {
            assert!(waited < 600, "the generation was not cancelled within 60 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
            waited += 1;
        }
        let text = client
            .get(format!("{}/metrics", s.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(metric(&text, "aneforge_generations_cancelled_total") >= 1.0);
        assert!(text.contains("aneforge_request_duration_seconds_bucket{endpoint=\"/v1/chat/completions\""));
        // and the worker is free again
        let (status, r) = post(s, "/v1/chat/completions", &json!({"model": LLM, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})).await;
        assert_eq!(status, 200, "{r}");
    });
}

#[test]
fn retrieval_chat_answers_from_the_nearest_document_and_cites_it() {
    let Some(s) = server() else { return };
    let question = "When did the first public steam railway open?";
    rt().block_on(async {
        let body = json!({
            "model": "rag",
            "messages": [{"role": "user", "content": question}],
            "temperature": 0,
            "max_tokens": 32,
        });
        let (status, r) = post(s, "/v1/chat/completions", &body).await;
        assert_eq!(status, 200, "{r}");
        let content = r["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(
            content.ends_with("\n\nSources:\n[1] trains.txt:1-2"),
            "{content}"
        );
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let events = stream(s, "/v1/chat/completions", &streamed).await;
        let text: String = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str::<Value>(e).unwrap())
            .filter_map(|c| {
                c["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(str::to_string)
            })
            .collect();
        assert_eq!(text, content);
        let (status, r) = post(
            s,
            "/v1/chat/completions",
            &json!({"model": "rag", "messages": [{"role": "assistant", "content": "hi"}]}),
        )
        .await;
        assert_error(status, &r, 400, Some("messages"), None);
    });
}
