//! scaled_dot_product_attention (iOS18).

use crate::compile::OpCx;
use crate::error::Result;
use crate::kernels::attention::{Attention, View};
use crate::kernels::ew::broadcast_shapes;
use crate::kernels::ew::broadcast_strides;
use crate::kernels::Kernel;
use aneforge_mil::DType;

pub(crate) fn sdpa(cx: &mut OpCx) -> Result<()> {
    let q = cx.input("query")?;
    let k = cx.input("key")?;
    let v = cx.input("value")?;
    let mask = cx.opt_input("attn_mask")?;
    let d = cx.dtype(q);
    if !matches!(d, DType::Fp16 | DType::Fp32) || cx.dtype(k) != d || cx.dtype(v) != d {
        return Err(cx.err("query, key and value must share one dtype, fp16 or fp32"));
    }
    let (qs, ks, vs) = (cx.shape(q), cx.shape(k), cx.shape(v));
    let r = qs.len();
    if r < 3 || ks.len() != r || vs.len() != r {
        return Err(cx.err(format!(
            "query {qs:?}, key {ks:?}, value {vs:?} must share a rank ≥ 3"
        )));
    }
    let batch = qs[..r - 2].to_vec();
    if ks[..r - 2] != batch[..]
        || vs[..r - 2] != batch[..]
        || qs[r - 1] != ks[r - 1]
        || ks[r - 2] != vs[r - 2]
    {
        return Err(cx.err(format!(
            "incompatible query {qs:?}, key {ks:?}, value {vs:?}"
        )));
    }
    let (l, e, s, ev) = (qs[r - 2], qs[r - 1], ks[r - 2], vs[r - 1]);
    let mut os = qs[..r - 1].to_vec();
    os.push(ev);
    let out = cx.output(0, d, os)?;
    let view = |cx: &OpCx, x, shape: &[usize]| -> Result<View> {
        let (rr, cc) = (shape[shape.len() - 2], shape[shape.len() - 1]);
        Ok(View {
            v: x,
            elem: cx.elem(x)?,
            batch_strides: broadcast_strides(&shape[..shape.len() - 2], &batch)
                .iter()
                .map(|st| st * rr * cc)
                .collect(),
            rs: cc,
            cs: 1,
        })
    };
    let mview = match mask {
        Some(m) => {
            let ms = cx.shape(m);
            let md = cx.dtype(m);
            if !matches!(md, DType::Bool | DType::Fp16 | DType::Fp32) {
                return Err(cx.err(format!("attn_mask must be bool, fp16 or fp32, found {md}")));
            }
            let mut full = batch.clone();
            full.push(l);
            full.push(s);
            if broadcast_shapes(&ms, &full).as_deref() != Some(&full[..]) {
                return Err(cx.err(format!("attn_mask {ms:?} does not broadcast to {full:?}")));
            }
            let st = broadcast_strides(&ms, &full);
            Some(View {
                v: m,
                elem: cx.elem(m)?,
                batch_strides: st[..r - 2].to_vec(),
                rs: st[r - 2],
                cs: st[r - 1],
            })
        }
        None => None,
    };
    let kernel = Attention {
        q: view(cx, q, &qs)?,
        k: view(cx, k, &ks)?,
        v: view(cx, v, &vs)?,
        k_scales: None,
        v_scales: None,
        mask: mview,
        mask_rows: l,
        batch,
        l,
        s,
        e,
        ev,
        scale: 1.0 / (e as f32).sqrt(),
        out,
        out_elem: cx.elem(out)?,
        bf16: cx
            .b
            .bf16_products(cx.dtype(out) == aneforge_mil::DType::Fp32, l),
    };
    let mut reads = vec![q, k, v];
    reads.extend(mask);
    cx.emit(Kernel::Attention(kernel), reads, vec![out]);
    Ok(())
}
