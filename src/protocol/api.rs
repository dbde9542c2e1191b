//! Which API a request body speaks. OpenAI's Chat Completions and Completions are ember's own shape; the others
//! (OpenAI's Responses, Anthropic's Messages, Ollama's, llama-server's `/completion`) are read into it and their
//! answers written from it (`translate.rs`), so every API has the engine's whole behaviour behind it.

/// An API ember serves. The numbers are the C ABI's `EMBER_API_*` values (`engine_submit_api`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    /// Chat Completions or Completions, by which of `messages` and `prompt` the body has (`engine_submit`).
    OpenAi,
    /// OpenAI's `POST /v1/chat/completions`.
    ChatCompletions,
    /// OpenAI's `POST /v1/completions`.
    Completions,
    /// OpenAI's `POST /v1/responses`.
    Responses,
    /// Anthropic's `POST /v1/messages`.
    AnthropicMessages,
    /// Ollama's `POST /api/chat`.
    OllamaChat,
    /// Ollama's `POST /api/generate`.
    OllamaGenerate,
    /// llama-server's `POST /completion`.
    LlamaCompletion,
}

impl Api {
    /// Every API, in `EMBER_API_*` order.
    pub const ALL: [Api; 8] = [
        Api::OpenAi,
        Api::ChatCompletions,
        Api::Completions,
        Api::Responses,
        Api::AnthropicMessages,
        Api::OllamaChat,
        Api::OllamaGenerate,
        Api::LlamaCompletion,
    ];

    /// The API of an `EMBER_API_*` value; `None` for any other number.
    pub fn from_code(code: u32) -> Option<Api> {
        Api::ALL.get(usize::try_from(code).ok()?).copied()
    }

    /// Its `EMBER_API_*` value.
    pub fn code(self) -> u32 {
        Api::ALL.iter().position(|&a| a == self).unwrap_or(0) as u32
    }

    /// How a host frames this API's streaming chunks on the wire.
    pub fn framing(self) -> StreamFraming {
        match self {
            Api::OpenAi | Api::ChatCompletions | Api::Completions => StreamFraming::SseWithDone,
            Api::Responses | Api::AnthropicMessages => StreamFraming::SseNamedEvents,
            Api::LlamaCompletion => StreamFraming::Sse,
            Api::OllamaChat | Api::OllamaGenerate => StreamFraming::NdJson,
        }
    }
}

/// How the chunks of a stream go on the wire (what `engine_next_chunk_json` leaves to the host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamFraming {
    /// `data: {chunk}\n\n` per chunk, then `data: [DONE]\n\n` (OpenAI's).
    SseWithDone,
    /// `event: {type}\ndata: {chunk}\n\n` per chunk, where `type` is the chunk's `"type"`, its first member
    /// (OpenAI Responses', Anthropic's); nothing after the last.
    SseNamedEvents,
    /// `data: {chunk}\n\n` per chunk, nothing after the last (llama-server's `/completion`).
    Sse,
    /// `{chunk}\n` per chunk (Ollama's `application/x-ndjson`).
    NdJson,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_unknown_codes_are_none() {
        for api in Api::ALL {
            assert_eq!(Api::from_code(api.code()), Some(api));
        }
        assert_eq!(Api::from_code(8), None);
        assert_eq!(Api::from_code(u32::MAX), None);
    }
}
