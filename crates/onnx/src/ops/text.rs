//! `TfIdfVectorizer` over integer tokens: each pooled n-gram is counted by comparing shifted
//! views of the input with its tokens (constant gathers and equality tests), for every skip
//! distance up to `max_skip_count + 1` (unigrams once), as ONNX's reference counts them.

use super::{tensor, Importer};
use crate::error::{invalid, unsupported, OpResult};
use crate::node::Node;
use crate::value::{Const, Data, Value};
use aneforge::graph::{concat, constant, CompareOp};
use aneforge::{DType, HostArray, Tensor};

pub const OPS: &[(&str, Importer)] = &[("TfIdfVectorizer", tfidf)];

fn tfidf(n: &Node) -> OpResult<Vec<Value>> {
    let x = n.tensor(0)?;
    if x.dtype() != DType::I32 {
        return unsupported(format!("{} tokens (integers)", x.dtype()));
    }
    let flat = x.rank() == 1;
    let x = match x.rank() {
        1 => x.reshape(&[1, -1])?,
        2 => x,
        r => return invalid(format!("rank-{r} input ([C] or [N, C])")),
    };
    let (batch, len) = (x.shape()[0], x.shape()[1]);
    let Some(pool) = n.attr_ints("pool_int64s").filter(|p| !p.is_empty()) else {
        return unsupported("pool_strings (string tokens)");
    };
    let counts = n.attr_ints("ngram_counts").unwrap_or_default();
    let indexes = n.attr_ints("ngram_indexes").unwrap_or_default();
    let (min_n, max_n) = (
        n.attr_i("min_gram_length", 1).max(1) as usize,
        n.attr_i("max_gram_length", 1).max(1) as usize,
    );
    let max_skip = n.attr_i("max_skip_count", 0).max(0) as usize;
    let Some(&top) = indexes.iter().max() else {
        return invalid("no ngram_indexes");
    };
    let size = usize::try_from(top).or_else(|_| invalid("negative ngram index"))? + 1;
    // the pooled n-grams in pool order: (tokens, output column)
    let mut grams: Vec<(Vec<i64>, usize)> = Vec::new();
    for (i, &start) in counts.iter().enumerate() {
        let end = counts.get(i + 1).copied().unwrap_or(pool.len() as i64);
        let gram = i + 1;
        let (start, end) = (start.max(0) as usize, (end.max(0) as usize).min(pool.len()));
        for tokens in pool.get(start..end).unwrap_or(&[]).chunks(gram) {
            let ordinal = grams.len();
            let column = indexes
                .get(ordinal)
                .copied()
                .and_then(|c| usize::try_from(c).ok())
                .ok_or_else(|| crate::error::OpError::Invalid("too few ngram_indexes".into()))?;
            grams.push((tokens.to_vec(), column));
        }
    }
    let mut columns: Vec<Option<Tensor>> = vec![None; size];
    for (tokens, column) in &grams {
        let g = tokens.len();
        if g < min_n || g > max_n {
            continue;
        }
        let distances = if g == 1 { 1 } else { max_skip + 1 };
        for d in 1..=distances {
            let span = d * (g - 1);
            if span >= len {
                continue;
            }
            let positions = len - span;
            let mut hit: Option<Tensor> = None;
            for (j, &t) in tokens.iter().enumerate() {
                let picks: Vec<i64> = (0..positions).map(|p| (p + j * d) as i64).collect();
                let view = x.gather(&Const::ints(vec![positions], picks)?.to_tensor()?, 1)?;
                let token = constant(HostArray::scalar_i32(
                    i32::try_from(t).or_else(|_| invalid(format!("token {t} beyond i32")))?,
                ));
                let eq = view.compare(CompareOp::Equal, &token)?.cast(DType::F32)?;
                hit = Some(match hit {
                    Some(h) => h.mul(&eq)?,
                    None => eq,
                });
            }
            let Some(hit) = hit else { continue };
            let count = hit.sum(&[1], true)?;
            columns[*column] = Some(match columns[*column].take() {
                Some(c) => c.add(&count)?,
                None => count,
            });
        }
    }
    let zero = Const::new(vec![batch, 1], Data::F32(vec![0.0; batch]))?.to_tensor()?;
    let columns: Vec<Tensor> = columns
        .into_iter()
        .map(|c| c.unwrap_or_else(|| zero.clone()))
        .collect();
    let tf = concat(&columns, 1)?;
    let weights = n.attr_floats("weights").filter(|w| !w.is_empty());
    if weights.as_ref().is_some_and(|w| w.len() != size) {
        return invalid(format!(
            "{} weights for {size} outputs",
            weights.map_or(0, |w| w.len())
        ));
    }
    let weights = weights
        .map(|w| Const::new(vec![size], Data::F32(w))?.to_tensor())
        .transpose()?;
    let y = match (n.attr_s("mode", "TF").as_str(), weights) {
        ("TF", _) | ("TFIDF", None) => tf,
        ("TFIDF", Some(w)) => tf.mul(&w)?,
        ("IDF", w) => {
            let present = tf
                .compare_scalar(CompareOp::Greater, 0.0)?
                .cast(DType::F32)?;
            match w {
                Some(w) => present.mul(&w)?,
                None => present,
            }
        }
        (other, _) => return invalid(format!("mode {other:?}")),
    };
    tensor(if flat {
        y.reshape(&[size as isize])?
    } else {
        y
    })
}
