//! The index file: one SQLite database holding the indexed files (path and SHA-256), their chunks
//! (source lines and text) and the chunks' embeddings in a sqlite-vec `vec0` table, whose rowids
//! are the chunks' ids. A file's chunks and vectors are replaced in one transaction, so a process
//! killed at any moment leaves every file either fully indexed at its recorded hash or absent
//! (then indexed again by the next run), never half-written or duplicated. An FTS5 table
//! (`chunk_words`, same rowids) indexes the chunks' words for BM25 keyword search.

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
    #[error("{path}: {what}")]
    Invalid { path: PathBuf, what: String },
}

/// A retrieved chunk with its source.
#[derive(Clone, Debug, PartialEq)]
pub struct Hit {
    pub id: i64,
    pub path: String,
    pub seq: usize,
    pub start_line: usize,
    pub end_line: usize,
    pub text: String,
    /// The search's score, lower is nearer: cosine distance for [`Store::search`], BM25 (as
    /// SQLite's FTS5 gives it, negative) for [`Store::search_words`].
    pub distance: f32,
}

/// A chunk as stored: its source and text.
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
    pub vectors: usize,
    /// Rows of the word index.
    pub words: usize,
}

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
            Some(_) => {}
            None => {
                let tx = conn.unchecked_transaction().map_err(err)?;
                tx.execute_batch(&format!(
                    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
                     CREATE TABLE files(path TEXT PRIMARY KEY, sha256 TEXT NOT NULL,
                                        chunks INTEGER NOT NULL);
                     CREATE TABLE chunks(id INTEGER PRIMARY KEY, path TEXT NOT NULL,
                                         seq INTEGER NOT NULL, start_line INTEGER NOT NULL,
                                         end_line INTEGER NOT NULL, text TEXT NOT NULL,
                                         UNIQUE(path, seq));
                     CREATE VIRTUAL TABLE chunk_vectors USING vec0(
                         embedding float[{dim}] distance_metric=cosine);
                     CREATE VIRTUAL TABLE chunk_words USING fts5(text);"
                ))
                .map_err(err)?;
                tx.execute(
                    "INSERT INTO meta(key, value) VALUES ('model', ?1), ('dim', ?2)",
                    params![model, dim.to_string()],
                )
                .map_err(err)?;
                tx.commit().map_err(err)?;
            }
        }
        Self::ensure_words(&conn).map_err(err)?;
        Ok(Store {
            conn,
            path: path.to_path_buf(),
            model: model.to_string(),
            dim,
        })
    }

    /// Adds the word index to an index built before it existed, from the stored chunks.
    fn ensure_words(conn: &Connection) -> rusqlite::Result<()> {
        let exists: bool = conn.query_row(
            "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE name = 'chunk_words')",
            [],
            |r| r.get(0),
        )?;
        if exists {
            return Ok(());
        }
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(
            "CREATE VIRTUAL TABLE chunk_words USING fts5(text);
             INSERT INTO chunk_words(rowid, text) SELECT id, text FROM chunks;",
        )?;
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
        Self::ensure_words(&conn).map_err(|source| StoreError::Sqlite {
            path: path.to_path_buf(),
            source,
        })?;
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
        let wanted = format!("{}/{} bytes", opts.max_chars, opts.overlap_chars);
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

    /// Replaces everything indexed for `path` by `chunks` (row `i` of `vectors` is chunk `i`'s
    /// embedding), recording `sha256`; all or nothing.
    pub fn replace_file(
        &mut self,
        path: &str,
        sha256: &str,
        chunks: &[Chunk],
        vectors: &[&[f32]],
    ) -> Result<(), StoreError> {
        if chunks.len() != vectors.len() || vectors.iter().any(|v| v.len() != self.dim) {
            return Err(StoreError::Invalid {
                path: self.path.clone(),
                what: format!(
                    "{path}: {} chunks with {} embeddings (each must have {} values)",
                    chunks.len(),
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
            let mut vec_stmt = tx
                .prepare("INSERT INTO chunk_vectors(rowid, embedding) VALUES (?1, ?2)")
                .map_err(err)?;
            let mut word_stmt = tx
                .prepare("INSERT INTO chunk_words(rowid, text) VALUES (?1, ?2)")
                .map_err(err)?;
            for (c, v) in chunks.iter().zip(vectors) {
                chunk_stmt
                    .execute(params![
                        path,
                        c.seq as i64,
                        c.start_line as i64,
                        c.end_line as i64,
                        c.text
                    ])
                    .map_err(err)?;
                let id = tx.last_insert_rowid();
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                vec_stmt.execute(params![id, bytes]).map_err(err)?;
                word_stmt.execute(params![id, c.text]).map_err(err)?;
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
            let mut stmt = tx.prepare("SELECT id FROM chunks WHERE path = ?1")?;
            let rows = stmt.query_map([path], |r| r.get(0))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        for id in ids {
            tx.execute("DELETE FROM chunk_vectors WHERE rowid = ?1", [id])?;
            tx.execute("DELETE FROM chunk_words WHERE rowid = ?1", [id])?;
        }
        tx.execute("DELETE FROM chunks WHERE path = ?1", [path])?;
        tx.execute("DELETE FROM files WHERE path = ?1", [path])?;
        Ok(())
    }

    /// The `k` chunks nearest to `query`, nearest first.
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
        let mut stmt = self
            .conn
            .prepare(
                "SELECT c.id, c.path, c.seq, c.start_line, c.end_line, c.text, v.distance
                 FROM (SELECT rowid, distance FROM chunk_vectors
                       WHERE embedding MATCH ?1 AND k = ?2) AS v
                 JOIN chunks AS c ON c.id = v.rowid
                 ORDER BY v.distance, c.id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![bytes, k as i64], |r| {
                Ok(Hit {
                    id: r.get(0)?,
                    path: r.get(1)?,
                    seq: r.get::<_, i64>(2)? as usize,
                    start_line: r.get::<_, i64>(3)? as usize,
                    end_line: r.get::<_, i64>(4)? as usize,
                    text: r.get(5)?,
                    distance: r.get::<_, f64>(6)? as f32,
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>());
        rows.map_err(|e| self.err(e))
    }

    /// The `k` chunks that best match any word of `text` by BM25, best first.
    pub fn search_words(&self, text: &str, k: usize) -> Result<Vec<Hit>, StoreError> {
        let terms: Vec<String> = text
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(|w| format!("\"{}\"", w.to_lowercase()))
            .collect();
        if terms.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let mut stmt = self
            .conn
            .prepare(
                "SELECT c.id, c.path, c.seq, c.start_line, c.end_line, c.text, bm25(chunk_words)
                 FROM chunk_words JOIN chunks AS c ON c.id = chunk_words.rowid
                 WHERE chunk_words MATCH ?1
                 ORDER BY bm25(chunk_words), c.id LIMIT ?2",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![terms.join(" OR "), k as i64], |r| {
                Ok(Hit {
                    id: r.get(0)?,
                    path: r.get(1)?,
                    seq: r.get::<_, i64>(2)? as usize,
                    start_line: r.get::<_, i64>(3)? as usize,
                    end_line: r.get::<_, i64>(4)? as usize,
                    text: r.get(5)?,
                    distance: r.get::<_, f64>(6)? as f32,
                })
            })
            .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>());
        rows.map_err(|e| self.err(e))
    }

    pub fn counts(&self) -> Result<Counts, StoreError> {
        let count = |sql: &str| -> Result<usize, StoreError> {
            self.conn
                .query_row(sql, [], |r| r.get::<_, i64>(0))
                .map(|n| n as usize)
                .map_err(|e| self.err(e))
        };
        Ok(Counts {
            files: count("SELECT COUNT(*) FROM files")?,
            chunks: count("SELECT COUNT(*) FROM chunks")?,
            vectors: count("SELECT COUNT(*) FROM chunk_vectors")?,
            words: count("SELECT COUNT(*) FROM chunk_words")?,
        })
    }

    /// Every chunk, in path and position order.
    pub fn chunks(&self) -> Result<Vec<StoredChunk>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT path, seq, start_line, end_line, text FROM chunks ORDER BY path, seq")
            .map_err(|e| self.err(e))?;
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
