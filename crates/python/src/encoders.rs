//! `SentenceTransformer` and `CrossEncoder`: `aneforge_models::encoders` with
//! sentence-transformers' Python signatures.

use aneforge_models::encoders::SentenceEncoder;
use aneforge_models::encoders::{
    CrossEncoder as RsCrossEncoder, EncodeOptions, EncoderError, EncoderOptions,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::{arrays, errors, options};

/// The constructor keywords every encoder model takes.
struct Keywords<'a> {
    engine: &'a str,
    target: Option<&'a str>,
    batch_size: usize,
    max_length: Option<usize>,
    matmul_precision: &'a str,
}

/// Loads an encoder model (`load` is the model type's loader) with the GIL released.
fn load_encoder<T: Send>(
    py: Python<'_>,
    spec: &str,
    k: Keywords<'_>,
    load: fn(&str, EncoderOptions) -> Result<T, EncoderError>,
) -> PyResult<T> {
    let (engine, target) = options::select(py, k.engine, k.target)?;
    let matmul = options::matmul(k.matmul_precision, engine, &target)?;
    let options = EncoderOptions {
        target,
        engine,
        batch_size: k.batch_size,
        max_length: k.max_length,
        matmul,
        ..EncoderOptions::default()
    };
    py.detach(move || load(spec, options))
        .map_err(errors::encoder)
}

/// `texts` as a list of strings: one string, or a sequence of strings.
pub fn strings(texts: &Bound<'_, PyAny>, what: &str) -> PyResult<(Vec<String>, bool)> {
    if let Ok(s) = texts.cast::<PyString>() {
        return Ok((vec![s.to_cow()?.into_owned()], true));
    }
    let mut out = Vec::new();
    for (i, item) in texts.try_iter()?.enumerate() {
        let item = item?;
        let s = item.cast::<PyString>().map_err(|_| {
            errors::invalid(format!(
                "{what}[{i}]: expected a str, found {}",
                item.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        out.push(s.to_cow()?.into_owned());
    }
    Ok((out, false))
}

/// A tqdm bar when asked for and tqdm is installed (sentence-transformers' own choice), else none.
fn progress_bar<'py>(
    py: Python<'py>,
    show: bool,
    total: usize,
    what: &str,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if !show {
        return Ok(None);
    }
    let Ok(tqdm) = py.import("tqdm.auto") else {
        return Ok(None);
    };
    let kwargs = PyDict::new(py);
    kwargs.set_item("total", total)?;
    kwargs.set_item("desc", what)?;
    Ok(Some(tqdm.getattr("tqdm")?.call((), Some(&kwargs))?))
}

/// A sentence embedding model, as `sentence_transformers.SentenceTransformer`.
#[pyclass(module = "aneforge", frozen)]
pub struct SentenceTransformer {
    inner: SentenceEncoder,
}

#[pymethods]
impl SentenceTransformer {
    #[new]
    #[pyo3(signature = (model_name_or_path, *, engine = "cpu", target = None, batch_size = 32, max_length = None, matmul_precision = "f32"))]
    fn new(
        py: Python<'_>,
        model_name_or_path: &str,
        engine: &str,
        target: Option<&str>,
        batch_size: usize,
        max_length: Option<usize>,
        matmul_precision: &str,
    ) -> PyResult<Self> {
        let keywords = Keywords {
            engine,
            target,
            batch_size,
            max_length,
            matmul_precision,
        };
        let inner = load_encoder(py, model_name_or_path, keywords, SentenceEncoder::load)?;
        Ok(SentenceTransformer { inner })
    }

    /// Embeds `sentences` (one string or a list); returns a float32 array `[n, dim]` (`[dim]` for
    /// one string) or, with `convert_to_numpy=False`, a list of arrays.
    #[pyo3(signature = (sentences, batch_size = 32, show_progress_bar = false, convert_to_numpy = true, normalize_embeddings = false, prompt_name = None, prompt = None))]
    #[allow(clippy::too_many_arguments)]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        sentences: &Bound<'py, PyAny>,
        batch_size: usize,
        show_progress_bar: bool,
        convert_to_numpy: bool,
        normalize_embeddings: bool,
        prompt_name: Option<String>,
        prompt: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (texts, single) = strings(sentences, "sentences")?;
        let options = EncodeOptions {
            prompt_name,
            prompt,
            normalize: normalize_embeddings,
            pooling: None,
            batch_size: Some(batch_size),
        };
        let bar = progress_bar(py, show_progress_bar, texts.len(), "Batches")?;
        let bar_ref = bar.as_ref().map(|b| b.clone().unbind());
        let embeddings = py
            .detach(|| {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                let mut progress = |n: usize| {
                    if let Some(bar) = &bar_ref {
                        Python::attach(|py| {
                            let _ = bar.bind(py).call_method1("update", (n,));
                        });
                    }
                };
                self.inner.encode_with(&refs, &options, &mut progress)
            })
            .map_err(errors::encoder)?;
        if let Some(bar) = bar {
            bar.call_method0("close")?;
        }
        let (rows, dim) = (embeddings.rows, embeddings.dim);
        let matrix = arrays::matrix(py, embeddings.data, rows, dim)?;
        let out = if single { matrix.get_item(0)? } else { matrix };
        if convert_to_numpy || single {
            return Ok(out);
        }
        Ok(PyList::new(py, out.try_iter()?.collect::<PyResult<Vec<_>>>()?)?.into_any())
    }

    /// The embedding width.
    fn get_sentence_embedding_dimension(&self) -> usize {
        self.inner.dimension()
    }

    /// Tokens per text after truncation (special tokens included).
    #[getter]
    fn max_seq_length(&self) -> usize {
        self.inner.max_length()
    }

    fn __repr__(&self) -> String {
        format!(
            "SentenceTransformer({:?}, dim={}, max_seq_length={})",
            self.inner.dir().display().to_string(),
            self.inner.dimension(),
            self.inner.max_length()
        )
    }
}

/// A reranker, as `sentence_transformers.CrossEncoder`.
#[pyclass(module = "aneforge", frozen)]
pub struct CrossEncoder {
    inner: RsCrossEncoder,
}

fn pairs_of(pairs: &Bound<'_, PyAny>) -> PyResult<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (i, pair) in pairs.try_iter()?.enumerate() {
        let pair = pair?;
        let (items, _) = strings(&pair, &format!("pairs[{i}]"))?;
        match <[String; 2]>::try_from(items) {
            Ok([a, b]) => out.push((a, b)),
            Err(items) => {
                return Err(errors::invalid(format!(
                    "pairs[{i}]: expected two texts (query, passage), found {}",
                    items.len()
                )))
            }
        }
    }
    Ok(out)
}

#[pymethods]
impl CrossEncoder {
    #[new]
    #[pyo3(signature = (model_name_or_path, *, engine = "cpu", target = None, batch_size = 32, max_length = None, matmul_precision = "f32"))]
    fn new(
        py: Python<'_>,
        model_name_or_path: &str,
        engine: &str,
        target: Option<&str>,
        batch_size: usize,
        max_length: Option<usize>,
        matmul_precision: &str,
    ) -> PyResult<Self> {
        let keywords = Keywords {
            engine,
            target,
            batch_size,
            max_length,
            matmul_precision,
        };
        let inner = load_encoder(py, model_name_or_path, keywords, RsCrossEncoder::load)?;
        Ok(CrossEncoder { inner })
    }

    /// Scores of (query, passage) pairs: float32 `[n]` for single-label models, `[n, labels]`
    /// otherwise, after the model's default activation (sentence-transformers' choice);
    /// `activation=False` returns the logits.
    #[pyo3(signature = (sentences, *, activation = true))]
    fn predict<'py>(
        &self,
        py: Python<'py>,
        sentences: &Bound<'py, PyAny>,
        activation: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let pairs = pairs_of(sentences)?;
        let scores = py
            .detach(|| {
                let refs: Vec<(&str, &str)> = pairs
                    .iter()
                    .map(|(a, b)| (a.as_str(), b.as_str()))
                    .collect();
                self.inner.predict_with(&refs, !activation, &mut |_| {})
            })
            .map_err(errors::encoder)?;
        let labels = self.inner.num_labels();
        let rows = scores.len();
        let flat: Vec<f32> = scores.into_iter().flatten().collect();
        let matrix = arrays::matrix(py, flat, rows, labels)?;
        if labels == 1 {
            return matrix.call_method1("reshape", (rows,));
        }
        Ok(matrix)
    }

    /// Documents ranked by score, best first: a list of `{"corpus_id", "score"}` (and `"text"`
    /// with `return_documents=True`), at most `top_k`.
    #[pyo3(signature = (query, documents, *, top_k = None, return_documents = false, activation = true))]
    fn rank<'py>(
        &self,
        py: Python<'py>,
        query: &str,
        documents: &Bound<'py, PyAny>,
        top_k: Option<usize>,
        return_documents: bool,
        activation: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let (docs, _) = strings(documents, "documents")?;
        let ranked = py
            .detach(|| {
                let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
                self.inner
                    .rank(query, &refs, top_k, !activation, &mut |_| {})
            })
            .map_err(errors::encoder)?;
        let out = PyList::empty(py);
        for r in ranked {
            let d = PyDict::new(py);
            d.set_item("corpus_id", r.corpus_id)?;
            d.set_item("score", r.score)?;
            if return_documents {
                d.set_item("text", &docs[r.corpus_id])?;
            }
            out.append(d)?;
        }
        Ok(out)
    }

    #[getter]
    fn num_labels(&self) -> usize {
        self.inner.num_labels()
    }

    fn __repr__(&self) -> String {
        format!(
            "CrossEncoder(num_labels={}, activation={})",
            self.inner.num_labels(),
            self.inner.activation().name()
        )
    }
}
