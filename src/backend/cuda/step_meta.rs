//! What the kernels need to know about one step, packed on the host into one `i32` buffer and uploaded in one
//! copy: each token's id, position and cache slot, where its sequence's block table starts, which rows want logits,
//! and the block tables themselves.
//!
//! The sections sit at fixed offsets sized for the largest step, so that a CUDA graph recorded for one step reads
//! the next step's values from the same addresses. A decode step that runs through a graph is padded to the graph's
//! token count with rows that touch nothing: position −1 (no rotation, zero attention output) and slot −1 (no cache
//! write); their logits rows are computed and ignored.

use std::ops::Range;

use super::error::CudaBackendError;
use crate::model::llama::batch::SeqChunk;

/// Where each section of the metadata buffer lives, in `i32` elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaLayout {
    /// Rows of the largest step (the backend's `max_batch_tokens`).
    pub max_tokens: usize,
    /// Block table entries of the largest step.
    pub max_table_entries: usize,
}

impl MetaLayout {
    /// `[max_tokens]`: token ids.
    pub fn tokens(&self) -> Range<usize> {
        0..self.max_tokens
    }

    /// `[max_tokens]`: positions, −1 for padding.
    pub fn positions(&self) -> Range<usize> {
        self.max_tokens..2 * self.max_tokens
    }

    /// `[max_tokens]`: cache slots (block · block_size + offset), −1 for padding.
    pub fn slots(&self) -> Range<usize> {
        2 * self.max_tokens..3 * self.max_tokens
    }

    /// `[max_tokens]`: where each token's block table starts in the block tables section.
    pub fn table_offsets(&self) -> Range<usize> {
        3 * self.max_tokens..4 * self.max_tokens
    }

    /// `[max_tokens]`: the rows whose logits are computed, in batch order.
    pub fn logit_rows(&self) -> Range<usize> {
        4 * self.max_tokens..5 * self.max_tokens
    }

    /// `[max_table_entries]`: the block tables, sequence after sequence.
    pub fn block_tables(&self) -> Range<usize> {
        5 * self.max_tokens..5 * self.max_tokens + self.max_table_entries
    }

    /// Elements of the whole buffer.
    pub fn total(&self) -> usize {
        self.block_tables().end
    }
}

/// The host side of a step's metadata.
pub struct StepMeta {
    layout: MetaLayout,
    /// `[layout.total()]`: the buffer as uploaded.
    host: Vec<i32>,
    /// Rows the kernels compute: the batch's tokens, or more when padded for a graph.
    rows: usize,
    /// Logits rows the caller wants (each sequence's last `logit_rows` tokens), in batch order: the first rows of
    /// the logits.
    n_logits: usize,
    /// Logits rows the kernels compute: `n_logits`, or `rows` when padded.
    logit_rows: usize,
    /// Entries of the block tables section in use.
    table_entries: usize,
}

impl StepMeta {
    pub fn new(layout: MetaLayout) -> Self {
        StepMeta { layout, host: vec![0; layout.total()], rows: 0, n_logits: 0, logit_rows: 0, table_entries: 0 }
    }

    /// Whether every sequence of `batch` decodes one token and wants its logits: the steps graphs replay.
    pub fn is_decode(batch: &[SeqChunk<'_>]) -> bool {
        batch.iter().all(|s| s.tokens.len() == 1 && s.logit_rows == 1)
    }

    /// Lays out a batch that passed `validate_batch` with this `block_size`, padded to `pad_to` rows when given
    /// (decode batches only: every padding row is its own logits row).
    pub fn build(
        &mut self,
        batch: &[SeqChunk<'_>],
        block_size: usize,
        pad_to: Option<usize>,
    ) -> Result<(), CudaBackendError> {
        let n_tokens: usize = batch.iter().map(|s| s.tokens.len()).sum();
        let rows = pad_to.unwrap_or(n_tokens);
        if rows < n_tokens || rows > self.layout.max_tokens || (pad_to.is_some() && !Self::is_decode(batch)) {
            return Err(CudaBackendError::Internal(format!("a step of {n_tokens} tokens laid out as {rows} rows")));
        }
        let l = self.layout;
        let (mut row, mut n_logits, mut entries) = (0, 0, 0);
        for s in batch {
            let needed = s.end_pos().div_ceil(block_size);
            if entries + needed > l.max_table_entries {
                return Err(CudaBackendError::Internal(format!("block tables beyond {}", l.max_table_entries)));
            }
            let table_start = l.block_tables().start + entries;
            for (dst, &block) in self.host[table_start..table_start + needed].iter_mut().zip(s.block_table) {
                *dst = block as i32;
            }
            let first_row = row;
            for (i, &token) in s.tokens.iter().enumerate() {
                let pos = s.start_pos + i;
                self.host[l.tokens().start + row] = token as i32;
                self.host[l.positions().start + row] = pos as i32;
                let slot = s.block_table[pos / block_size] as usize * block_size + pos % block_size;
                self.host[l.slots().start + row] = slot as i32;
                self.host[l.table_offsets().start + row] = entries as i32;
                row += 1;
            }
            for i in s.logit_token_range() {
                self.host[l.logit_rows().start + n_logits] = (first_row + i) as i32;
                n_logits += 1;
            }
            entries += needed;
        }
        for pad in n_tokens..rows {
            self.host[l.tokens().start + pad] = 0;
            self.host[l.positions().start + pad] = -1;
            self.host[l.slots().start + pad] = -1;
            self.host[l.table_offsets().start + pad] = 0;
            self.host[l.logit_rows().start + pad] = pad as i32;
        }
        self.rows = rows;
        self.n_logits = n_logits;
        self.logit_rows = if pad_to.is_some() { rows } else { n_logits };
        self.table_entries = entries;
        Ok(())
    }

    pub fn layout(&self) -> MetaLayout {
        self.layout
    }

    /// Rows every kernel of the step computes.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Logits rows the caller gets (each sequence's last `logit_rows`).
    pub fn n_logits(&self) -> usize {
        self.n_logits
    }

    /// Logits rows the kernels compute (`n_logits`, plus the padding rows of a graph step).
    pub fn logit_rows(&self) -> usize {
        self.logit_rows
    }

    /// The prefix of the buffer this step uses (every section but the block tables in full, then the tables in use).
    pub fn upload(&self) -> &[i32] {
        &self.host[..self.layout.block_tables().start + self.table_entries]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYOUT: MetaLayout = MetaLayout { max_tokens: 8, max_table_entries: 16 };

    fn section(meta: &StepMeta, range: Range<usize>, n: usize) -> Vec<i32> {
        meta.upload()[range][..n].to_vec()
    }

    #[test]
    fn a_mixed_step_is_laid_out_sequence_after_sequence() {
        let mut meta = StepMeta::new(LAYOUT);
        let batch = [
            // A prompt chunk at positions 3..6 over blocks 7 and 2 (block size 4): slots 31, 8, 9.
            SeqChunk { tokens: &[10, 11, 12], start_pos: 3, block_table: &[7, 2, 5], window_table: &[], logit_rows: 0 },
            // A decode at position 0 of block 4.
            SeqChunk { tokens: &[20], start_pos: 0, block_table: &[4], window_table: &[], logit_rows: 1 },
        ];
        meta.build(&batch, 4, None).unwrap();
        assert_eq!((meta.rows(), meta.n_logits(), meta.logit_rows()), (4, 1, 1));
        assert_eq!(section(&meta, LAYOUT.tokens(), 4), [10, 11, 12, 20]);
        assert_eq!(section(&meta, LAYOUT.positions(), 4), [3, 4, 5, 0]);
        assert_eq!(section(&meta, LAYOUT.slots(), 4), [31, 8, 9, 16]);
        assert_eq!(section(&meta, LAYOUT.table_offsets(), 4), [0, 0, 0, 2]);
        assert_eq!(section(&meta, LAYOUT.logit_rows(), 1), [3]);
        // Only the blocks covering positions 0..6 of the first sequence travel: its third block is unused.
        assert_eq!(meta.upload()[LAYOUT.block_tables().start..].to_vec(), [7, 2, 4]);
    }

    #[test]
    fn a_chunk_can_want_the_logits_of_its_last_rows() {
        let mut meta = StepMeta::new(LAYOUT);
        let batch = [
            SeqChunk { tokens: &[20], start_pos: 0, block_table: &[4], window_table: &[], logit_rows: 1 },
            // A scored prompt chunk: its last 2 of 3 rows (rows 2 and 3 of the step).
            SeqChunk { tokens: &[10, 11, 12], start_pos: 0, block_table: &[7], window_table: &[], logit_rows: 2 },
            SeqChunk { tokens: &[30, 31], start_pos: 0, block_table: &[5], window_table: &[], logit_rows: 2 },
        ];
        assert!(!StepMeta::is_decode(&batch));
        meta.build(&batch, 4, None).unwrap();
        assert_eq!((meta.rows(), meta.n_logits(), meta.logit_rows()), (6, 5, 5));
        assert_eq!(section(&meta, LAYOUT.logit_rows(), 5), [0, 2, 3, 4, 5]);
    }

    #[test]
    fn a_padded_decode_step_has_inert_rows() {
        let mut meta = StepMeta::new(LAYOUT);
        let batch = [
            SeqChunk { tokens: &[5], start_pos: 6, block_table: &[1, 3], window_table: &[], logit_rows: 1 },
            SeqChunk { tokens: &[6], start_pos: 1, block_table: &[0], window_table: &[], logit_rows: 1 },
        ];
        assert!(StepMeta::is_decode(&batch));
        meta.build(&batch, 4, Some(4)).unwrap();
        assert_eq!((meta.rows(), meta.n_logits(), meta.logit_rows()), (4, 2, 4));
        assert_eq!(section(&meta, LAYOUT.positions(), 4), [6, 1, -1, -1]);
        assert_eq!(section(&meta, LAYOUT.slots(), 4), [14, 1, -1, -1]);
        assert_eq!(section(&meta, LAYOUT.table_offsets(), 4), [0, 2, 0, 0]);
        assert_eq!(section(&meta, LAYOUT.logit_rows(), 4), [0, 1, 2, 3]);
    }

    #[test]
    fn impossible_layouts_are_refused() {
        let mut meta = StepMeta::new(LAYOUT);
        let prompt = [SeqChunk { tokens: &[1, 2], start_pos: 0, block_table: &[0], window_table: &[], logit_rows: 1 }];
        assert!(!StepMeta::is_decode(&prompt));
        assert!(meta.build(&prompt, 4, Some(4)).is_err(), "a prompt chunk is never padded");
        let decode = [SeqChunk { tokens: &[1], start_pos: 0, block_table: &[0], window_table: &[], logit_rows: 1 }];
        assert!(meta.build(&decode, 4, Some(9)).is_err(), "more rows than the buffers hold");
        let long = [SeqChunk { tokens: &[1], start_pos: 70, block_table: &[0; 18], window_table: &[], logit_rows: 1 }];
        assert!(meta.build(&long, 4, None).is_err(), "more table entries than the section holds");
    }
}
