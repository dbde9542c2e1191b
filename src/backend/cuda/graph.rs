//! Decode steps replayed from CUDA graphs, one per batch-size bucket.
//!
//! A decode step of a 135M model is ~190 small kernels; launched one by one, the CPU's launch overhead (several µs
//! each) would be most of the step. A graph launches them all in one call. Graphs record kernel parameters
//! (addresses and sizes) by value, so a graph serves steps of exactly its token count: decode steps are padded up
//! to the next bucket (1, 2, 4, … tokens; see `step_meta.rs` for the inert padding rows) and every per-step value
//! is read from the metadata buffer, which keeps its address. A graph also records which operations it replays;
//! a step whose operations differ runs launch by launch instead.

use std::sync::Arc;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaGraph, CudaStream};

use super::error::CudaBackendError;
use super::ops::Op;

/// Largest decode batch replayed from a graph: beyond it a step's kernels are long enough that launching them
/// one by one costs little in comparison.
pub const MAX_GRAPH_TOKENS: usize = 512;

/// The buckets for a backend of `max_tokens` rows: powers of two up to `min(max_tokens, MAX_GRAPH_TOKENS)`, and
/// that limit itself.
pub fn buckets(max_tokens: usize) -> Vec<usize> {
    let limit = max_tokens.min(MAX_GRAPH_TOKENS);
    let mut buckets: Vec<usize> =
        std::iter::successors(Some(1usize), |&b| Some(b * 2)).take_while(|&b| b <= limit).collect();
    if buckets.last().is_some_and(|&b| b < limit) {
        buckets.push(limit);
    }
    buckets
}

/// The smallest bucket that holds `n` tokens.
pub fn bucket_for(n: usize, buckets: &[usize]) -> Option<usize> {
    buckets.iter().copied().find(|&b| b >= n)
}

struct Entry {
    tokens: usize,
    ops: Vec<Op>,
    graph: CudaGraph,
}

/// The recorded graphs of one backend.
pub struct GraphCache {
    buckets: Vec<usize>,
    entries: Vec<Entry>,
    /// Why graphs are off, after a capture failed (the backend then launches every step kernel by kernel).
    disabled: Option<String>,
}

impl GraphCache {
    pub fn new(max_tokens: usize) -> Self {
        GraphCache { buckets: buckets(max_tokens), entries: Vec::new(), disabled: None }
    }

    /// The rows a decode step of `n` tokens is padded to, if graphs serve it.
    pub fn bucket_for(&self, n: usize) -> Option<usize> {
        if self.disabled.is_some() {
            return None;
        }
        bucket_for(n, &self.buckets)
    }

    /// The graph recorded for `tokens` rows and these `ops`, if any.
    pub fn get(&self, tokens: usize, ops: &[Op]) -> Option<&CudaGraph> {
        self.entries.iter().find(|e| e.tokens == tokens && e.ops == ops).map(|e| &e.graph)
    }

    /// Records what `enqueue` launches on `stream` as the graph for (`tokens`, `ops`), replacing an older graph of
    /// the same bucket, and returns it. The work is recorded, not run: the caller launches the graph.
    ///
    /// On failure the stream is out of capture mode and graphs stay off for this backend (the reason is kept
    /// for [`disabled_reason`](Self::disabled_reason)); the error is returned so that the caller runs the step
    /// without a graph.
    pub fn record(
        &mut self,
        stream: &Arc<CudaStream>,
        tokens: usize,
        ops: &[Op],
        enqueue: impl FnOnce() -> Result<(), CudaBackendError>,
    ) -> Result<&CudaGraph, CudaBackendError> {
        let captured = Self::capture(stream, enqueue);
        let graph = match captured {
            Ok(graph) => graph,
            Err(e) => {
                self.disabled = Some(e.to_string());
                return Err(e);
            }
        };
        self.entries.retain(|e| e.tokens != tokens);
        self.entries.push(Entry { tokens, ops: ops.to_vec(), graph });
        Ok(&self.entries.last().expect("just pushed").graph)
    }

    fn capture(
        stream: &Arc<CudaStream>,
        enqueue: impl FnOnce() -> Result<(), CudaBackendError>,
    ) -> Result<CudaGraph, CudaBackendError> {
        // Thread-local mode: only this thread's calls are barred from unsafe CUDA calls while recording, so another
        // engine's thread working at the same time is not disturbed.
        stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            .map_err(CudaBackendError::driver("starting a graph capture"))?;
        let enqueued = enqueue();
        // End the capture whatever happened, so that the stream leaves capture mode.
        let ended = stream.end_capture(CUgraphInstantiate_flags(0));
        enqueued?;
        ended
            .map_err(CudaBackendError::driver("ending a graph capture"))?
            .ok_or_else(|| CudaBackendError::Internal("a graph capture recorded nothing".into()))
    }

    /// Why graphs are off, if they are.
    pub fn disabled_reason(&self) -> Option<&str> {
        self.disabled.as_deref()
    }

    /// Graphs recorded so far.
    pub fn recorded(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two_up_to_the_limit() {
        assert_eq!(buckets(512), [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]);
        assert_eq!(buckets(100), [1, 2, 4, 8, 16, 32, 64, 100]);
        assert_eq!(buckets(65_536).last(), Some(&MAX_GRAPH_TOKENS));
        assert_eq!(buckets(1), [1]);
    }

    #[test]
    fn a_batch_goes_to_the_smallest_bucket_that_holds_it() {
        let b = buckets(100);
        assert_eq!([1, 2, 3, 8, 9, 64, 65].map(|n| bucket_for(n, &b)), [1, 2, 4, 8, 16, 64, 100].map(Some));
        assert_eq!(bucket_for(101, &b), None, "beyond the largest bucket: no graph");
    }
}
