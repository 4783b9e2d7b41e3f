//! Running an encoder over many inputs: rows sorted by length, cut into batches, each padded to a
//! bucketed sequence length; one compiled program per (batch, length, head) bucket, cached.

use std::sync::Mutex;

use aneforge::engine::{Executable, HostSlice};
use aneforge::{Compress, Engine, ParameterMode, ProgramOptions, Target};

use super::config::{EncoderConfig, Positions};
use super::graph::{
    Encoder, Head, ProgramKey, ATTENTION_MASK, INPUTS_EMBEDS, INPUT_IDS, OUTPUT, PACK_INDEX,
    POOL_MASK, POOL_WEIGHTS, POSITION_IDS, TOKEN_TYPE_IDS, UNPACK_INDEX,
};
use super::pooling::{kept_range, row_weights, Pooling};
use super::weights::{ClassifierHead, EncoderWeights};
use super::EncoderError;

/// How an encoder is compiled and batched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncoderOptions {
    /// `Target::Cpu` (fp32) or `Target::Ane(arch)` (fp16; embeddings are looked up on the host).
    pub target: Target,
    pub engine: Engine,
    /// Weight compression of the program.
    pub compress: Compress,
    /// Texts per program execution.
    pub batch_size: usize,
    /// Overrides the tokenizer's maximum length (tokens, special tokens included).
    pub max_length: Option<usize>,
    /// Compiled bucket programs kept in memory (least recently used dropped first). A call visits
    /// its rows longest first, one program per (batch, length, packed tokens) bucket; when a
    /// repeated workload visits more buckets than this, least-recently-used eviction drops each
    /// program just before it is needed again and every batch recompiles (256 sentences of 5-60
    /// words at batch 32 visit 12).
    pub max_programs: usize,
    /// Look the embeddings up inside the program (`gather`, CPU target only) instead of on the
    /// host. Off by default: every bucket program would carry its own copy of the tables.
    pub embeddings_in_program: bool,
    /// The CPU engine's arithmetic for the fp32 programs' many-row products and attention.
    pub matmul: aneforge::engine::MatmulPrecision,
}

impl Default for EncoderOptions {
    fn default() -> Self {
        EncoderOptions {
            target: Target::Cpu,
            engine: Engine::Cpu,
            compress: Compress::None,
            batch_size: 32,
            max_length: None,
            max_programs: 32,
            embeddings_in_program: false,
            matmul: aneforge::engine::MatmulPrecision::F32,
        }
    }
}

/// One tokenized input: token ids, token type ids, and how many leading tokens are prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    pub ids: Vec<u32>,
    pub type_ids: Vec<u32>,
    pub prompt_len: usize,
}

/// Sequence lengths programs are compiled for; longer inputs round up to a multiple of 128.
/// Roughly 1.5x apart. Packed programs (CPU target) pay for this padding only in attention and
/// its gathers; their per-token work follows [`token_bucket`].
const SEQ_BUCKETS: [usize; 11] = [8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384];

/// The bucketed length for a batch whose longest row has `len` tokens, at most `cap` (>= len).
pub(crate) fn seq_bucket(len: usize, cap: usize) -> usize {
    let bucket = SEQ_BUCKETS
        .iter()
        .copied()
        .find(|&b| b >= len)
        .unwrap_or_else(|| len.div_ceil(128) * 128);
    bucket.min(cap).max(len).max(1)
}

/// Packed rows for a batch holding `tokens` real tokens in a `[batch, seq]` bucket: a multiple
/// of a sixteenth of the padded rows (at least 64), so one bucket has at most 16 packed sizes;
/// never more than the padded rows.
pub(crate) fn token_bucket(tokens: usize, batch: usize, seq: usize) -> usize {
    let padded = batch * seq;
    let step = (padded / 16).max(64);
    (tokens.div_ceil(step) * step).min(padded).max(1)
}

/// `order` (rows by decreasing length) cut into batches of at most `batch_size` rows that never
/// mix sequence buckets, so every row runs padded to its own bucket, whatever else is encoded
/// with it. The CPU engine's reductions over the key axis round differently at different padded
/// lengths although masked keys add exact zeros (a softmax over the same values padded to 8 and
/// to 16 columns differs in the last bits), while the rows of one `[batch, seq]` program are
/// computed independently of each other, of the batch size and of the thread count; so a row's
/// embedding is a function of the row alone, and a corpus split between processes gives the
/// same embeddings bit for bit.
pub(crate) fn bucket_chunks<'a>(
    order: &'a [usize],
    len: impl Fn(usize) -> usize + 'a,
    batch_size: usize,
    cap: usize,
) -> impl Iterator<Item = &'a [usize]> + 'a {
    let mut rest = order;
    std::iter::from_fn(move || {
        let (&first, _) = rest.split_first()?;
        let bucket = seq_bucket(len(first), cap);
        let n = rest
            .iter()
            .take(batch_size)
            .take_while(|&&i| seq_bucket(len(i), cap) == bucket)
            .count();
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        Some(chunk)
    })
}

/// Full batches keep their size; a short batch rounds up to a power of two.
pub(crate) fn batch_bucket(rows: usize, batch_size: usize) -> usize {
    if rows >= batch_size {
        batch_size
    } else {
        rows.next_power_of_two().min(batch_size)
    }
}

/// A compiled bucket program loaded into its engine. The artifact (MIL text and weights blob) is
/// dropped once loaded: the CPU engine's plan holds prepared weights shared between buckets.
struct Program {
    exec: Box<dyn Executable>,
    weight_bytes: usize,
}

struct Programs {
    /// Least recently used first.
    entries: Vec<(ProgramKey, Program)>,
    capacity: usize,
    /// Programs compiled since the runtime was made, evicted ones included.
    compiled: usize,
}

pub(crate) struct Runtime {
    pub cfg: EncoderConfig,
    pub weights: EncoderWeights,
    pub classifier: Option<ClassifierHead>,
    pub options: EncoderOptions,
    /// The id written into padded positions.
    pub pad_id: u32,
    /// The longest row (tokens) this encoder accepts.
    pub max_length: usize,
    programs: Mutex<Programs>,
}

enum Feed {
    F32(&'static str, Vec<f32>),
    I32(&'static str, Vec<i32>),
}

impl Runtime {
    pub fn new(
        cfg: EncoderConfig,
        weights: EncoderWeights,
        classifier: Option<ClassifierHead>,
        options: EncoderOptions,
        pad_id: u32,
        max_length: usize,
    ) -> Result<Runtime, EncoderError> {
        if options.batch_size == 0 {
            return Err(EncoderError::Unsupported(
                "batch size must be at least 1".into(),
            ));
        }
        let capacity = options.max_programs.max(1);
        Ok(Runtime {
            cfg,
            weights,
            classifier,
            options,
            pad_id,
            max_length,
            programs: Mutex::new(Programs {
                entries: Vec::new(),
                capacity,
                compiled: 0,
            }),
        })
    }

    fn host_embeddings(&self) -> bool {
        self.options.target.is_ane() || !self.options.embeddings_in_program
    }

    /// Whether programs skip padding in per-token ops (needs `gather`, walled on the ANE).
    fn packs_tokens(&self) -> bool {
        !self.options.target.is_ane()
    }

    /// Runs every row through the program for `head`, `batch_size` rows per execution (default:
    /// the options'); returns one output vector per row, in the order given. `progress` is told
    /// how many rows each finished batch held.
    pub fn run(
        &self,
        rows: &[Row],
        head: &Head,
        batch_size: Option<usize>,
        progress: &mut dyn FnMut(usize),
    ) -> Result<Vec<Vec<f32>>, EncoderError> {
        let batch_size = batch_size.unwrap_or(self.options.batch_size);
        if batch_size == 0 {
            return Err(EncoderError::Unsupported(
                "batch size must be at least 1".into(),
            ));
        }
        for (index, row) in rows.iter().enumerate() {
            self.check_row(index, row)?;
        }
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(rows[i].ids.len()));
        let mut out = vec![Vec::new(); rows.len()];
        for chunk in bucket_chunks(&order, |i| rows[i].ids.len(), batch_size, self.max_length) {
            let longest = chunk.iter().map(|&i| rows[i].ids.len()).max().unwrap_or(0);
            let batch = batch_bucket(chunk.len(), batch_size);
            let seq = seq_bucket(longest, self.max_length);
            let tokens: usize = chunk.iter().map(|&i| rows[i].ids.len()).sum();
            let key = ProgramKey {
                batch,
                seq,
                head: head.clone(),
                host_embeddings: self.host_embeddings(),
                tokens: self
                    .packs_tokens()
                    .then(|| token_bucket(tokens, batch, seq)),
            };
            let batch_rows: Vec<&Row> = chunk.iter().map(|&i| &rows[i]).collect();
            let feeds = self.feeds(&key, &batch_rows)?;
            let result = self.execute(&key, &feeds)?;
            let dim = result.len() / key.batch;
            for (r, &i) in chunk.iter().enumerate() {
                out[i] = result[r * dim..(r + 1) * dim].to_vec();
            }
            progress(chunk.len());
        }
        Ok(out)
    }

    fn check_row(&self, index: usize, row: &Row) -> Result<(), EncoderError> {
        let bad = |message: String| EncoderError::Input { index, message };
        if row.ids.len() > self.max_length {
            return Err(bad(format!(
                "{} tokens exceed the maximum length {}",
                row.ids.len(),
                self.max_length
            )));
        }
        if let Some(&id) = row
            .ids
            .iter()
            .find(|&&id| id as usize >= self.cfg.vocab_size)
        {
            return Err(bad(format!(
                "token id {id} is outside the model's vocabulary of {} (tokenizer and model disagree)",
                self.cfg.vocab_size
            )));
        }
        if self.cfg.family.reads_token_types() {
            if let Some(&t) = row
                .type_ids
                .iter()
                .find(|&&t| t as usize >= self.cfg.type_vocab_size)
            {
                return Err(bad(format!(
                    "token type {t} is outside the model's {} token types",
                    self.cfg.type_vocab_size
                )));
            }
        }
        Ok(())
    }

    /// Position ids of a padded row, as transformers forms them.
    fn positions(&self, ids: &[u32]) -> Vec<i32> {
        match self.cfg.positions {
            Positions::Absolute => (0..ids.len() as i32).collect(),
            Positions::AfterPadding { padding_idx } => {
                let mut count = 0i32;
                ids.iter()
                    .map(|&id| {
                        if id == padding_idx {
                            padding_idx as i32
                        } else {
                            count += 1;
                            count + padding_idx as i32
                        }
                    })
                    .collect()
            }
        }
    }

    fn feeds(&self, key: &ProgramKey, rows: &[&Row]) -> Result<Vec<Feed>, EncoderError> {
        let (b, s) = (key.batch, key.seq);
        let mut ids = vec![self.pad_id; b * s];
        let mut types = vec![0u32; b * s];
        let mut mask = vec![0.0f32; b * s];
        for (r, row) in rows.iter().enumerate() {
            let n = row.ids.len();
            ids[r * s..r * s + n].copy_from_slice(&row.ids);
            if self.cfg.family.reads_token_types() {
                types[r * s..r * s + n].copy_from_slice(&row.type_ids[..n.min(row.type_ids.len())]);
            }
            mask[r * s..r * s + n].iter_mut().for_each(|m| *m = 1.0);
        }
        let mut positions: Vec<i32> = ids.chunks(s).flat_map(|row| self.positions(row)).collect();
        let mut feeds = Vec::new();
        if let Some(t) = key.tokens {
            // padded slot -> packed row (padding reads row 0) and packed row -> padded slot
            let mut unpack = vec![0i32; b * s];
            let mut pack = vec![0i32; t];
            let mut next = 0usize;
            for (r, row) in rows.iter().enumerate() {
                for j in 0..row.ids.len() {
                    let (slot, packed) = (r * s + j, next + j);
                    let (Some(u), Some(p)) = (unpack.get_mut(slot), pack.get_mut(packed)) else {
                        return Err(EncoderError::Unsupported(format!(
                            "batch holds more tokens than its packed program's {t} rows"
                        )));
                    };
                    *u = packed as i32;
                    *p = slot as i32;
                }
                next += row.ids.len();
            }
            let gather_rows = |padded: &[u32], fill: u32| -> Vec<u32> {
                let mut out: Vec<u32> = pack.iter().map(|&p| padded[p as usize]).collect();
                out[next..].iter_mut().for_each(|v| *v = fill);
                out
            };
            ids = gather_rows(&ids, self.pad_id);
            types = gather_rows(&types, 0);
            let mut packed_positions: Vec<i32> =
                pack.iter().map(|&p| positions[p as usize]).collect();
            packed_positions[next..].iter_mut().for_each(|v| *v = 0);
            positions = packed_positions;
            feeds.push(Feed::I32(UNPACK_INDEX, unpack));
            feeds.push(Feed::I32(PACK_INDEX, pack));
        }
        if key.host_embeddings {
            feeds.push(Feed::F32(
                INPUTS_EMBEDS,
                self.host_embeddings_of(&ids, &types, &positions)?,
            ));
        } else {
            feeds.push(Feed::I32(
                INPUT_IDS,
                ids.iter().map(|&i| i as i32).collect(),
            ));
            if self.cfg.family.reads_token_types() && self.weights.token_type_embeddings.is_some() {
                feeds.push(Feed::I32(
                    TOKEN_TYPE_IDS,
                    types.iter().map(|&t| t as i32).collect(),
                ));
            }
            if key.tokens.is_some() || matches!(self.cfg.positions, Positions::AfterPadding { .. })
            {
                feeds.push(Feed::I32(POSITION_IDS, positions));
            }
        }
        feeds.push(Feed::F32(ATTENTION_MASK, mask));
        if let Head::Pooled { modes, .. } = &key.head {
            let weighted: Vec<Pooling> = modes
                .iter()
                .copied()
                .filter(|m| m.is_weighted_sum())
                .collect();
            if !weighted.is_empty() {
                let m = weighted.len();
                let mut w = vec![0.0f32; b * m * s];
                for (r, row) in rows.iter().enumerate() {
                    let kept = kept_range(row.ids.len(), row.prompt_len);
                    for (k, &mode) in weighted.iter().enumerate() {
                        let at = (r * m + k) * s;
                        row_weights(mode, kept.clone(), &mut w[at..at + s]);
                    }
                }
                feeds.push(Feed::F32(POOL_WEIGHTS, w));
            }
            if modes.contains(&Pooling::Max) {
                let mut pm = vec![0.0f32; b * s];
                for (r, row) in rows.iter().enumerate() {
                    for j in kept_range(row.ids.len(), row.prompt_len) {
                        pm[r * s + j] = 1.0;
                    }
                }
                feeds.push(Feed::F32(POOL_MASK, pm));
            }
        }
        Ok(feeds)
    }

    /// word + token type + position embeddings per position, summed in transformers' order.
    fn table_row<'t>(
        table: &'t super::weights::Table,
        i: usize,
        what: &str,
    ) -> Result<&'t [f32], EncoderError> {
        table.row(i).ok_or_else(|| {
            EncoderError::Unsupported(format!(
                "{what} index {i} is outside its {}-row table",
                table.rows
            ))
        })
    }

    fn host_embeddings_of(
        &self,
        ids: &[u32],
        types: &[u32],
        positions: &[i32],
    ) -> Result<Vec<f32>, EncoderError> {
        let w = &self.weights;
        let h = self.cfg.hidden_size;
        let mut out = vec![0.0f32; ids.len() * h];
        for (p, dst) in out.chunks_exact_mut(h).enumerate() {
            dst.copy_from_slice(Self::table_row(
                &w.word_embeddings,
                ids[p] as usize,
                "token id",
            )?);
            if let Some(table) = &w.token_type_embeddings {
                let t = if self.cfg.family.reads_token_types() {
                    types[p] as usize
                } else {
                    0
                };
                let tr = Self::table_row(table, t, "token type")?;
                dst.iter_mut().zip(tr).for_each(|(d, v)| *d += v);
            }
            let pr = Self::table_row(&w.position_embeddings, positions[p] as usize, "position")?;
            dst.iter_mut().zip(pr).for_each(|(d, v)| *d += v);
        }
        Ok(out)
    }

    fn compile(&self, key: &ProgramKey) -> Result<Program, EncoderError> {
        let graph = Encoder {
            cfg: &self.cfg,
            weights: &self.weights,
            classifier: self.classifier.as_ref(),
        }
        .build(key)?;
        let program_error = |e: aneforge::Error| EncoderError::Program(e);
        let artifact = aneforge::compile_artifact(
            &[(OUTPUT, &graph)],
            &ProgramOptions {
                target: self.options.target.clone(),
                parameters: ParameterMode::Constant,
                compress: self.options.compress,
                weight_ceiling: None,
                ..ProgramOptions::default()
            },
        )
        .map_err(|e| program_error(e.into()))?;
        let main = artifact.functions()[0].name.clone();
        let engine_options = aneforge::engine::EngineOptions {
            matmul: self.options.matmul,
            ..Default::default()
        };
        let exec = aneforge::engine::load_function_with(
            &artifact,
            &main,
            self.options.engine,
            engine_options,
        )
        .map_err(|e| program_error(e.into()))?;
        Ok(Program {
            exec,
            weight_bytes: artifact.weights().len(),
        })
    }

    fn execute(&self, key: &ProgramKey, feeds: &[Feed]) -> Result<Vec<f32>, EncoderError> {
        let mut programs = self
            .programs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let at = match programs.entries.iter().position(|(k, _)| k == key) {
            Some(at) => at,
            None => {
                let model = self.compile(key)?;
                programs.compiled += 1;
                if programs.entries.len() >= programs.capacity {
                    programs.entries.remove(0);
                }
                programs.entries.push((key.clone(), model));
                programs.entries.len() - 1
            }
        };
        let entry = programs.entries.remove(at);
        programs.entries.push(entry);
        let last = programs.entries.len() - 1;
        let exec = &mut programs.entries[last].1.exec;
        let engine_error = |e: aneforge::engine::EngineError| EncoderError::Program(e.into());
        for feed in feeds {
            match feed {
                Feed::F32(name, data) => exec.set_input(name, HostSlice::F32(data)),
                Feed::I32(name, data) => exec.set_input(name, HostSlice::I32(data)),
            }
            .map_err(engine_error)?;
        }
        exec.execute().map_err(engine_error)?;
        exec.read_output_f32(OUTPUT).map_err(engine_error)
    }

    /// Bytes of weights (`weights/weight.bin`) of the compiled programs held.
    pub fn program_weight_bytes(&self) -> usize {
        self.programs
            .lock()
            .map(|p| p.entries.iter().map(|(_, m)| m.weight_bytes).sum())
            .unwrap_or_default()
    }

    /// How many bucket programs are compiled and held.
    pub fn cached_programs(&self) -> usize {
        self.programs
            .lock()
            .map(|p| p.entries.len())
            .unwrap_or_default()
    }

    /// How many bucket programs were compiled, evicted ones included: above
    /// [`Self::cached_programs`] once the cache has dropped programs it needed again.
    pub fn compiled_programs(&self) -> usize {
        self.programs.lock().map(|p| p.compiled).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_never_mix_sequence_buckets() {
        // lengths by decreasing order: buckets 16 (12, 10, 9, 9), 8 (8, 3) and 8 again
        let lens = [12, 10, 9, 9, 8, 3, 2];
        let order: Vec<usize> = (0..lens.len()).collect();
        let chunks: Vec<&[usize]> = bucket_chunks(&order, |i| lens[i], 3, 512).collect();
        assert_eq!(chunks, [&[0, 1, 2][..], &[3], &[4, 5, 6]]);
        let one: Vec<&[usize]> = bucket_chunks(&order, |i| lens[i], 8, 512).collect();
        assert_eq!(one, [&[0, 1, 2, 3][..], &[4, 5, 6]]);
        assert_eq!(bucket_chunks(&[], |i| lens[i], 8, 512).count(), 0);
    }

    #[test]
    fn token_buckets_hold_the_batch_and_never_exceed_the_padded_rows() {
        for (batch, seq) in [(1, 8), (4, 24), (32, 128), (32, 384)] {
            let padded = batch * seq;
            let mut sizes = std::collections::BTreeSet::new();
            for tokens in 1..=padded {
                let t = token_bucket(tokens, batch, seq);
                assert!(
                    t >= tokens && t <= padded,
                    "{tokens} tokens in [{batch}, {seq}]: {t}"
                );
                sizes.insert(t);
            }
            assert!(
                sizes.len() <= 16,
                "[{batch}, {seq}]: {} packed sizes",
                sizes.len()
            );
        }
    }
}
