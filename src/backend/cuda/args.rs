//! The kernels' parameter structs as Rust sees them: field for field the structs of the same names in the `.cu`
//! files (pointers as `u64` device addresses first, then 32-bit fields, so that neither side has hidden padding).
//! Both sides assert each struct's size; the kernels take one such struct by value (the grouped expert kernels
//! two: their per-pair kernel's and `MoeTilesArgs`).

use cudarc::driver::DeviceRepr;

/// `struct Embed` of embed.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EmbedArgs {
    pub(super) qs: u64,
    pub(super) sc: u64,
    pub(super) tokens: u64,
    pub(super) out: u64,
    pub(super) n_tokens: i32,
    pub(super) width: i32,
    pub(super) vocab: i32,
    pub(super) scale: f32,
}

/// `struct RmsNorm` of rms_norm.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RmsNormArgs {
    pub(super) x: u64,
    pub(super) w: u64,
    pub(super) out: u64,
    pub(super) rows: u64,
    pub(super) n_rows: i32,
    pub(super) width: i32,
    pub(super) eps: f32,
    pub(super) add: i32,
}

/// `struct Projection` of matvec.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProjectionArgs {
    pub(super) qs: [u64; 3],
    pub(super) sc: [u64; 3],
    pub(super) y: [u64; 3],
    pub(super) x: u64,
    pub(super) norm_w: u64,
    pub(super) xn: u64,
    pub(super) rows: [i32; 3],
    pub(super) n_mats: i32,
    pub(super) k: i32,
    pub(super) n_tokens: i32,
    pub(super) add: i32,
    pub(super) eps: f32,
    pub(super) act: i32,
    pub(super) pad: i32,
}

/// `struct Matmul` of matmul.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MatmulArgs {
    pub(super) qs: u64,
    pub(super) sc: u64,
    pub(super) x: u64,
    pub(super) y: u64,
    pub(super) rows: i32,
    pub(super) k: i32,
    pub(super) n_tokens: i32,
    pub(super) add: i32,
}

/// `struct RopeTable` of rope_kv.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RopeTableArgs {
    pub(super) positions: u64,
    pub(super) inv_freq: u64,
    pub(super) cos: u64,
    pub(super) sin: u64,
    pub(super) scale: f64,
    pub(super) n_tokens: i32,
    pub(super) half: i32,
}

/// `struct RopeStore` of rope_kv.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RopeStoreArgs {
    pub(super) q: u64,
    pub(super) k: u64,
    pub(super) v: u64,
    pub(super) cos: u64,
    pub(super) sin: u64,
    pub(super) positions: u64,
    pub(super) slots: u64,
    pub(super) k_cache: u64,
    pub(super) v_cache: u64,
    pub(super) n_tokens: i32,
    pub(super) n_head: i32,
    pub(super) n_head_kv: i32,
    pub(super) head_dim: i32,
    pub(super) rope_dim: i32,
    pub(super) neox: i32,
    pub(super) k_type: i32,
    pub(super) v_type: i32,
}

/// `struct Attention` of attention.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AttentionArgs {
    pub(super) q: u64,
    pub(super) out: u64,
    pub(super) k_cache: u64,
    pub(super) v_cache: u64,
    pub(super) positions: u64,
    pub(super) table_offsets: u64,
    pub(super) block_tables: u64,
    pub(super) sinks: u64,
    pub(super) n_tokens: i32,
    pub(super) n_head: i32,
    pub(super) n_head_kv: i32,
    pub(super) head_dim: i32,
    pub(super) value_dim: i32,
    pub(super) pad: i32,
    pub(super) block_size: i32,
    pub(super) scale: f32,
    pub(super) window: i32,
    pub(super) softcap: f32,
}

/// `struct LatentKeys` of latent.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatentKeysArgs {
    pub(super) kv: u64,
    pub(super) norm_w: u64,
    pub(super) cos: u64,
    pub(super) sin: u64,
    pub(super) positions: u64,
    pub(super) slots: u64,
    pub(super) k_cache: u64,
    pub(super) n_tokens: i32,
    pub(super) rank: i32,
    pub(super) rope_dim: i32,
    pub(super) eps: f32,
    pub(super) k_type: i32,
    pub(super) pad: i32,
}

/// `struct HeadsCopy` of latent.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct HeadsCopyArgs {
    pub(super) src: u64,
    pub(super) dst: u64,
    pub(super) n_head: i32,
    pub(super) n_tokens: i32,
    pub(super) width: i32,
    pub(super) src_head: i32,
    pub(super) src_token: i32,
    pub(super) dst_head: i32,
    pub(super) dst_token: i32,
    pub(super) pad: i32,
}

/// `struct LatentQueries` of latent.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LatentQueriesArgs {
    pub(super) absorbed: u64,
    pub(super) q: u64,
    pub(super) cos: u64,
    pub(super) sin: u64,
    pub(super) out: u64,
    pub(super) n_tokens: i32,
    pub(super) n_head: i32,
    pub(super) rank: i32,
    pub(super) nope: i32,
    pub(super) rope_dim: i32,
    pub(super) pad: i32,
}

/// `struct Gated` of elementwise.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GatedArgs {
    pub(super) gate: u64,
    pub(super) up: u64,
    pub(super) n: i32,
    pub(super) act: i32,
}

/// `struct AddBias` of elementwise.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AddBiasArgs {
    pub(super) x: u64,
    pub(super) bias: u64,
    pub(super) n: i32,
    pub(super) width: i32,
}

/// `struct AddScaled` of elementwise.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct AddScaledArgs {
    pub(super) dst: u64,
    pub(super) src: u64,
    pub(super) n: i32,
    pub(super) factor: f32,
}

/// `struct FinishLogits` of elementwise.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FinishLogitsArgs {
    pub(super) x: u64,
    pub(super) n: i32,
    pub(super) factor: f32,
    pub(super) cap: f32,
    pub(super) pad: i32,
}

/// `struct TopK` of top_k.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TopKArgs {
    pub(super) logits: u64,
    pub(super) ids: u64,
    pub(super) values: u64,
    pub(super) n_rows: i32,
    pub(super) vocab: i32,
    pub(super) k: i32,
    pub(super) pad: i32,
}

/// `struct Route` of moe.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RouteArgs {
    pub(super) logits: u64,
    pub(super) bias: u64,
    pub(super) selected: u64,
    pub(super) weights: u64,
    pub(super) n_tokens: i32,
    pub(super) n_expert: i32,
    pub(super) k: i32,
    pub(super) gating: i32,
    pub(super) normalize: i32,
    pub(super) scale: f32,
    pub(super) selection_bias: u64,
    pub(super) n_group: i32,
    pub(super) group_used: i32,
}

/// `struct MoeGateUp` of moe.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MoeGateUpArgs {
    pub(super) gate_qs: u64,
    pub(super) gate_sc: u64,
    pub(super) up_qs: u64,
    pub(super) up_sc: u64,
    pub(super) x: u64,
    pub(super) selected: u64,
    pub(super) hidden: u64,
    pub(super) gate_bias: u64,
    pub(super) up_bias: u64,
    pub(super) rows: i32,
    pub(super) cols: i32,
    pub(super) expert_stride: i32,
    pub(super) up_offset: i32,
    pub(super) n_tokens: i32,
    pub(super) k: i32,
    pub(super) n_expert: i32,
    pub(super) act: i32,
    pub(super) alpha: f32,
    pub(super) limit: f32,
}

/// `struct MoeDown` of moe.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MoeDownArgs {
    pub(super) qs: u64,
    pub(super) sc: u64,
    pub(super) hidden: u64,
    pub(super) selected: u64,
    pub(super) weights: u64,
    pub(super) out: u64,
    pub(super) bias: u64,
    pub(super) rows: i32,
    pub(super) cols: i32,
    pub(super) n_tokens: i32,
    pub(super) k: i32,
    pub(super) n_expert: i32,
    pub(super) pad: i32,
}

/// `struct MoeSharedAdd` of moe.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MoeSharedAddArgs {
    pub(super) out: u64,
    pub(super) y: u64,
    pub(super) gate: u64,
    pub(super) n_tokens: i32,
    pub(super) width: i32,
}

/// `struct MoeGroup` of moe.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MoeGroupArgs {
    pub(super) selected: u64,
    pub(super) order: u64,
    pub(super) tiles: u64,
    pub(super) n_tiles: u64,
    pub(super) n_pairs: i32,
    pub(super) n_expert: i32,
    pub(super) tile: i32,
    pub(super) max_tiles: i32,
}

/// `struct MoeTiles` of moe.cu: the second parameter of the grouped expert kernels.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MoeTilesArgs {
    pub(super) order: u64,
    pub(super) tiles: u64,
    pub(super) n_tiles: u64,
    pub(super) pair_out: u64,
}

// The sizes the .cu files' static_asserts hold their structs to.
const _: () = assert!(std::mem::size_of::<EmbedArgs>() == 48);
const _: () = assert!(std::mem::size_of::<RmsNormArgs>() == 48);
const _: () = assert!(std::mem::size_of::<ProjectionArgs>() == 136);
const _: () = assert!(std::mem::size_of::<MatmulArgs>() == 48);
const _: () = assert!(std::mem::size_of::<RopeTableArgs>() == 48);
const _: () = assert!(std::mem::size_of::<RopeStoreArgs>() == 104);
const _: () = assert!(std::mem::size_of::<AttentionArgs>() == 104);
const _: () = assert!(std::mem::size_of::<LatentKeysArgs>() == 80);
const _: () = assert!(std::mem::size_of::<HeadsCopyArgs>() == 48);
const _: () = assert!(std::mem::size_of::<LatentQueriesArgs>() == 64);
const _: () = assert!(std::mem::size_of::<GatedArgs>() == 24);
const _: () = assert!(std::mem::size_of::<AddBiasArgs>() == 24);
const _: () = assert!(std::mem::size_of::<AddScaledArgs>() == 24);
const _: () = assert!(std::mem::size_of::<FinishLogitsArgs>() == 24);
const _: () = assert!(std::mem::size_of::<TopKArgs>() == 40);
const _: () = assert!(std::mem::size_of::<RouteArgs>() == 72);
const _: () = assert!(std::mem::size_of::<MoeGateUpArgs>() == 112);
const _: () = assert!(std::mem::size_of::<MoeDownArgs>() == 80);
const _: () = assert!(std::mem::size_of::<MoeSharedAddArgs>() == 32);
const _: () = assert!(std::mem::size_of::<MoeGroupArgs>() == 48);
const _: () = assert!(std::mem::size_of::<MoeTilesArgs>() == 32);

// SAFETY (all twenty-one): plain `#[repr(C)]` structs of integers and floats with no padding (the sizes above are the
// sums of their fields), valid for any bit pattern, laid out as the kernels' parameter structs.
unsafe impl DeviceRepr for EmbedArgs {}
unsafe impl DeviceRepr for RmsNormArgs {}
unsafe impl DeviceRepr for ProjectionArgs {}
unsafe impl DeviceRepr for MatmulArgs {}
unsafe impl DeviceRepr for RopeTableArgs {}
unsafe impl DeviceRepr for RopeStoreArgs {}
unsafe impl DeviceRepr for AttentionArgs {}
unsafe impl DeviceRepr for LatentKeysArgs {}
unsafe impl DeviceRepr for HeadsCopyArgs {}
unsafe impl DeviceRepr for LatentQueriesArgs {}
unsafe impl DeviceRepr for GatedArgs {}
unsafe impl DeviceRepr for AddBiasArgs {}
unsafe impl DeviceRepr for AddScaledArgs {}
unsafe impl DeviceRepr for FinishLogitsArgs {}
unsafe impl DeviceRepr for TopKArgs {}
unsafe impl DeviceRepr for RouteArgs {}
unsafe impl DeviceRepr for MoeGateUpArgs {}
unsafe impl DeviceRepr for MoeDownArgs {}
unsafe impl DeviceRepr for MoeSharedAddArgs {}
unsafe impl DeviceRepr for MoeGroupArgs {}
unsafe impl DeviceRepr for MoeTilesArgs {}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;
    use crate::backend::cuda::module::{program_source, KERNEL_FILES};

    /// Field offsets of `struct name` as declared in the kernels' source, by C's rules for its field types:
    /// pointers and `double` 8 bytes, `int` and `float` 4, arrays of them, each field aligned to its element size.
    fn c_layout(source: &str, name: &str) -> (Vec<(String, usize)>, usize) {
        let start = source.find(&format!("struct {name} {{")).unwrap_or_else(|| panic!("no struct {name}"));
        let body = &source[start..][..source[start..].find("};").expect("closed")];
        let (mut fields, mut offset) = (Vec::new(), 0usize);
        for line in body.lines().skip(1) {
            let decl = line.split("//").next().unwrap_or("").trim().trim_end_matches(';');
            if decl.is_empty() {
                continue;
            }
            let element = if decl.contains('*') || decl.starts_with("double ") { 8 } else { 4 };
            let declarator = decl.rsplit([' ', '*']).next().expect("a name");
            let (field, count) = match declarator.split_once('[') {
                Some((f, n)) => (f, n.trim_end_matches(']').parse::<usize>().expect("array length")),
                None => (declarator, 1),
            };
            offset = offset.next_multiple_of(element);
            fields.push((field.trim_end_matches('_').to_owned(), offset));
            offset += element * count;
        }
        (fields, offset.next_multiple_of(8))
    }

    /// Holds a Rust mirror to its C struct: the same fields, in the same order, at the same offsets.
    macro_rules! mirrors {
        ($rust:ty, $c:literal, [$($field:ident),+]) => {{
            let source = program_source(&KERNEL_FILES);
            let (c_fields, c_size) = c_layout(&source, $c);
            let rust_fields = [$((stringify!($field), offset_of!($rust, $field))),+];
            let names: Vec<&str> = c_fields.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, rust_fields.map(|f| f.0), "{} fields", $c);
            for ((name, c_offset), (_, rust_offset)) in c_fields.iter().zip(rust_fields) {
                assert_eq!(*c_offset, rust_offset, "{}.{name}", $c);
            }
            assert_eq!(c_size, size_of::<$rust>(), "{} size", $c);
        }};
    }

    #[test]
    fn every_argument_struct_mirrors_its_kernel_struct() {
        mirrors!(EmbedArgs, "Embed", [qs, sc, tokens, out, n_tokens, width, vocab, scale]);
        mirrors!(RmsNormArgs, "RmsNorm", [x, w, out, rows, n_rows, width, eps, add]);
        mirrors!(
            ProjectionArgs,
            "Projection",
            [qs, sc, y, x, norm_w, xn, rows, n_mats, k, n_tokens, add, eps, act, pad]
        );
        mirrors!(MatmulArgs, "Matmul", [qs, sc, x, y, rows, k, n_tokens, add]);
        mirrors!(RopeTableArgs, "RopeTable", [positions, inv_freq, cos, sin, scale, n_tokens, half]);
        mirrors!(
            RopeStoreArgs,
            "RopeStore",
            [
                q, k, v, cos, sin, positions, slots, k_cache, v_cache, n_tokens, n_head, n_head_kv, head_dim, rope_dim,
                neox, k_type, v_type
            ]
        );
        mirrors!(
            AttentionArgs,
            "Attention",
            [
                q,
                out,
                k_cache,
                v_cache,
                positions,
                table_offsets,
                block_tables,
                sinks,
                n_tokens,
                n_head,
                n_head_kv,
                head_dim,
                value_dim,
                pad,
                block_size,
                scale,
                window,
                softcap
            ]
        );
        mirrors!(
            LatentKeysArgs,
            "LatentKeys",
            [kv, norm_w, cos, sin, positions, slots, k_cache, n_tokens, rank, rope_dim, eps, k_type, pad]
        );
        mirrors!(
            HeadsCopyArgs,
            "HeadsCopy",
            [src, dst, n_head, n_tokens, width, src_head, src_token, dst_head, dst_token, pad]
        );
        mirrors!(
            LatentQueriesArgs,
            "LatentQueries",
            [absorbed, q, cos, sin, out, n_tokens, n_head, rank, nope, rope_dim, pad]
        );
        mirrors!(GatedArgs, "Gated", [gate, up, n, act]);
        mirrors!(AddBiasArgs, "AddBias", [x, bias, n, width]);
        mirrors!(AddScaledArgs, "AddScaled", [dst, src, n, factor]);
        mirrors!(FinishLogitsArgs, "FinishLogits", [x, n, factor, cap, pad]);
        mirrors!(TopKArgs, "TopK", [logits, ids, values, n_rows, vocab, k, pad]);
        mirrors!(
            RouteArgs,
            "Route",
            [
                logits,
                bias,
                selected,
                weights,
                n_tokens,
                n_expert,
                k,
                gating,
                normalize,
                scale,
                selection_bias,
                n_group,
                group_used
            ]
        );
        mirrors!(
            MoeGateUpArgs,
            "MoeGateUp",
            [
                gate_qs,
                gate_sc,
                up_qs,
                up_sc,
                x,
                selected,
                hidden,
                gate_bias,
                up_bias,
                rows,
                cols,
                expert_stride,
                up_offset,
                n_tokens,
                k,
                n_expert,
                act,
                alpha,
                limit
            ]
        );
        mirrors!(
            MoeDownArgs,
            "MoeDown",
            [qs, sc, hidden, selected, weights, out, bias, rows, cols, n_tokens, k, n_expert, pad]
        );
        mirrors!(MoeSharedAddArgs, "MoeSharedAdd", [out, y, gate, n_tokens, width]);
        mirrors!(MoeGroupArgs, "MoeGroup", [selected, order, tiles, n_tiles, n_pairs, n_expert, tile, max_tiles]);
        mirrors!(MoeTilesArgs, "MoeTiles", [order, tiles, n_tiles, pair_out]);
    }
}
