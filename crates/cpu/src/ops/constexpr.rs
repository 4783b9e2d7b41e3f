//! constexpr_* ops: decompressed once at compile time into plain constants.

use crate::compile::OpCx;
use crate::error::Result;

pub(crate) fn build(cx: &mut OpCx, t: &str) -> Result<()> {
    Err(cx.err(format!("{t} is not implemented yet")))
}
