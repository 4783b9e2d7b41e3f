//! Port buffer layouts: dense, or rows padded by the runtime. Host data converts to and from the
//! dense form through the codec.

use super::ane::AneError;
use super::ane_ffi::ReportedLayout;

/// Buffer objects are allocated in whole 64-byte lines.
pub(crate) const BUFFER_ALIGN: usize = 64;

/// Where each element of a port lives in its buffer: per-axis byte strides over the port's shape.
/// The innermost axis is always contiguous; outer axes may be padded (e.g. rows rounded up to 64
/// bytes by the runtime).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PortLayout {
    pub shape: Vec<usize>,
    pub elem: usize,
    pub strides: Vec<usize>,
    /// Bytes from the first element to one past the last.
    pub extent: usize,
}

fn dense_strides(shape: &[usize], elem: usize) -> Vec<usize> {
    let mut strides = vec![elem; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

fn extent(shape: &[usize], strides: &[usize], elem: usize) -> usize {
    if shape.contains(&0) {
        return 0;
    }
    shape
        .iter()
        .zip(strides)
        .map(|(&d, &s)| (d - 1) * s)
        .sum::<usize>()
        + elem
}

impl PortLayout {
    pub(crate) fn dense(shape: &[usize], elem: usize) -> PortLayout {
        let strides = dense_strides(shape, elem);
        PortLayout {
            extent: extent(shape, &strides, elem),
            shape: shape.to_vec(),
            elem,
            strides,
        }
    }

    pub(crate) fn is_dense(&self) -> bool {
        self.extent == self.dense_bytes()
            && self
                .shape
                .iter()
                .zip(
                    self.strides
                        .iter()
                        .zip(dense_strides(&self.shape, self.elem)),
                )
                .all(|(&d, (&s, ds))| d <= 1 || s == ds)
    }

    pub(crate) fn dense_bytes(&self) -> usize {
        self.shape.iter().product::<usize>() * self.elem
    }

    /// Bytes of the buffer object backing this layout: the extent rounded up to whole lines.
    pub(crate) fn buffer_bytes(&self) -> usize {
        self.extent.max(1).div_ceil(BUFFER_ALIGN) * BUFFER_ALIGN
    }

    /// The layout the runtime reports for a port, checked against the program's shape.
    ///
    /// Leading axes of size 1 are ignored on both sides (the runtime may report a higher rank).
    /// Strides are taken in elements when the innermost stride is 1 and in bytes when it equals
    /// the element size; both spellings occur in public descriptions of the API.
    pub(crate) fn from_reported(
        port: &str,
        shape: &[usize],
        elem: usize,
        reported: &ReportedLayout,
    ) -> Result<PortLayout, AneError> {
        let bad = |message: String| AneError::BadLayout {
            port: port.to_string(),
            message,
        };
        if reported.shape.len() != reported.strides.len() {
            return Err(bad(format!(
                "the runtime reports shape {:?} with strides {:?} (different ranks)",
                reported.shape, reported.strides
            )));
        }
        let skip_mil = shape.iter().take_while(|&&d| d == 1).count();
        let skip_rep = reported.shape.iter().take_while(|&&d| d == 1).count();
        let mil_core = &shape[skip_mil..];
        let rep_core: Vec<u64> = reported.shape[skip_rep..].to_vec();
        let rep_strides: Vec<u64> = reported.strides[skip_rep..].to_vec();
        let same_shape = mil_core.len() == rep_core.len()
            && mil_core.iter().zip(&rep_core).all(|(&a, &b)| a as u64 == b);
        if !same_shape {
            return Err(bad(format!(
                "the runtime reports shape {:?}, the program declares {:?}",
                reported.shape, shape
            )));
        }
        let Some(&innermost) = rep_strides.last() else {
            return Ok(PortLayout::dense(shape, elem));
        };
        let unit = if innermost == 1 {
            elem
        } else if innermost == elem as u64 {
            1
        } else {
            return Err(bad(format!(
                "innermost stride {innermost} is neither 1 element nor {elem} bytes (strides {:?})",
                reported.strides
            )));
        };
        let core_strides: Vec<usize> = rep_strides
            .iter()
            .map(|&s| usize::try_from(s).ok().and_then(|s| s.checked_mul(unit)))
            .collect::<Option<_>>()
            .ok_or_else(|| bad(format!("strides {:?} overflow", reported.strides)))?;
        for i in 0..core_strides.len().saturating_sub(1) {
            let inner = core_strides[i + 1].checked_mul(mil_core[i + 1]);
            if inner.is_none_or(|inner| core_strides[i] < inner) {
                return Err(bad(format!(
                    "strides {:?} overlap for shape {:?}",
                    reported.strides, reported.shape
                )));
            }
        }
        // leading axes of size 1 get the stride a row-major layout would give them
        let outer = core_strides[0].saturating_mul(mil_core[0]);
        let mut strides = vec![outer; skip_mil];
        strides.extend(core_strides);
        Ok(PortLayout {
            extent: extent(shape, &strides, elem),
            shape: shape.to_vec(),
            elem,
            strides,
        })
    }

    /// Byte offsets of each contiguous innermost row, in row-major order.
    fn rows(&self) -> impl Iterator<Item = usize> + '_ {
        let rank = self.shape.len();
        let outer = &self.shape[..rank.saturating_sub(1)];
        let count: usize = outer.iter().product();
        (0..count).map(move |mut r| {
            let mut offset = 0;
            for (i, &d) in outer.iter().enumerate().rev() {
                offset += (r % d) * self.strides[i];
                r /= d;
            }
            offset
        })
    }

    fn row_bytes(&self) -> usize {
        self.shape.last().copied().unwrap_or(1) * self.elem
    }

    /// Copies densely packed `src` into `dst`, laid out by `self`.
    pub(crate) fn scatter(&self, src: &[u8], dst: &mut [u8]) {
        let row = self.row_bytes();
        for (r, offset) in self.rows().enumerate() {
            dst[offset..offset + row].copy_from_slice(&src[r * row..(r + 1) * row]);
        }
    }

    /// Copies `src`, laid out by `self`, into densely packed `dst`.
    pub(crate) fn gather(&self, src: &[u8], dst: &mut [u8]) {
        let row = self.row_bytes();
        for (r, offset) in self.rows().enumerate() {
            dst[r * row..(r + 1) * row].copy_from_slice(&src[offset..offset + row]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reported(shape: &[u64], strides: &[u64]) -> ReportedLayout {
        ReportedLayout {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
        }
    }

    #[test]
    fn dense_reports_in_elements_and_bytes_agree() {
        let by_elements =
            PortLayout::from_reported("x", &[2, 3, 5], 2, &reported(&[2, 3, 5], &[15, 5, 1]))
                .unwrap();
        let by_bytes =
            PortLayout::from_reported("x", &[2, 3, 5], 2, &reported(&[2, 3, 5], &[30, 10, 2]))
                .unwrap();
        assert_eq!(by_elements, PortLayout::dense(&[2, 3, 5], 2));
        assert_eq!(by_bytes, by_elements);
        assert!(by_bytes.is_dense());
    }

    #[test]
    fn padded_rows_scatter_and_gather_round_trip() {
        // rows of 5 fp16 (10 bytes) padded to 64 bytes, as a 64-byte row alignment would give
        let layout =
            PortLayout::from_reported("x", &[1, 3, 5], 2, &reported(&[3, 5], &[32, 1])).unwrap();
        assert!(!layout.is_dense());
        assert_eq!(layout.strides[1..], [64, 2]);
        assert_eq!(layout.extent, 2 * 64 + 10);
        let dense: Vec<u8> = (0..30).collect();
        let mut buffer = vec![0xAA; layout.buffer_bytes()];
        layout.scatter(&dense, &mut buffer);
        for r in 0..3 {
            assert_eq!(&buffer[r * 64..r * 64 + 10], &dense[r * 10..(r + 1) * 10]);
            assert!(buffer[r * 64 + 10..(r * 64 + 64).min(buffer.len())]
                .iter()
                .all(|&b| b == 0xAA));
        }
        let mut back = vec![0; 30];
        layout.gather(&buffer, &mut back);
        assert_eq!(back, dense);
    }

    #[test]
    fn mismatched_or_overlapping_reports_are_errors() {
        let wrong_shape =
            PortLayout::from_reported("x", &[2, 4], 2, &reported(&[2, 5], &[5, 1])).unwrap_err();
        assert!(wrong_shape.to_string().contains("`x`"), "{wrong_shape}");
        let overlap =
            PortLayout::from_reported("x", &[2, 4], 2, &reported(&[2, 4], &[3, 1])).unwrap_err();
        assert!(overlap.to_string().contains("overlap"), "{overlap}");
        let odd_unit =
            PortLayout::from_reported("x", &[2, 4], 4, &reported(&[2, 4], &[12, 3])).unwrap_err();
        assert!(odd_unit.to_string().contains("innermost"), "{odd_unit}");
    }
}
