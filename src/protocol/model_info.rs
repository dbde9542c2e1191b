//! `engine_model_info_json`: what a host needs to know about the model an engine serves, as JSON: its
//! architecture and size, how long a request may be, its vocabulary and special tokens, its chat template (and
//! what ember reads of it: the tool-call format, whether the model thinks), its weight types, the file (size,
//! SHA-256), and what computes it.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::json::encode;
use super::reasoning::thinks;
use super::tools::tool_format::{tool_format, ToolFormat};
use crate::backend::KvCacheTypes;
use crate::engine::embed::Embedder;
use crate::engine::Engine;
use crate::model::gguf::GgufFile;
use crate::model::tokenizer::Tokenizer;
use crate::model::TokenId;

/// The model info of `engine` (the `docs/c_api.md` section "Model and tokenizer" lists the fields).
pub fn model_info_json(engine: &Engine) -> String {
    let model = engine.model();
    let (config, tokenizer, file) = (&model.config, &model.tokenizer, &model.file);
    let (types, parameters) = tensor_types(file);
    let specials = special_tokens(
        tokenizer,
        &[
            ("bos", tokenizer.bos_id()),
            ("eos", tokenizer.eos_id()),
            ("eot", tokenizer.eot_id()),
            ("pad", tokenizer.pad_id()),
            ("unknown", tokenizer.unknown_id()),
        ],
    );
    let backend = match engine.cpu_serving() {
        Some(cpu) => json!({"kind": "cpu", "kernels": cpu.kernels, "threads": cpu.threads}),
        None => json!({"kind": "cuda", "description": engine.backend_description()}),
    };
    let engine_config = engine.config();
    let kv_types = KvCacheTypes { keys: engine_config.kv_cache_type_k, values: engine_config.kv_cache_type_v };
    let kv_cache = json!({
        "type_k": kv_types.keys.name(),
        "type_v": kv_types.values.name(),
        "bytes_per_token": kv_types.bytes_per_position(config.n_layer, config.kv_dim(), config.latent.is_none()),
        "tokens": engine_config.kv_cache_tokens,
    });
    let architecture = file.str("general.architecture").unwrap_or("unknown");
    let info = json!({
        "name": model.name(),
        "serves": "generation",
        "architecture": architecture,
        "parameters": parameters,
        "context_length": config.context_length,
        "max_model_len": engine.max_model_len(),
        "embedding_length": config.n_embd,
        "layers": config.n_layer,
        "heads": config.n_head,
        "kv_heads": config.n_head_kv,
        "vocab_size": tokenizer.vocab_size(),
        "add_bos": tokenizer.add_bos(),
        "special_tokens": specials,
        "end_of_generation_ids": tokenizer.eog_ids(),
        "chat_template": !model.chat_template.is_fallback(),
        "chat_template_source": model.chat_template.source(),
        "tool_call_format": match tool_format(&model.chat_template) {
            ToolFormat::Ember => Some("ember"),
            ToolFormat::Known(name, _) => Some(name),
            ToolFormat::Unknown => None,
        },
        "thinks": thinks(&model.chat_template),
        "tensor_types": types,
        "file": {
            "path": model.path.display().to_string(),
            "size_bytes": file.file_len(),
            "sha256": engine.model_sha256(),
        },
        "backend": backend,
        "kv_cache": kv_cache,
        "max_num_seqs": engine_config.max_num_seqs,
    });
    encode(&info)
}

/// The description of an embedding engine's model (`engine_model_info_json` on an engine that serves embeddings):
/// the fields a generation engine's description shares with it (`name`, `architecture`, `parameters`,
/// `context_length`, `max_model_len`, `embedding_length`, `vocab_size`, `add_bos`, `special_tokens`,
/// `tensor_types`, `file`, `backend`), `serves: "embeddings"`, and what an embedder has of its own: `pooling` (the
/// requests' default) and `classifier_outputs` (a reranker's scores per input; `null` for an embedding model).
pub fn embedder_info_json(embedder: &Embedder) -> String {
    let (shape, tokenizer, file) = (embedder.shape(), embedder.tokenizer(), embedder.file());
    let (types, parameters) = tensor_types(file);
    let specials = special_tokens(
        tokenizer,
        &[
            ("bos", tokenizer.bos_id()),
            ("eos", tokenizer.eos_id()),
            ("sep", tokenizer.sep_id()),
            ("pad", tokenizer.pad_id()),
            ("unknown", tokenizer.unknown_id()),
        ],
    );
    let info = json!({
        "name": embedder.name(),
        "serves": "embeddings",
        "architecture": shape.arch,
        "parameters": parameters,
        "context_length": shape.context_length,
        "max_model_len": shape.context_length.min(embedder.config().max_batch_tokens),
        "embedding_length": shape.n_embd,
        "vocab_size": tokenizer.vocab_size(),
        "add_bos": tokenizer.add_bos(),
        "special_tokens": specials,
        "pooling": shape.pooling.name(),
        "classifier_outputs": shape.rank_outputs,
        "tensor_types": types,
        "file": {
            "path": embedder.path().map(|p| p.display().to_string()),
            "size_bytes": file.file_len(),
            "sha256": embedder.model_sha256(),
        },
        "backend": {"kind": "cpu", "kernels": embedder.kernel_path(), "threads": embedder.config().threads},
    });
    encode(&info)
}

/// The file's tensors counted by weight type, and its parameters (every tensor's elements).
fn tensor_types(file: &GgufFile) -> (BTreeMap<&'static str, usize>, u64) {
    let mut types: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut parameters: u64 = 0;
    for t in file.tensor_infos() {
        *types.entry(t.dtype.name()).or_default() += 1;
        parameters += t.shape.iter().product::<u64>();
    }
    (types, parameters)
}

/// `special_tokens`: each named token the vocabulary has, as `{"id", "text"}`.
fn special_tokens(tokenizer: &Tokenizer, named: &[(&str, Option<TokenId>)]) -> Value {
    let mut specials = Map::new();
    for &(name, id) in named {
        if let Some(id) = id {
            specials.insert(name.to_owned(), json!({"id": id, "text": tokenizer.token_text(id).unwrap_or_default()}));
        }
    }
    Value::Object(specials)
}
