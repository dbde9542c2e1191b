//! `Embedder`: an embedding model (an encoder, or a decoder with a pooling head: `model.rs`) served to many host
//! threads at once. Each call submits a request (one or many
//! inputs, already tokenized) and waits for its vectors; a background thread packs the inputs of every waiting
//! request, the lowest `priority` value first (vLLM's order, as chat requests) then oldest, into batches of up to `max_batch_tokens` tokens, so that many short
//! inputs share one forward pass (the matmuls are the cost, and a batch runs each once).
//!
//! A request's inputs may span batches, and a batch may hold several requests' inputs: an input's vector does not
//! depend on what it is batched with (`tests/encoder_families.rs` shows the bits are the same), so packing is free
//! to choose.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::backend::cpu::Precision;
use crate::model::encoder::{fill_rerank_template, normalize, EncoderConfig, Pooling};
use crate::model::gguf::{GgufFile, LoadMode};
use crate::model::tokenizer::{Tokenizer, VocabKind};
use crate::model::TokenId;

use super::model::{EmbedModel, EmbedShape, Loaded};
use super::request::{EmbedError, EmbedOutput, EmbedRequest, EmbedTiming};

/// How an embedder runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmbedderConfig {
    /// Threads of the forward pass.
    pub threads: usize,
    /// Most tokens in one forward pass (all inputs together); an input longer than this is refused.
    pub max_batch_tokens: usize,
    /// Requests that may wait at once; one more is refused (`EmbedError::Overloaded`).
    pub max_waiting_requests: usize,
    /// Inputs in one request, at most.
    pub max_inputs: usize,
    pub precision: Precision,
    /// The pooling of requests that name none, instead of the file's; on a decoder (a chat model's file) it makes
    /// the model an embedder. `None`: the file's.
    pub pooling: Option<Pooling>,
    /// The engine's `enable_per_request_metrics`: the first half of the metrics gate of the response bodies.
    pub enable_per_request_metrics: bool,
    /// The engine's `disable_log_stats`: no timing metric is reported, in a body or through the C getter.
    pub disable_log_stats: bool,
}

impl Default for EmbedderConfig {
    fn default() -> Self {
        EmbedderConfig {
            threads: crate::backend::cpu::default_threads(),
            max_batch_tokens: 4096,
            max_waiting_requests: 1024,
            max_inputs: 2048,
            precision: Precision::Quantized8,
            pooling: None,
            enable_per_request_metrics: false,
            disable_log_stats: false,
        }
    }
}

/// A request in the queue, and what has been computed of it.
struct Pending {
    request: EmbedRequest,
    /// Order of arrival, for ties of priority.
    order: u64,
    submitted: Instant,
    started: Option<Instant>,
    /// Inputs handed to a batch so far.
    next_input: usize,
    /// Inputs whose vectors are written.
    done_inputs: usize,
    /// Floats per input: the model's width, or the classification head's scores with `Pooling::Rank`.
    width: usize,
    /// `[inputs][width]`, pooled (normalized and truncated when the request is complete).
    vectors: Vec<f32>,
    result: Option<Result<EmbedOutput, EmbedError>>,
}

#[derive(Default)]
struct Queue {
    pending: Vec<Arc<Mutex<Pending>>>,
    next_order: u64,
    stopping: bool,
}

struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a request arrives or the embedder stops.
    work: Condvar,
    /// Signalled when a request completes.
    done: Condvar,
}

/// An embedding model and the thread that runs it.
pub struct Embedder {
    /// The model's name in responses (`served_model_name`, else the file's name without `.gguf`).
    name: String,
    config: EmbedderConfig,
    shape: EmbedShape,
    /// The encoder's configuration (`None` for a decoder model).
    encoder_config: Option<EncoderConfig>,
    /// The model's file (the thread holds it too), for its description (`engine_model_info_json`).
    file: Arc<GgufFile>,
    /// Where it was read from, when the embedder was opened for an engine.
    path: Option<std::path::PathBuf>,
    /// The file's SHA-256, computed on first request (it reads every byte).
    sha256: std::sync::OnceLock<String>,
    tokenizer: Arc<Tokenizer>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    kernel_path: &'static str,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the queue half-updated in a way that matters more than losing the
    // request: recover the guard rather than spreading the panic to every caller.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Embedder {
    /// Loads the embedding model at `path` and starts its thread.
    pub fn open(path: &std::path::Path, config: EmbedderConfig) -> Result<Self, String> {
        let file = GgufFile::open_with(path, LoadMode::Auto).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::from_file(Arc::new(file), config)
    }

    /// Starts an embedder on an opened file.
    pub fn from_file(file: Arc<GgufFile>, config: EmbedderConfig) -> Result<Self, String> {
        if config.max_batch_tokens == 0 || config.max_waiting_requests == 0 || config.max_inputs == 0 {
            return Err("max_batch_tokens, max_waiting_requests and max_inputs must be at least 1".into());
        }
        let loaded = Loaded::from_gguf(&file, config.pooling)?;
        let shape = loaded.shape();
        let encoder_config = match &loaded {
            Loaded::Encoder(c) => Some(c.clone()),
            Loaded::Decoder(..) => None,
        };
        let tokenizer = Arc::new(Tokenizer::from_gguf(&file).map_err(|e| e.to_string())?);
        let shared =
            Arc::new(Shared { queue: Mutex::new(Queue::default()), work: Condvar::new(), done: Condvar::new() });
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<&'static str, String>>();
        let kept_file = Arc::clone(&file);
        let thread = {
            let (shared, shape, config) = (Arc::clone(&shared), shape.clone(), config.clone());
            std::thread::Builder::new()
                .name("ember-embedder".into())
                .spawn(move || match loaded.start(&file, config.threads, config.max_batch_tokens, config.precision) {
                    Ok(mut model) => {
                        let _ = ready_tx.send(Ok(model.kernel_path()));
                        run(&shared, &shape, &mut model);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                })
                .map_err(|e| format!("cannot start the embedder thread: {e}"))?
        };
        let kernel_path = match ready_rx.recv() {
            Ok(Ok(path)) => path,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err("the embedder thread stopped while starting".into());
            }
        };
        Ok(Embedder {
            name: "embedder".into(),
            config,
            shape,
            encoder_config,
            file: kept_file,
            path: None,
            sha256: std::sync::OnceLock::new(),
            tokenizer,
            shared,
            thread: Some(thread),
            kernel_path,
        })
    }

    /// Starts an embedder for an engine configuration whose model (`file`, read from `path`) is an embedding model
    /// (`Loaded::is_embedding_model`): its threads, `pooling`, `max_num_batched_tokens` (for an encoder at least its
    /// positions, so that any input fits a batch; a decoder's context is too long for that: 4096 unless set),
    /// `max_waiting_requests`, `served_model_name` and `activation_precision` (`auto`: f32 activations for float
    /// weights, as llama.cpp pairs them, 8-bit ones for quantized weights).
    pub fn for_engine(
        file: Arc<GgufFile>,
        path: &std::path::Path,
        config: &crate::engine::EngineConfig,
    ) -> Result<Self, String> {
        use crate::engine::api::config::ActivationPrecision;
        use crate::model::gguf::GgmlType;
        let is_float = |t: GgmlType| matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16);
        let float_weights = file.tensor_infos().iter().filter(|t| t.shape.len() >= 2).all(|t| is_float(t.dtype));
        let precision = match config.activation_precision {
            ActivationPrecision::F32 => Precision::Float32,
            ActivationPrecision::Q8 => Precision::Quantized8,
            ActivationPrecision::Auto if float_weights => Precision::Float32,
            ActivationPrecision::Auto => Precision::Quantized8,
        };
        let batch = config.max_num_batched_tokens.unwrap_or(4096);
        let max_batch_tokens = match EncoderConfig::is_encoder(&file) {
            true => batch.max(EncoderConfig::from_gguf(&file).map_err(|e| e.to_string())?.context_length),
            false => batch,
        };
        let embedder_config = EmbedderConfig {
            threads: if config.threads == 0 { crate::backend::cpu::default_threads() } else { config.threads },
            max_batch_tokens,
            pooling: config.pooling,
            max_waiting_requests: config.max_waiting_requests_or_default(),
            precision,
            enable_per_request_metrics: config.enable_per_request_metrics,
            disable_log_stats: config.disable_log_stats,
            ..EmbedderConfig::default()
        };
        let mut embedder = Self::from_file(file, embedder_config)?;
        embedder.path = Some(path.to_owned());
        embedder.name = match &config.served_model_name {
            Some(name) => name.clone(),
            None => {
                let file = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                file.strip_suffix(".gguf").map(str::to_owned).unwrap_or(file)
            }
        };
        Ok(embedder)
    }

    /// The model's name in responses.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What requests are checked against: width, vocabulary, positions, pooling, scores.
    pub fn shape(&self) -> &EmbedShape {
        &self.shape
    }

    /// The encoder's configuration; `None` when the model is a decoder.
    pub fn encoder_config(&self) -> Option<&EncoderConfig> {
        self.encoder_config.as_ref()
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn config(&self) -> &EmbedderConfig {
        &self.config
    }

    /// The model's file.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// The path the model was read from (`None` when the embedder was started on a file in memory).
    pub fn path(&self) -> Option<&std::path::Path> {
        self.path.as_deref()
    }

    /// The model file's SHA-256 in hex, computed on the first call (every byte read), then kept.
    pub fn model_sha256(&self) -> &str {
        self.sha256.get_or_init(|| {
            use sha2::{Digest, Sha256};
            Sha256::digest(self.file.bytes()).iter().map(|b| format!("{b:02x}")).collect()
        })
    }

    /// The CPU kernel path the model runs on.
    pub fn kernel_path(&self) -> &'static str {
        self.kernel_path
    }

    /// The token ids of one input text as the model expects it: `[CLS] text [SEP]` for BERT's vocabularies, `<s> text
    /// </s>` for XLM-RoBERTa's, `text <|endoftext|>` for Qwen3-Embedding's (the file's BOS, separator and EOS, where it
    /// asks for them; llama.cpp's tokenization with special tokens added).
    pub fn tokenize(&self, text: &str) -> Vec<TokenId> {
        self.tokenize_text(text, true, false)
    }

    /// `engine_tokenize` on an embedding engine: `text`'s ids with special tokens parsed or not, framed as an
    /// embedding input (BOS, separator and EOS as the file asks) when `add_special`, so that a host counts an
    /// input's tokens as the embedder will.
    pub fn tokenize_text(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<TokenId> {
        let t = &self.tokenizer;
        let ids = t.encode(text, parse_special);
        if !add_special {
            return ids;
        }
        let mut framed: Vec<TokenId> = t.bos_id().filter(|_| t.add_bos()).into_iter().collect();
        framed.extend(ids);
        // llama.cpp's Unigram inputs end with EOS alone: XLM-RoBERTa's `add_sep_token` is for its pairs.
        framed.extend(t.sep_id().filter(|_| t.add_sep() && t.kind() != VocabKind::Unigram));
        framed.extend(t.eos_id().filter(|_| t.add_eos()));
        framed
    }

    /// Each document's input for reranking against `query`. With the file's pair prompt
    /// (`tokenizer.chat_template.rerank`, Qwen3-Reranker's) the prompt filled in and tokenized with special tokens
    /// parsed, as llama-server does; otherwise the query's input (`[CLS] query [SEP]`) then the document's without
    /// its BOS (`document [SEP]`), a cross-encoder's pair (XLM-RoBERTa's: `<s> query </s></s> document </s>`).
    pub fn rerank_inputs(&self, query: &str, documents: &[&str]) -> Result<Vec<Vec<TokenId>>, EmbedError> {
        if let Some(template) = &self.shape.rerank_template {
            // Any longer prompt has more tokens than the model takes: refuse it before building it.
            let max_bytes = template.len() + 64 * self.shape.context_length.min(self.config.max_batch_tokens);
            return documents
                .iter()
                .enumerate()
                .map(|(index, d)| {
                    let prompt = fill_rerank_template(template, query, d, max_bytes)
                        .ok_or(EmbedError::PromptTooLong { index, max_bytes })?;
                    Ok(self.tokenizer.encode(&prompt, true))
                })
                .collect();
        }
        let t = &self.tokenizer;
        let query = self.tokenize(query);
        let has_bos = t.add_bos() && t.bos_id().is_some();
        // XLM-RoBERTa's pairs put its separator between the query's `</s>` and the document (`<s> q </s></s> d
        // </s>`), as its Hugging Face tokenizer and llama-server build them, when the file asks for separators.
        let between = t.sep_id().filter(|_| t.add_sep() && t.kind() == VocabKind::Unigram);
        Ok(documents
            .iter()
            .map(|d| {
                let doc = self.tokenize(d);
                let mut ids = query.clone();
                ids.extend(between);
                ids.extend_from_slice(if has_bos { &doc[1..] } else { &doc });
                ids
            })
            .collect())
    }

    /// Checks `request`, queues it, and waits for its vectors.
    pub fn embed(&self, request: EmbedRequest) -> Result<EmbedOutput, EmbedError> {
        self.check(&request)?;
        let submitted = Instant::now();
        if request.waited_past_deadline(false, submitted) {
            return Err(EmbedError::DeadlineExceeded);
        }
        let width = match request.pooling {
            Some(Pooling::Rank) => self.shape.rank_outputs.unwrap_or(0),
            _ => self.shape.n_embd,
        };
        let pending = {
            let mut queue = lock(&self.shared.queue);
            if queue.stopping {
                return Err(EmbedError::Stopped);
            }
            if queue.pending.len() >= self.config.max_waiting_requests {
                return Err(EmbedError::Overloaded { waiting: queue.pending.len() });
            }
            let order = queue.next_order;
            queue.next_order += 1;
            let vectors = vec![0.0; request.inputs.len() * width];
            let pending = Arc::new(Mutex::new(Pending {
                request,
                order,
                submitted,
                started: None,
                next_input: 0,
                done_inputs: 0,
                width,
                vectors,
                result: None,
            }));
            queue.pending.push(Arc::clone(&pending));
            pending
        };
        self.shared.work.notify_one();
        let mut queue = lock(&self.shared.queue);
        loop {
            if let Some(result) = lock(&pending).result.take() {
                return result;
            }
            if queue.stopping && !queue.pending.iter().any(|p| Arc::ptr_eq(p, &pending)) {
                return Err(EmbedError::Stopped);
            }
            queue = self.shared.done.wait(queue).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn check(&self, request: &EmbedRequest) -> Result<(), EmbedError> {
        let c = &self.shape;
        if request.inputs.is_empty() {
            return Err(EmbedError::NoInputs);
        }
        if request.inputs.len() > self.config.max_inputs {
            return Err(EmbedError::TooManyInputs { inputs: request.inputs.len(), max: self.config.max_inputs });
        }
        let max = c.context_length.min(self.config.max_batch_tokens);
        for (index, input) in request.inputs.iter().enumerate() {
            if input.is_empty() {
                return Err(EmbedError::EmptyInput { index });
            }
            if input.len() > max {
                return Err(EmbedError::InputTooLong { index, tokens: input.len(), max });
            }
            if let Some(&token) = input.iter().find(|&&t| t as usize >= c.vocab_size) {
                return Err(EmbedError::TokenOutOfRange { index, token, vocab_size: c.vocab_size });
            }
        }
        let pooling = request.pooling.unwrap_or(c.pooling);
        let ranks = pooling == Pooling::Rank;
        if pooling == Pooling::None || (ranks && c.rank_outputs.is_none()) {
            return Err(EmbedError::Pooling(pooling));
        }
        // A reranker asked for vectors gives its pooled first token (its head is for scores).
        if ranks && request.pooling != Some(Pooling::Rank) {
            return Err(EmbedError::RankerNeedsPairs);
        }
        if ranks && request.dimensions.is_some() {
            return Err(EmbedError::Dimensions { requested: request.dimensions.unwrap_or(0), width: 0 });
        }
        if let Some(d) = request.dimensions {
            if d == 0 || d > c.n_embd {
                return Err(EmbedError::Dimensions { requested: d, width: c.n_embd });
            }
        }
        Ok(())
    }
}

impl Drop for Embedder {
    fn drop(&mut self) {
        lock(&self.shared.queue).stopping = true;
        self.shared.work.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.shared.done.notify_all();
    }
}

/// The embedder thread: batch, encode, deliver, until stopped.
fn run(shared: &Shared, shape: &EmbedShape, encoder: &mut EmbedModel<'_>) {
    let width = shape.n_embd;
    let default_pooling = shape.pooling;
    let budget = encoder.max_batch_tokens();
    loop {
        // Take work: inputs of the waiting requests by priority, then arrival, up to the token budget.
        let mut taken: Vec<(Arc<Mutex<Pending>>, usize, usize)> = Vec::new(); // (request, first input, count)
        let mut inputs: Vec<Vec<TokenId>> = Vec::new();
        let mut poolings: Vec<Pooling> = Vec::new();
        {
            let mut queue = lock(&shared.queue);
            while queue.pending.is_empty() && !queue.stopping {
                queue = shared.work.wait(queue).unwrap_or_else(|e| e.into_inner());
            }
            if queue.stopping {
                // Every waiting caller gets `Stopped`.
                queue.pending.clear();
                return;
            }
            if refuse_past_deadline(&mut queue, Instant::now()) {
                shared.done.notify_all();
            }
            let keys: Vec<(i32, u64)> = queue
                .pending
                .iter()
                .map(|p| {
                    let p = lock(p);
                    (p.request.priority, p.order)
                })
                .collect();
            let mut tokens = 0;
            'requests: for i in service_order(&keys) {
                let arc = Arc::clone(&queue.pending[i]);
                let mut p = lock(&arc);
                let first = p.next_input;
                while p.next_input < p.request.inputs.len() {
                    let len = p.request.inputs[p.next_input].len();
                    if tokens + len > budget {
                        break;
                    }
                    tokens += len;
                    inputs.push(p.request.inputs[p.next_input].clone());
                    poolings.push(p.request.pooling.unwrap_or(default_pooling));
                    p.next_input += 1;
                }
                if p.next_input > first {
                    p.started.get_or_insert_with(Instant::now);
                    let count = p.next_input - first;
                    drop(p);
                    taken.push((arc, first, count));
                }
                if tokens >= budget {
                    break 'requests;
                }
            }
        }
        if inputs.is_empty() {
            continue;
        }
        // Encode, by pooling type (one call per type; nearly always one); `Rank` through the classification head.
        let mut results: Vec<Vec<f32>> = vec![Vec::new(); inputs.len()];
        let mut kinds = poolings.clone();
        kinds.sort_by_key(|p| p.name());
        kinds.dedup();
        let mut failure = None;
        for kind in kinds {
            let picked: Vec<usize> = (0..inputs.len()).filter(|&i| poolings[i] == kind).collect();
            let slices: Vec<&[TokenId]> = picked.iter().map(|&i| inputs[i].as_slice()).collect();
            let per_input = match kind {
                Pooling::Rank => shape.rank_outputs.unwrap_or(0),
                _ => width,
            };
            let mut out = vec![0f32; picked.len() * per_input];
            let done = match kind {
                Pooling::Rank => encoder.rank(&slices, &mut out),
                _ => encoder.embed(&slices, kind, &mut out),
            };
            match done {
                Ok(()) => {
                    for (&i, row) in picked.iter().zip(out.chunks_exact(per_input.max(1))) {
                        results[i] = row.to_vec();
                    }
                }
                Err(e) => failure = Some(EmbedError::Encoder(e.to_string())),
            }
        }
        // Deliver.
        let mut offset = 0;
        let mut finished = Vec::new();
        for (arc, first, count) in taken {
            let mut p = lock(&arc);
            if let Some(e) = &failure {
                p.result = Some(Err(e.clone()));
            } else {
                let w = p.width;
                for (k, row) in results[offset..offset + count].iter().enumerate() {
                    p.vectors[(first + k) * w..(first + k + 1) * w].copy_from_slice(row);
                }
                p.done_inputs += count;
                if p.done_inputs == p.request.inputs.len() {
                    let output = complete(&mut p);
                    p.result = Some(Ok(output));
                }
            }
            offset += count;
            if p.result.is_some() {
                finished.push(Arc::clone(&arc));
            }
        }
        if !finished.is_empty() {
            let mut queue = lock(&shared.queue);
            queue.pending.retain(|p| !finished.iter().any(|f| Arc::ptr_eq(p, f)));
            drop(queue);
            shared.done.notify_all();
        }
    }
}

/// Refuses, and takes out of the queue, every request still waiting at its deadline; says whether there was one.
fn refuse_past_deadline(queue: &mut Queue, now: Instant) -> bool {
    let before = queue.pending.len();
    queue.pending.retain(|p| {
        let mut p = lock(p);
        if !p.request.waited_past_deadline(p.started.is_some(), now) {
            return true;
        }
        p.result = Some(Err(EmbedError::DeadlineExceeded));
        false
    });
    queue.pending.len() < before
}

/// The order requests are served in, from their `(priority, arrival)`: a lower priority value first, as vLLM and
/// chat requests order them, then the older.
fn service_order(keys: &[(i32, u64)]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| keys[i]);
    order
}

/// A request's output once all its inputs are encoded: truncated to `dimensions` and normalized as asked (scores
/// as they are).
fn complete(p: &mut Pending) -> EmbedOutput {
    let finished = Instant::now();
    let width = p.width;
    let ranks = p.request.pooling == Some(Pooling::Rank);
    let dims = p.request.dimensions.unwrap_or(width);
    let n = p.request.inputs.len();
    let mut vectors = Vec::with_capacity(n * dims);
    for row in p.vectors.chunks_exact(width) {
        let start = vectors.len();
        vectors.extend_from_slice(&row[..dims]);
        if p.request.normalize && !ranks {
            normalize(&mut vectors[start..]);
        }
    }
    let started = p.started.unwrap_or(finished);
    EmbedOutput {
        dimensions: dims,
        vectors,
        input_tokens: p.request.inputs.iter().map(Vec::len).collect(),
        timing: EmbedTiming {
            queue_time: started.saturating_duration_since(p.submitted).as_secs_f64(),
            time_to_vectors: finished.saturating_duration_since(p.submitted).as_secs_f64(),
            compute_time: finished.saturating_duration_since(started).as_secs_f64(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::service_order;

    #[test]
    fn a_lower_priority_value_is_served_first_then_the_older() {
        // (priority, arrival)
        assert_eq!(service_order(&[(0, 0), (-5, 1), (3, 2), (0, 3), (-5, 4)]), [1, 4, 0, 3, 2]);
        assert_eq!(service_order(&[]), Vec::<usize>::new());
    }
}
