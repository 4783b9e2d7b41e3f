//! Weights shared by content between plans, prepared (widened, transposed) copies and whole blob
//! files alike: programs that carry the same weights — one per sequence-length bucket of an
//! encoder, say — hold one copy.
//!
//! The registry keeps weak references only, so a weight lives exactly as long as some plan uses
//! it. Lookups compare the whole contents bit for bit; the hash only narrows the search.

use aneforge_mil::BlobFile;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// Content hash and length -> the live weights with that key.
type Registry = HashMap<(u64, usize), Vec<Weak<Vec<f32>>>>;

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// A fast 64-bit hash of the bit patterns of `data` (four independent lanes, then mixed).
fn content_hash(data: &[f32]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut lanes = [K, K ^ 1, K ^ 2, K ^ 3];
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        for (l, pair) in lanes.iter_mut().zip(c.chunks_exact(2)) {
            let w = (pair[0].to_bits() as u64) | ((pair[1].to_bits() as u64) << 32);
            *l = (*l ^ w).wrapping_mul(K).rotate_left(29);
        }
    }
    let mut h = data.len() as u64;
    for x in chunks.remainder() {
        h = (h ^ x.to_bits() as u64).wrapping_mul(K).rotate_left(29);
    }
    for l in lanes {
        h = (h ^ l).wrapping_mul(K).rotate_left(31);
    }
    h ^ (h >> 32)
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The shared copy of `data` if a live plan already holds the same contents, else `data` itself,
/// registered for later plans.
pub(crate) fn share(data: Vec<f32>) -> Arc<Vec<f32>> {
    let key = (content_hash(&data), data.len());
    let mut guard = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    let registry = guard.get_or_insert_with(HashMap::new);
    let slot = registry.entry(key).or_default();
    slot.retain(|w| w.strong_count() > 0);
    if let Some(existing) = slot
        .iter()
        .filter_map(Weak::upgrade)
        .find(|e| same_bits(e, &data))
    {
        return existing;
    }
    let fresh = Arc::new(data);
    slot.push(Arc::downgrade(&fresh));
    if registry.len() > 4096 {
        registry.retain(|_, ws| ws.iter().any(|w| w.strong_count() > 0));
    }
    fresh
}

/// Blob address, byte offset and length of f32 parameters -> their f16 copy.
type Narrowed = HashMap<(usize, usize, usize), Weak<[half::f16]>>;

static NARROWED: Mutex<Option<Narrowed>> = Mutex::new(None);

/// The f16 copy of the f32 parameters at `key` (blob address, offset, count) that a live plan
/// already holds, else `make()`'s, registered for later plans (`None`: not exactly f16). A plan
/// holding the copy also holds the blob, so the address cannot be reused while the copy lives.
pub(crate) fn narrowed_f16(
    key: (usize, usize, usize),
    make: impl FnOnce() -> Option<Vec<half::f16>>,
) -> Option<Arc<[half::f16]>> {
    let mut guard = NARROWED.lock().unwrap_or_else(|e| e.into_inner());
    let registry = guard.get_or_insert_with(HashMap::new);
    if let Some(existing) = registry.get(&key).and_then(Weak::upgrade) {
        return Some(existing);
    }
    let fresh: Arc<[half::f16]> = make()?.into();
    registry.retain(|_, w| w.strong_count() > 0);
    registry.insert(key, Arc::downgrade(&fresh));
    Some(fresh)
}

/// Blob file length -> the live files of that length.
type Files = HashMap<usize, Vec<Weak<dyn AsRef<[u8]> + Send + Sync>>>;

static FILES: Mutex<Option<Files>> = Mutex::new(None);

/// `file` over the bytes of a live blob file with the same contents if there is one, else `file`,
/// registered for later plans. Plans read f32 weights in place from their file, so programs that
/// differ only in shapes (one per bucket of an encoder) would otherwise each keep a copy of the
/// same weights. Only files of equal length are compared, byte for byte.
pub(crate) fn share_file(file: &BlobFile) -> BlobFile {
    let bytes = file.shared_bytes();
    let len = file.bytes().len();
    let mut guard = FILES.lock().unwrap_or_else(|e| e.into_inner());
    let registry = guard.get_or_insert_with(HashMap::new);
    let slot = registry.entry(len).or_default();
    slot.retain(|w| w.strong_count() > 0);
    for live in slot.iter().filter_map(Weak::upgrade) {
        if Arc::ptr_eq(&live, &bytes) {
            return file.clone();
        }
        if (*live).as_ref() == file.bytes() {
            if let Ok(shared) = BlobFile::parse(file.name(), live) {
                return shared;
            }
        }
    }
    slot.push(Arc::downgrade(&bytes));
    // a dead entry's weak reference still holds its Arc's allocation: drop them all
    registry.retain(|_, ws| {
        ws.retain(|w| w.strong_count() > 0);
        !ws.is_empty()
    });
    file.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_contents_share_one_copy_while_alive() {
        let a = share(vec![1.0, 2.0, 3.0, 4.5, -0.0, 7.0, 8.0, 9.0, 10.0]);
        let b = share(vec![1.0, 2.0, 3.0, 4.5, -0.0, 7.0, 8.0, 9.0, 10.0]);
        assert!(Arc::ptr_eq(&a, &b));
        // +0.0 and -0.0 compare equal as floats but are different weights
        let c = share(vec![1.0, 2.0, 3.0, 4.5, 0.0, 7.0, 8.0, 9.0, 10.0]);
        assert!(!Arc::ptr_eq(&a, &c));
        let weak = Arc::downgrade(&a);
        drop((a, b));
        assert!(
            weak.upgrade().is_none(),
            "the registry must not keep weights alive"
        );
    }

    #[test]
    fn hash_sees_every_element() {
        let base: Vec<f32> = (0..37).map(|i| i as f32).collect();
        for i in 0..base.len() {
            let mut changed = base.clone();
            changed[i] += 0.5;
            assert_ne!(content_hash(&base), content_hash(&changed), "element {i}");
        }
    }
}
