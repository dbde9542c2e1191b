package main

// The generation routes of the APIs besides OpenAI's Chat Completions and Completions: the engine reads each
// body into its one request core and answers in the API's shape (engine_submit_api); the gateway frames the
// answer (framing.go) and gives errors in the API's shape (apishape.go).

import ember "ember.invalid/ember/bindings/go"

var endpointResponses = endpoint{name: "responses", api: ember.APIResponses, family: apiOpenAI,
	framing: sseNamedEvents}

// endpointMessages is Anthropic's Messages API. Anthropic's clients also send `x-api-key` (read by --api-key,
// auth.go) and `anthropic-version`, which needs nothing: ember serves one version of the API.
var endpointMessages = endpoint{name: "messages", api: ember.APIAnthropicMessages, family: apiAnthropic,
	framing: sseNamedEvents}

// Ollama's generation routes stream unless the body says `"stream": false`, as NDJSON; the empty requests its
// clients send to load a model are answered by the gateway (ollama.go).
var (
	endpointOllamaChat = endpoint{name: "api_chat", api: ember.APIOllamaChat, family: apiOllama, framing: ndjson,
		streamByDefault: true}
	endpointOllamaGenerate = endpoint{name: "api_generate", api: ember.APIOllamaGenerate, family: apiOllama,
		framing: ndjson, streamByDefault: true}
)
