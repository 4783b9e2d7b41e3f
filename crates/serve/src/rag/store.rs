//! The index file: one SQLite database holding the indexed files (path and SHA-256), their chunks
//! (source lines and text, what answers cite), the chunks' units (what searches match, each
//! pointing at its chunk) and the units' embeddings in a sqlite-vec `vec0` table, whose rowids are
//! the units' ids. A file's chunks, units and vectors are replaced in one transaction, so a
//! process killed at any moment leaves every file either fully indexed at its recorded hash or
//! absent (then indexed again by the next run), never half-written or duplicated. An FTS5 table
//! (`unit_words`, same rowids) indexes the units' words for BM25 keyword search. Both searches
//! return chunks, each once, ranked by its best unit.

use std::path::{Path, PathBuf};
use std::sync::Once;

use rusqlite::{params, Connection, OptionalExtension};

use super::chunk::{Chunk, ChunkOptions};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Sqlite {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error(
        "{path} was indexed with {found} ({found_dim} dimensions), not {wanted} ({wanted_dim}): \
         index into a new --db or use the same embedding model"
    )]
    ModelMismatch {
        path: PathBuf,
        found: String,
        found_dim: usize,
        wanted: String,
        wanted_dim: usize,
    },
    #[error(
        "{path} was indexed in chunks of {found}, not {wanted}: index into a new --db or pass \
         the chunk sizes it was built with"
    )]
    ChunkingMismatch {
        path: PathBuf,
        found: String,
        wanted: String,
    },
    #[error("{path} is not an aneforge index (no embedding model recorded)")]
    NotAnIndex { path: PathBuf },
    #[error(
        "{path} was built by an earlier aneforge that searched whole chunks, not their units: \
         rebuild it with `aneforge rag index DOCS --db {path}`"
    )]
    OldFormat { path: PathBuf },
    #[error("{path}: {what}")]
    Invalid { path: PathBuf, what: String },
}

/// A retrieved chunk with its source.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    /// The chunk's id.
    pub id: i64,
    pub path: String,
    pub seq: usize,
    pub start_line: usize,
    pub end_line: usize,
    pub text: String,
    /// The search's score of the chunk's best unit, lower is nearer: cosine distance for
    /// [`Store::search`], BM25 (as SQLite's FTS5 gives it, negative) for [`Store::search_words`].
    pub distance: f32,
}

/// A chunk as stored: its source and text; for a unit ([`StoredUnit`]), its chunk's path and
/// position with the unit's own lines and the text it is searched by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredChunk {
    pub path: String,
    pub seq: usize,
    pub start_line: usize,
    pub end_line: usize,
    pub text: String,
}

/// Row counts, for reports and consistency checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    pub files: usize,
    pub chunks: usize,
    pub units: usize,
    pub vectors: usize,
    /// Rows of the word index.
    pub words: usize,
}

/// A unit as stored: its chunk (path and position), its lines and the text it is searched by.
pub type StoredUnit = StoredChunk;

/// The layout of the tables, recorded in `meta` as `format`; an index without it searched whole
/// chunks (`chunk_vectors`, `chunk_words`).
const FORMAT: &str = "units-1";

/// Words left out of the word search's query (Lucene's English stop words and the words that
/// open questions), unless the question has no other word: they match most units and rank
/// the short ones that hold them first.
const STOP_WORDS: [&str; 45] = [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with", "what", "which", "who", "whom", "whose", "how",
    "why", "when", "where", "do", "does", "did",
];

pub struct Store {
    conn: Connection,
    path: PathBuf,
    model: String,
    dim: usize,
}

/// Registers sqlite-vec with every SQLite connection this process opens.
fn register_vec() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        type Init = unsafe extern "C" fn(
            *mut rusqlite::ffi::sqlite3,
            *mut *mut std::os::raw::c_char,
            *const rusqlite::ffi::sqlite3_api_routines,
        ) -> std::os::raw::c_int;
        // SAFETY: sqlite3_vec_init is the extension's entry point, whose C signature is `Init`
        // (sqlite-vec declares it without arguments on the Rust side); with SQLITE_CORE it
        // ignores the API routines pointer and links against the bundled SQLite.
        unsafe {
            let init =
                std::mem::transmute::<*const (), Init>(sqlite_vec::sqlite3_vec_init as *const ());
            rusqlite::ffi::sqlite3_auto_extension(Some(init));
        }
    });
}

impl Store {
    /// Opens or creates the index at `path` for embeddings of `model` with `dim` dimensions.
    pub fn open(path: &Path, model: &str, dim: usize) -> Result<Store, StoreError> {
        let conn = Self::connect(path)?;
        let err = |source| StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let found = Self::read_meta(&conn).map_err(err)?;
        match found {
            Some((found, found_dim)) if found != model || found_dim != dim => {
                return Err(StoreError::ModelMismatch {
                    path: path.to_path_buf(),
                    found,
                    found_dim,
                    wanted: model.to_string(),
                    wanted_dim: dim,
                })
            }
            Some(_) if Self::format(&conn).map_err(err)?.as_deref() == Some(FORMAT) => {}
            Some(_) => Self::rebuild(&conn, dim).map_err(err)?,
            None => {
                let tx = conn.unchecked_transaction().map_err(err)?;
                tx.execute_batch("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);")
                    .map_err(err)?;
                Self::create_tables(&tx, dim).map_err(err)?;
                tx.execute(
                    "INSERT INTO meta(key, value) VALUES ('model', ?1), ('dim', ?2)",
                    params![model, dim.to_string()],
                )
                .map_err(err)?;
                tx.commit().map_err(err)?;
            }
        }
        Ok(Store {
            conn,
            path: path.to_path_buf(),
            model: model.to_string(),
            dim,
        })
    }

    /// The tables of files, chunks and units (all but `meta`), and the format they have.
    fn create_tables(tx: &rusqlite::Transaction<'_>, dim: usize) -> rusqlite::Result<()> {
        tx.execute_batch(&format!(
            "CREATE TABLE files(path TEXT PRIMARY KEY, sha256 TEXT NOT NULL,
                                chunks INTEGER NOT NULL);
             CREATE TABLE chunks(id INTEGER PRIMARY KEY, path TEXT NOT NULL,
                                 seq INTEGER NOT NULL, start_line INTEGER NOT NULL,
                                 end_line INTEGER NOT NULL, text TEXT NOT NULL,
                                 UNIQUE(path, seq));
             CREATE TABLE units(id INTEGER PRIMARY KEY, chunk_id INTEGER NOT NULL,
                                start_line INTEGER NOT NULL, end_line INTEGER NOT NULL,
                                text TEXT NOT NULL);
             CREATE INDEX units_by_chunk ON units(chunk_id);
             CREATE VIRTUAL TABLE unit_vectors USING vec0(
                 embedding float[{dim}] distance_metric=cosine);
             CREATE VIRTUAL TABLE unit_words USING fts5(text);"
        ))?;
        tx.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES ('format', ?1)",
            [FORMAT],
        )?;
        Ok(())
    }

    fn format(conn: &Connection) -> rusqlite::Result<Option<String>> {
        conn.query_row("SELECT value FROM meta WHERE key = 'format'", [], |r| {
            r.get(0)
        })
        .optional()
    }

    /// Empties an index of an earlier format and gives it the current tables, in one transaction:
    /// with no file recorded, the next indexing run indexes every file again.
    fn rebuild(conn: &Connection, dim: usize) -> rusqlite::Result<()> {
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(
            "DROP TABLE IF EXISTS chunk_vectors; DROP TABLE IF EXISTS chunk_words;
             DROP TABLE IF EXISTS unit_vectors; DROP TABLE IF EXISTS unit_words;
             DROP TABLE IF EXISTS units; DROP TABLE IF EXISTS chunks;
             DROP TABLE IF EXISTS files; DELETE FROM meta WHERE key = 'chunking';",
        )?;
        Self::create_tables(&tx, dim)?;
        tx.commit()
    }

    /// Opens an existing index, whatever model built it.
    pub fn open_existing(path: &Path) -> Result<Store, StoreError> {
        if !path.is_file() {
            return Err(StoreError::Invalid {
                path: path.to_path_buf(),
                what: "no index here: build one with `aneforge rag index DOCS --db PATH`".into(),
            });
        }
        let conn = Self::connect(path)?;
        let meta = Self::read_meta(&conn).map_err(|source| StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        })?;
        let (model, dim) = meta.ok_or_else(|| StoreError::NotAnIndex {
            path: path.to_path_buf(),
        })?;
        let format = Self::format(&conn).map_err(|source| StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        })?;
        if format.as_deref() != Some(FORMAT) {
            return Err(StoreError::OldFormat {
                path: path.to_path_buf(),
            });
        }
        Ok(Store {
            conn,
            path: path.to_path_buf(),
            model,
            dim,
        })
    }

    fn connect(path: &Path) -> Result<Connection, StoreError> {
        register_vec();
        let err = |source| StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        };
        let conn = Connection::open(path).map_err(err)?;
        // The timeout comes first: switching a new file to WAL takes a lock that a reader opening
        // it at the same moment may hold, and without a timeout that fails at once.
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(err)?;
        // WAL: readers (a server answering) never block the indexer; FULL: a committed file
        // survives a power cut, not only a killed process.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(err)?;
        Ok(conn)
    }

    fn read_meta(conn: &Connection) -> rusqlite::Result<Option<(String, usize)>> {
        let exists: bool = conn.query_row(
            "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta')",
            [],
            |r| r.get(0),
        )?;
        if !exists {
            return Ok(None);
        }
        let get = |key: &str| -> rusqlite::Result<Option<String>> {
            conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
                .optional()
        };
        match (get("model")?, get("dim")?) {
            (Some(m), Some(d)) => Ok(d.parse().ok().map(|d| (m, d))),
            _ => Ok(None),
        }
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// The embedding model the index was built with, and its dimension.
    pub fn model(&self) -> (&str, usize) {
        (&self.model, self.dim)
    }

    /// Checks that the index's files were cut by `opts`, recording them on an index that has none
    /// (a new one, or one built before the chunking was recorded): unchanged files are never cut
    /// again, so one index holding chunks of two sizes would go unnoticed.
    pub fn check_chunking(&self, opts: &ChunkOptions) -> Result<(), StoreError> {
        let wanted = format!(
            "{}/{} bytes, units of {}",
            opts.max_chars, opts.overlap_chars, opts.unit_chars
        );
        let found: Option<String> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'chunking'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| self.err(e))?;
        match found {
            Some(found) if found != wanted => Err(StoreError::ChunkingMismatch {
                path: self.path.clone(),
                found,
                wanted,
            }),
            Some(_) => Ok(()),
            None => self
                .conn
                .execute(
                    "INSERT INTO meta(key, value) VALUES ('chunking', ?1)",
                    [&wanted],
                )
                .map(|_| ())
                .map_err(|e| self.err(e)),
        }
    }

    /// Indexed files and their SHA-256 (hex).
    pub fn files(&self) -> Result<Vec<(String, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT path, sha256 FROM files ORDER BY path")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>());
        rows.map_err(|e| self.err(e))
    }

    /// Replaces everything indexed for `path` by `chunks` (row `i` of `vectors` is the embedding
    /// of the `i`-th unit, counting the chunks' units in order), recording `sha256`; all or
    /// nothing.
    pub fn replace_file(
        &mut self,
        path: &str,
        sha256: &str,
        chunks: &[Chunk],
        vectors: &[&[f32]],
    ) -> Result<(), StoreError> {
        let units: usize = chunks.iter().map(|c| c.units.len()).sum();
        if units != vectors.len() || vectors.iter().any(|v| v.len() != self.dim) {
            return Err(StoreError::Invalid {
                path: self.path.clone(),
                what: format!(
                    "{path}: {units} units with {} embeddings (each must have {} values)",
                    vectors.len(),
                    self.dim
                ),
            });
        }
        let path_db = self.path.clone();
        let err = |source| StoreError::Sqlite {
            path: path_db.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(err)?;
        Self::delete_in(&tx, path).map_err(err)?;
        tx.execute(
            "INSERT INTO files(path, sha256, chunks) VALUES (?1, ?2, ?3)",
            params![path, sha256, chunks.len() as i64],
        )
        .map_err(err)?;
        {
            let mut chunk_stmt = tx
                .prepare(
                    "INSERT INTO chunks(path, seq, start_line, end_line, text)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(err)?;
            let mut unit_stmt = tx
                .prepare(
                    "INSERT INTO units(chunk_id, start_line, end_line, text)
                     VALUES (?1, ?2, ?3, ?4)",
                )
                .map_err(err)?;
            let mut vec_stmt = tx
                .prepare("INSERT INTO unit_vectors(rowid, embedding) VALUES (?1, ?2)")
                .map_err(err)?;
            let mut word_stmt = tx
                .prepare("INSERT INTO unit_words(rowid, text) VALUES (?1, ?2)")
                .map_err(err)?;
            let mut vectors = vectors.iter();
            for c in chunks {
                chunk_stmt
                    .execute(params![
                        path,
                        c.seq as i64,
                        c.start_line as i64,
                        c.end_line as i64,
                        c.text
                    ])
                    .map_err(err)?;
                let chunk_id = tx.last_insert_rowid();
                for (u, v) in c.units.iter().zip(vectors.by_ref()) {
                    unit_stmt
                        .execute(params![
                            chunk_id,
                            u.start_line as i64,
                            u.end_line as i64,
                            u.text
                        ])
                        .map_err(err)?;
                    let id = tx.last_insert_rowid();
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    vec_stmt.execute(params![id, bytes]).map_err(err)?;
                    word_stmt.execute(params![id, u.text]).map_err(err)?;
                }
            }
        }
        tx.commit().map_err(err)
    }

    /// Removes a file and its chunks from the index.
    pub fn remove_file(&mut self, path: &str) -> Result<(), StoreError> {
        let path_db = self.path.clone();
        let err = |source| StoreError::Sqlite {
            path: path_db.clone(),
            source,
        };
        let tx = self.conn.transaction().map_err(err)?;
        Self::delete_in(&tx, path).map_err(err)?;
        tx.commit().map_err(err)
    }

    fn delete_in(tx: &rusqlite::Transaction<'_>, path: &str) -> rusqlite::Result<()> {
        let ids: Vec<i64> = {
            let mut stmt = tx.prepare(
                "SELECT u.id FROM units AS u JOIN chunks AS c ON c.id = u.chunk_id
                 WHERE c.path = ?1",
            )?;
            let rows = stmt.query_map([path], |r| r.get(0))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        for id in ids {
            tx.execute("DELETE FROM unit_vectors WHERE rowid = ?1", [id])?;
            tx.execute("DELETE FROM unit_words WHERE rowid = ?1", [id])?;
            tx.execute("DELETE FROM units WHERE id = ?1", [id])?;
        }
        tx.execute("DELETE FROM chunks WHERE path = ?1", [path])?;
        tx.execute("DELETE FROM files WHERE path = ?1", [path])?;
        Ok(())
    }

    /// The `k` chunks whose units are nearest to `query`, each once at its nearest unit's
    /// distance, nearest first (ties by unit id).
    pub fn search(&self, query: &[f32], k: usize) -> Result<Vec<Hit>, StoreError> {
        if query.len() != self.dim {
            return Err(StoreError::Invalid {
                path: self.path.clone(),
                what: format!(
                    "a query of {} values against an index of {} dimensions",
                    query.len(),
                    self.dim
                ),
            });
        }
        if k == 0 {
            return Ok(Vec::new());
        }
        let bytes: Vec<u8> = query.iter().flat_map(|x| x.to_le_bytes()).collect();
        let units = self.count("SELECT COUNT(*) FROM units")?;
        if units == 0 {
            return Ok(Vec::new());
        }
        let mut stmt = self
            .conn
            .prepare(
                "SELECT c.id, c.path, c.seq, c.start_line, c.end_line, c.text, v.distance
                 FROM (SELECT rowid, distance FROM unit_vectors
                       WHERE embedding MATCH ?1 AND k = ?2) AS v
                 JOIN units AS u ON u.id = v.rowid
                 JOIN chunks AS c ON c.id = u.chunk_id
                 ORDER BY v.distance, u.id",
            )
            .map_err(|e| self.err(e))?;
        // several units of one chunk may come first: ask for more units until k chunks are found
        // (sqlite-vec answers at most MAX_KNN nearest)
        let mut wanted = (4 * k).min(units).min(MAX_KNN);
        loop {
            let rows = stmt
                .query_map(params![bytes, wanted as i64], Self::hit)
                .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                .map_err(|e| self.err(e))?;
            let hits = best_per_chunk(rows, k);
            if hits.len() == k || wanted >= units.min(MAX_KNN) {
                return Ok(hits);
            }
            wanted = (wanted * 2).min(units).min(MAX_KNN);
        }
    }

    fn hit(r: &rusqlite::Row<'_>) -> rusqlite::Result<Hit> {
        Ok(Hit {
            id: r.get(0)?,
            path: r.get(1)?,
            seq: r.get::<_, i64>(2)? as usize,
            start_line: r.get::<_, i64>(3)? as usize,
            end_line: r.get::<_, i64>(4)? as usize,
            text: r.get(5)?,
            distance: r.get::<_, f64>(6)? as f32,
        })
    }

    /// The FTS5 query for `text`: its words, lower-cased and quoted, joined by OR, without the
    /// [`STOP_WORDS`] unless nothing else is left; `None` when it has no word.
    pub fn words_query(text: &str) -> Option<String> {
        let words: Vec<String> = text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect();
        let kept: Vec<&String> = words
            .iter()
            .filter(|w| !STOP_WORDS.contains(&w.as_str()))
            .collect();
        let terms: Vec<&String> = if kept.is_empty() {
            words.iter().collect()
        } else {
            kept
        };
        if terms.is_empty() {
            return None;
        }
        let quoted: Vec<String> = terms.iter().map(|w| format!("\"{w}\"")).collect();
        Some(quoted.join(" OR "))
    }

    /// The `k` chunks whose units best match the words of `text` (see [`Store::words_query`]) by
    /// BM25, each once at its best unit's score, best first (ties by unit id).
    pub fn search_words(&self, text: &str, k: usize) -> Result<Vec<Hit>, StoreError> {
        let Some(query) = Self::words_query(text) else {
            return Ok(Vec::new());
        };
        if k == 0 {
            return Ok(Vec::new());
        }
        let mut stmt = self
            .conn
            .prepare(
                "SELECT c.id, c.path, c.seq, c.start_line, c.end_line, c.text, bm25(unit_words)
                 FROM unit_words JOIN units AS u ON u.id = unit_words.rowid
                 JOIN chunks AS c ON c.id = u.chunk_id
                 WHERE unit_words MATCH ?1
                 ORDER BY bm25(unit_words), u.id",
            )
            .map_err(|e| self.err(e))?;
        // units come best first, so a chunk's first unit is its best; rows are read until k
        // chunks are found
        let mut seen = std::collections::HashSet::new();
        let mut hits = Vec::with_capacity(k);
        let rows = stmt
            .query_map(params![query], Self::hit)
            .map_err(|e| self.err(e))?;
        for row in rows {
            let hit = row.map_err(|e| self.err(e))?;
            if seen.insert(hit.id) {
                hits.push(hit);
                if hits.len() == k {
                    break;
                }
            }
        }
        Ok(hits)
    }

    fn count(&self, sql: &str) -> Result<usize, StoreError> {
        self.conn
            .query_row(sql, [], |r| r.get::<_, i64>(0))
            .map(|n| n as usize)
            .map_err(|e| self.err(e))
    }

    pub fn counts(&self) -> Result<Counts, StoreError> {
        Ok(Counts {
            files: self.count("SELECT COUNT(*) FROM files")?,
            chunks: self.count("SELECT COUNT(*) FROM chunks")?,
            units: self.count("SELECT COUNT(*) FROM units")?,
            vectors: self.count("SELECT COUNT(*) FROM unit_vectors")?,
            words: self.count("SELECT COUNT(*) FROM unit_words")?,
        })
    }

    /// Every chunk, in path and position order.
    pub fn chunks(&self) -> Result<Vec<StoredChunk>, StoreError> {
        self.stored("SELECT path, seq, start_line, end_line, text FROM chunks ORDER BY path, seq")
    }

    /// Every unit with its chunk's path and position, in path, position and unit order.
    pub fn units(&self) -> Result<Vec<StoredUnit>, StoreError> {
        self.stored(
            "SELECT c.path, c.seq, u.start_line, u.end_line, u.text
             FROM units AS u JOIN chunks AS c ON c.id = u.chunk_id
             ORDER BY c.path, c.seq, u.id",
        )
    }

    /// The rows of `sql`, which selects path, seq, start line, end line and text.
    fn stored(&self, sql: &str) -> Result<Vec<StoredChunk>, StoreError> {
        let mut stmt = self.conn.prepare(sql).map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok(StoredChunk {
                    path: r.get(0)?,
                    seq: r.get::<_, i64>(1)? as usize,
                    start_line: r.get::<_, i64>(2)? as usize,
                    end_line: r.get::<_, i64>(3)? as usize,
                    text: r.get(4)?,
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>());
        rows.map_err(|e| self.err(e))
    }
}

/// The largest `k` sqlite-vec's `vec0` answers.
const MAX_KNN: usize = 4096;

/// The first hit of each chunk in `hits` (best first), at most `k` of them.
fn best_per_chunk(hits: Vec<Hit>, k: usize) -> Vec<Hit> {
    let mut seen = std::collections::HashSet::new();
    hits.into_iter()
        .filter(|h| seen.insert(h.id))
        .take(k)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::chunk::{chunk, ChunkOptions};
    use super::*;

    fn unit_vector(x: f32, y: f32) -> Vec<f32> {
        let n = (x * x + y * y).sqrt();
        vec![x / n, y / n]
    }

    #[test]
    fn an_index_of_the_earlier_format_is_refused_for_answers_and_rebuilt_for_indexing() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("old.db");
        register_vec();
        {
            // the tables an index had when searches matched whole chunks
            let conn = Connection::open(&db).unwrap();
            conn.execute_batch(
                "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
                 CREATE TABLE files(path TEXT PRIMARY KEY, sha256 TEXT NOT NULL,
                                    chunks INTEGER NOT NULL);
                 CREATE TABLE chunks(id INTEGER PRIMARY KEY, path TEXT NOT NULL,
                                     seq INTEGER NOT NULL, start_line INTEGER NOT NULL,
                                     end_line INTEGER NOT NULL, text TEXT NOT NULL,
                                     UNIQUE(path, seq));
                 CREATE VIRTUAL TABLE chunk_vectors USING vec0(
                     embedding float[2] distance_metric=cosine);
                 CREATE VIRTUAL TABLE chunk_words USING fts5(text);
                 INSERT INTO meta VALUES ('model', 'some/model'), ('dim', '2'),
                                         ('chunking', '800/200 bytes');
                 INSERT INTO files VALUES ('a.txt', 'abc', 1);
                 INSERT INTO chunks VALUES (1, 'a.txt', 0, 1, 1, 'Some text.');
                 INSERT INTO chunk_words(rowid, text) VALUES (1, 'Some text.');",
            )
            .unwrap();
        }
        let err = match Store::open_existing(&db) {
            Ok(_) => panic!("answered from an index of the earlier format"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("earlier aneforge") && err.contains("aneforge rag index"),
            "{err}"
        );
        let store = Store::open(&db, "some/model", 2).unwrap();
        assert!(
            store.files().unwrap().is_empty(),
            "every file is indexed again"
        );
        let counts = store.counts().unwrap();
        assert_eq!((counts.chunks, counts.units, counts.words), (0, 0, 0));
        store.check_chunking(&ChunkOptions::default()).unwrap();
        drop(store);
        Store::open_existing(&db).unwrap();
    }

    #[test]
    fn searches_return_each_chunk_once_at_its_best_unit() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("i.db"), "some/model", 2).unwrap();
        let text: String = (1..=40)
            .map(|i| format!("line {i} of a speech about the sea\n"))
            .collect();
        let opts = ChunkOptions {
            max_chars: 200,
            overlap_chars: 40,
            unit_chars: 70,
        };
        let chunks = chunk(&text, &opts);
        let units: Vec<_> = chunks.iter().flat_map(|c| &c.units).collect();
        assert!(chunks.len() >= 4 && chunks[0].units.len() >= 2);
        // the units of chunk 0 point nearest to (1, 0), chunk 1's next, the rest away
        let vectors: Vec<Vec<f32>> = chunks
            .iter()
            .flat_map(|c| {
                c.units
                    .iter()
                    .map(move |_| unit_vector(1.0, 0.1 + c.seq as f32))
            })
            .collect();
        assert_eq!(vectors.len(), units.len());
        let rows: Vec<&[f32]> = vectors.iter().map(Vec::as_slice).collect();
        store.replace_file("a.txt", "h", &chunks, &rows).unwrap();
        let hits = store.search(&unit_vector(1.0, 0.0), 3).unwrap();
        let seqs: Vec<usize> = hits.iter().map(|h| h.seq).collect();
        assert_eq!(seqs, [0, 1, 2]);
        assert_eq!(
            hits[0].text, chunks[0].text,
            "the chunk is cited, not the unit"
        );
        // every unit holds "sea": each chunk appears once, however many of its units match
        let hits = store.search_words("What is the sea?", 100).unwrap();
        assert_eq!(hits.len(), chunks.len());
        let mut ids: Vec<i64> = hits.iter().map(|h| h.id).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), chunks.len());
        assert!(hits.windows(2).all(|w| w[0].distance <= w[1].distance));
        assert!(store.search_words("", 3).unwrap().is_empty());
        store.remove_file("a.txt").unwrap();
        assert!(store.search(&unit_vector(1.0, 0.0), 3).unwrap().is_empty());
        assert!(store
            .search_words("What is the sea?", 3)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn the_word_query_leaves_out_stop_words_unless_nothing_else_is_left() {
        assert_eq!(
            Store::words_query("What does King Lear say is sharper than a serpent's tooth?")
                .unwrap(),
            r#""king" OR "lear" OR "say" OR "sharper" OR "than" OR "serpent" OR "s" OR "tooth""#
        );
        assert_eq!(
            Store::words_query("What is it?").unwrap(),
            r#""what" OR "is" OR "it""#
        );
        assert_eq!(Store::words_query(" ?! "), None);
    }
}
