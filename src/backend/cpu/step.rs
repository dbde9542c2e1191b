//! The layout of one forward step on the CPU: which rows belong to which sequence, each token's position, KV
//! cache slot (in each block pool) and RoPE angles. Built once in `begin`, read by every layer; its buffers are
//! reused across steps.

use std::ops::Range;

use super::kv_cache::{CpuKvCache, KvPool};
use crate::model::llama::batch::SeqChunk;
use crate::model::llama::{rope, LlamaConfig};
use crate::model::TokenId;

struct SeqEntry {
    rows: Range<usize>,
    /// Range of its block table in `StepLayout::block_tables`.
    blocks: Range<usize>,
    /// Range of its window table in `StepLayout::window_tables` (empty without a window pool).
    window_blocks: Range<usize>,
    /// The last rows of `rows` whose logits are wanted (`SeqChunk::logit_rows`).
    logit_rows: usize,
}

/// Per-token and per-sequence facts of the current step.
#[derive(Default)]
pub struct StepLayout {
    /// `[T]`: the new tokens, sequence after sequence.
    tokens: Vec<TokenId>,
    /// `[T]`: each token's position in its sequence.
    positions: Vec<usize>,
    /// `[T]`: each token's KV cache slot in the global pool.
    slots: Vec<usize>,
    /// `[T]`: each token's slot in the window pool (empty without a window pool).
    window_slots: Vec<usize>,
    /// `[rope base][T][rope_dim / 2]`: cos and sin of each token's rotation angles, one table per distinct RoPE
    /// base of the model (`LlamaConfig::rope_bases`).
    rope_cos: Vec<f32>,
    rope_sin: Vec<f32>,
    seqs: Vec<SeqEntry>,
    /// `[T]`: the index in `seqs` of each row's sequence.
    row_seq: Vec<u32>,
    /// Every sequence's block table, concatenated.
    block_tables: Vec<u32>,
    /// Every sequence's window table, concatenated (empty without a window pool).
    window_tables: Vec<u32>,
    half_rope: usize,
    /// `[rope base][rope_dim / 2]`: `base^(−2i / rope_dim)`.
    inv_freq: Vec<Vec<f64>>,
}

impl StepLayout {
    /// Lays out a validated batch. Rotation angles follow GGUF llama: pair `i` of a head at position `p` turns by
    /// `p · base^(−2i / rope_dim)` (divided by Llama 3's frequency factors: `LlamaConfig::inv_frequencies`), computed in f64 so that long positions keep their precision, by `llama::rope`'s
    /// portable functions so that the tables are the same on every machine.
    pub fn build(&mut self, batch: &[SeqChunk<'_>], config: &LlamaConfig, cache: &CpuKvCache) {
        if self.half_rope != config.rope_dim / 2 || self.inv_freq.len() != config.rope_bases.len() {
            self.half_rope = config.rope_dim / 2;
            self.inv_freq = (0..config.rope_bases.len()).map(|b| config.inv_frequencies(b)).collect();
        }
        self.tokens.clear();
        self.positions.clear();
        self.slots.clear();
        self.window_slots.clear();
        self.rope_cos.clear();
        self.rope_sin.clear();
        self.seqs.clear();
        self.row_seq.clear();
        self.block_tables.clear();
        self.window_tables.clear();
        let window_pool = cache.window_blocks().is_some();
        for s in batch {
            let first_row = self.tokens.len();
            let first_block = self.block_tables.len();
            let first_window_block = self.window_tables.len();
            self.block_tables.extend_from_slice(s.block_table);
            self.window_tables.extend_from_slice(s.window_table);
            for (i, &token) in s.tokens.iter().enumerate() {
                let pos = s.start_pos + i;
                self.tokens.push(token);
                self.row_seq.push(self.seqs.len() as u32);
                self.positions.push(pos);
                self.slots.push(cache.slot(s.block_table, pos));
                if window_pool {
                    self.window_slots.push(cache.slot(s.window_table, pos));
                }
            }
            self.seqs.push(SeqEntry {
                rows: first_row..self.tokens.len(),
                blocks: first_block..self.block_tables.len(),
                window_blocks: first_window_block..self.window_tables.len(),
                logit_rows: s.logit_rows,
            });
        }
        for (base, inv_freq) in self.inv_freq.iter().enumerate() {
            // llama.cpp's attention factor and YaRN's correction scale every rotation (1 for most models).
            let scale = config.rope_magnitude(base);
            for &pos in &self.positions {
                for &f in inv_freq {
                    let (cos, sin) = rope::cos_sin(pos as f64 * f);
                    self.rope_cos.push((cos * scale) as f32);
                    self.rope_sin.push((sin * scale) as f32);
                }
            }
        }
    }

    /// `T`: new tokens in the step.
    pub fn n_tokens(&self) -> usize {
        self.tokens.len()
    }

    pub fn tokens(&self) -> &[TokenId] {
        &self.tokens
    }

    pub fn position(&self, row: usize) -> usize {
        self.positions[row]
    }

    /// Row `row`'s KV cache slot in `pool`.
    pub fn slot(&self, row: usize, pool: KvPool) -> usize {
        match pool {
            KvPool::Global => self.slots[row],
            KvPool::Window => self.window_slots[row],
        }
    }

    /// The cos and sin tables of row `row`'s rotation with RoPE base `base` (an index into
    /// `LlamaConfig::rope_bases`).
    pub fn rope(&self, base: usize, row: usize) -> (&[f32], &[f32]) {
        let at = (base * self.tokens.len() + row) * self.half_rope;
        let r = at..at + self.half_rope;
        (&self.rope_cos[r.clone()], &self.rope_sin[r])
    }

    /// The index of row `row`'s sequence in the batch.
    pub fn sequence_of_row(&self, row: usize) -> usize {
        self.row_seq[row] as usize
    }

    /// Row `row`'s sequence's table of blocks in `pool`.
    pub fn block_table_of_row(&self, row: usize, pool: KvPool) -> &[u32] {
        let seq = &self.seqs[self.row_seq[row] as usize];
        match pool {
            KvPool::Global => &self.block_tables[seq.blocks.clone()],
            KvPool::Window => &self.window_tables[seq.window_blocks.clone()],
        }
    }

    /// The rows whose logits are wanted (each sequence's last `logit_rows` new tokens), in batch order.
    pub fn logit_rows(&self) -> impl Iterator<Item = usize> + '_ {
        self.seqs.iter().flat_map(|s| s.rows.end - s.logit_rows..s.rows.end)
    }
}
