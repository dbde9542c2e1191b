//! `prompt_progress`, llama-server's object for how far a prompt has been computed (`return_progress`), as ember
//! writes it: in a stream's progress chunks (`chat/stream.rs`) and as the text of the C API's `PROMPT_PROGRESS` events
//! (`ffi/event.rs`). The four fields, their names and their order are llama-server's (`result_prompt_progress`
//! in its `server-task.cpp`), so that a client written for llama-server reads ember's unchanged.

use serde::Serialize;

use super::json::encode;
use crate::engine::PromptProgress;

/// `{"total": …, "cache": …, "processed": …, "time_ms": …}`: integers, `time_ms` in whole milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct PromptProgressJson {
    total: u32,
    cache: u32,
    processed: u32,
    time_ms: u64,
}

impl From<PromptProgress> for PromptProgressJson {
    fn from(p: PromptProgress) -> Self {
        PromptProgressJson { total: p.total, cache: p.cached, processed: p.processed, time_ms: p.time_ms }
    }
}

/// The object's JSON text.
pub fn prompt_progress_json(progress: PromptProgress) -> String {
    encode(&PromptProgressJson::from(progress))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_object_is_llama_servers() {
        let p = PromptProgress { processed: 96, total: 130, cached: 64, time_ms: 12 };
        assert_eq!(prompt_progress_json(p), r#"{"total":130,"cache":64,"processed":96,"time_ms":12}"#);
    }
}
