//! What the CPU emulation of the CUDA backend's KV cache kernels is checked against (`scripts/gpu-check.sh emulate`,
//! the `kv_layers` check of kv_checks.h): the CPU backend's own stores and attention, on the same operands.
//!
//! For each pair of cache types (f16 / f16, q8_0 / q8_0, q4_0 / q4_0, q8_0 / q4_0), layer 0 of a small llama (6 query
//! heads of 64 over 2 KV heads) on the CPU backend's fast path, the only one with q8_0 and q4_0 caches: two steps
//! of two sequences in cache blocks that are not the positions (prompts of 130 and 20 tokens, 130 crossing the
//! emulated kernel's chunk of 128 positions; then a decode step of each). Each step runs `embed`, the attention
//! norm and the q/k/v projections, then `attention(0)`, and records the projections' rows (the attention's
//! operands: the CUDA kernels take the same floats, so that 8-bit activations on the CPU and f32 on the GPU do not
//! part them), the attention's output, and the layer's key and value planes as bytes. The emulation runs
//! `rope_table`, `rope_store` and the attention kernel of the pair on those operands, as `execute.rs` enqueues
//! them, and requires the planes byte for byte (the stores quantize as `kv_quant.rs` does, and RoPE turns as the
//! CPU's) and the output within its bound of the CPU's.
//!
//! Then rows made to reach the quantizations' corners (`kv_store`): exact ties of q8_0's rounding, q4_0's largest
//! code clamped, all-zero blocks, a block's largest magnitude with both signs, scales too small for f16 and large
//! values), stored in a `CpuKvCache` of each type (the backend's own store) at permuted slots: the emulation stores
//! the same rows with `rope_store` turning them by angle 0 and requires the same bytes.
//!
//! With `EMBER_KV_FIXTURES=FILE` the test writes them there. File format, little-endian u32 words (floats as their
//! bits, f64 as two words, low first): the count of cases, each its name (length, then bytes padded to words),
//! `keys values` (0 f16, 1 q8_0, 2 q4_0), `n_head n_head_kv head_dim rope_dim neox attention_scale block_size
//! num_blocks`, the rotation's magnitude (f64) and `rope_dim / 2` inverse frequencies (f64), the count of steps; each
//! step `n_tokens`, the tokens' positions, cache slots and block-table offsets, the count of table entries and the
//! tables, then `[n_tokens][q_dim]` queries, `[n_tokens][kv_dim]` keys and values (before RoPE), the CPU's
//! `[n_tokens][q_dim]` output, and the key plane and the value plane after the step (each its length in bytes, then
//! the bytes padded to words). Then `n_rows width`, the rows, and for each type (f16, q8_0, q4_0) the plane holding
//! row `i` at slot `(5 i + 3) mod n_rows` (its length in bytes, then the bytes padded to words).

use ember::backend::cpu::kv_cache::{CpuKvCache, KvPlane, KvPool};
use ember::backend::cpu::{CpuBackend, CpuBackendOptions, Precision};
use ember::backend::{KvCacheType, KvCacheTypes};
use ember::model::gguf::GgufFile;
use ember::model::llama::forward::{Buf, Norm, Weight};
use ember::model::llama::{LlamaBackend, LlamaConfig, SeqChunk, SyntheticSpec};
use ember::model::TokenId;

const BLOCK: usize = 16;
const BLOCKS: usize = 16;

struct Words(Vec<u32>);

impl Words {
    fn put(&mut self, v: usize) {
        self.0.push(u32::try_from(v).unwrap());
    }
    fn float(&mut self, v: f32) {
        self.0.push(v.to_bits());
    }
    fn floats(&mut self, v: &[f32]) {
        self.0.extend(v.iter().map(|x| x.to_bits()));
    }
    fn double(&mut self, v: f64) {
        let bits = v.to_bits();
        self.0.extend([bits as u32, (bits >> 32) as u32]);
    }
    fn bytes(&mut self, b: &[u8]) {
        self.put(b.len());
        let mut padded = b.to_vec();
        padded.resize(b.len().next_multiple_of(4), 0);
        self.0.extend(padded.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())));
    }
}

/// `KV_*` of kv_cache.cuh.
fn code(t: KvCacheType) -> usize {
    match t {
        KvCacheType::F16 => 0,
        KvCacheType::Q8_0 => 1,
        KvCacheType::Q4_0 => 2,
    }
}

/// A plane's bytes, as the CPU backend stores them.
fn plane_bytes(plane: KvPlane<'_>) -> &[u8] {
    match plane {
        KvPlane::F16(x) => bytemuck::cast_slice(x),
        KvPlane::Q8_0(blocks) => bytemuck::cast_slice(blocks),
        KvPlane::Q4_0(blocks) => bytemuck::cast_slice(blocks),
        KvPlane::F32(_) => unreachable!("the fast path's planes are f16 or blocks"),
    }
}

/// A CPU plane's bytes in the CUDA cache's order, `[slot][head]`: the CPU's blocks hold each head's slots together
/// (`[block][head][slot]`, `CpuKvCache::head_rows`), the CUDA cache keeps a position's heads together.
fn slot_major(plane: &[u8], heads: usize) -> Vec<u8> {
    let head_bytes = plane.len() / (BLOCKS * BLOCK * heads);
    let mut out = vec![0; plane.len()];
    for (i, head_row) in plane.chunks_exact(head_bytes).enumerate() {
        let (block, head, slot) = (i / (heads * BLOCK), i / BLOCK % heads, i % BLOCK);
        out[((block * BLOCK + slot) * heads + head) * head_bytes..][..head_bytes].copy_from_slice(head_row);
    }
    out
}

/// Each sequence's block table: blocks out of order, so that positions do not map to slots in order.
const TABLES: [&[u32]; 2] = [&[9, 3, 12, 0, 7, 14, 2, 11, 5], &[4, 13]];

/// Two steps of the two sequences, each `(start, tokens)` per sequence: the prompts, then a decode step each.
const STEPS: [[(usize, usize); 2]; 2] = [[(0, 130), (0, 20)], [(130, 1), (20, 1)]];

fn case(out: &mut Words, kv_cache: KvCacheTypes) {
    let spec = SyntheticSpec { n_embd: 128, n_head: 6, n_head_kv: 2, head_dim: Some(64), ..SyntheticSpec::tiny(5) };
    let bytes = spec.writer().to_bytes();
    let file = GgufFile::from_bytes(&bytes).unwrap();
    let config = LlamaConfig::from_gguf(&file).unwrap();
    assert!(config.qk_norm.is_none() && !config.qkv_bias && config.attn_softcap.is_none(), "the emulated layer");
    let options = CpuBackendOptions {
        threads: 2,
        max_batch_tokens: 256,
        kv_block_size: BLOCK,
        kv_num_blocks: BLOCKS,
        kv_window_blocks: None,
        precision: Precision::Quantized8,
        kv_cache,
    };
    let mut cpu = CpuBackend::new(&file, config.clone(), options).unwrap();

    let (keys, values) = (kv_cache.keys, kv_cache.values);
    out.bytes(format!("{keys} / {values}").as_bytes());
    for v in [code(keys), code(values), config.n_head, config.n_head_kv, config.head_dim, config.rope_dim] {
        out.put(v);
    }
    out.put(usize::from(config.rope_neox));
    out.float(config.attention_scale);
    out.put(BLOCK);
    out.put(BLOCKS);
    let base = config.layers[0].rope;
    out.double(config.rope_magnitude(base));
    for f in config.inv_frequencies(base) {
        out.double(f);
    }
    out.put(STEPS.len());
    for step in STEPS {
        let tokens: Vec<Vec<TokenId>> = step
            .iter()
            .enumerate()
            .map(|(s, &(start, n))| (start..start + n).map(|j| ((s * 131 + j * 37 + 11) % 512) as TokenId).collect())
            .collect();
        let batch: Vec<SeqChunk<'_>> = step
            .iter()
            .enumerate()
            .map(|(s, &(start, _))| SeqChunk {
                tokens: &tokens[s],
                start_pos: start,
                block_table: TABLES[s],
                window_table: &[],
                logit_rows: 1,
            })
            .collect();
        cpu.begin(&batch).unwrap();
        cpu.embed(Buf::X);
        cpu.rms_norm(Buf::X, Norm::Attn(0), Buf::Xn);
        cpu.matmul(Buf::Xn, &[(Weight::AttnQ(0), Buf::Q), (Weight::AttnK(0), Buf::K), (Weight::AttnV(0), Buf::V)]);
        let operands = [Buf::Q, Buf::K, Buf::V].map(|b| cpu.buffer(b).to_vec());
        cpu.attention(0);

        let n_tokens: usize = step.iter().map(|s| s.1).sum();
        out.put(n_tokens);
        let rows = || step.iter().enumerate().flat_map(|(s, &(start, n))| (start..start + n).map(move |p| (s, p)));
        out.0.extend(rows().map(|(_, p)| p as u32));
        out.0.extend(rows().map(|(s, p)| TABLES[s][p / BLOCK] * BLOCK as u32 + (p % BLOCK) as u32));
        let offsets = [0, TABLES[0].len()];
        out.0.extend(rows().map(|(s, _)| offsets[s] as u32));
        out.put(TABLES[0].len() + TABLES[1].len());
        out.0.extend(TABLES.iter().flat_map(|t| t.iter().copied()));
        for rows in &operands {
            out.floats(rows);
        }
        out.floats(cpu.buffer(Buf::Att));
        let layer = cpu.kv_cache().layer(0);
        let heads = config.n_head_kv;
        out.bytes(&slot_major(plane_bytes(layer.keys), heads));
        out.bytes(&slot_major(plane_bytes(layer.values), heads));
    }
}

/// Rows of `width` (a multiple of 32) whose blocks take, in turn, each corner of the two quantizations.
fn corner_rows(n_rows: usize, width: usize) -> Vec<f32> {
    let block = |pattern: usize, j: usize| -> f32 {
        let centered = j as f32 - 16.0;
        match pattern {
            // max |x| = 127: d = 1, so x / d = x, halves exactly (q8_0 rounds them away from zero).
            0 => {
                if j == 31 {
                    127.0
                } else {
                    centered + 0.5
                }
            }
            // max = −8: q4_0's d = 1, codes x + 8.5 truncated, 7.5 and above clamped to 15.
            1 => {
                if j == 0 {
                    -8.0
                } else {
                    centered * 0.5
                }
            }
            2 => 0.0,
            // The largest magnitude with both signs: the first one sets q4_0's scale.
            3 => [3.0, -3.0][j % 2] * if j < 2 { 1.0 } else { 0.3 },
            4 => [-3.0, 3.0][j % 2] * if j < 2 { 1.0 } else { 0.3 },
            // Scales below f16's smallest subnormal: stored as 0, the codes still computed with 1 / d.
            5 => 1e-7 * (centered + 0.25),
            // Large values (f16 holds them).
            6 => 2000.0 * (centered + 0.25),
            // Irregular values.
            _ => ((j * 37 % 23) as f32 - 11.0) * 0.173 + 0.01,
        }
    };
    (0..n_rows * width).map(|i| block((i / 32 + i / width) % 8, i % 32)).collect()
}

/// The corner rows stored by the CPU backend's cache of each type.
fn store_case(out: &mut Words) {
    let (n_rows, width) = (6, 128);
    let rows = corner_rows(n_rows, width);
    out.put(n_rows);
    out.put(width);
    out.floats(&rows);
    for t in KvCacheType::ALL {
        let mut cache = CpuKvCache::new(&[KvPool::Global], (1, width), n_rows, 1, 0, (t.into(), t.into()), false);
        for (i, row) in rows.chunks_exact(width).enumerate() {
            cache.store(0, (5 * i + 3) % n_rows, row, &[]);
        }
        out.bytes(plane_bytes(cache.layer(0).keys));
    }
}

#[test]
fn kv_fixtures_for_the_cuda_emulation() {
    use KvCacheType::{Q4_0, Q8_0};
    let pairs = [(KvCacheType::F16, KvCacheType::F16), (Q8_0, Q8_0), (Q4_0, Q4_0), (Q8_0, Q4_0)];
    let mut out = Words(Vec::new());
    out.put(pairs.len());
    for (keys, values) in pairs {
        case(&mut out, KvCacheTypes { keys, values });
    }
    store_case(&mut out);
    if let Some(path) = std::env::var_os("EMBER_KV_FIXTURES") {
        std::fs::write(&path, bytemuck::cast_slice::<u32, u8>(&out.0)).unwrap();
        eprintln!("wrote {} KV cache cases to {}", pairs.len(), path.to_string_lossy());
    }
}
