package main

// How each API's stream goes on the wire. The engine gives a stream as JSON chunks (engine_next_chunk_json); the
// framing around them is the API's: OpenAI's `data: {chunk}` events ending with `data: [DONE]`, the Responses
// and Anthropic APIs' named events (`event: {type}`, the chunk's first member), llama-server's plain `data:`
// events, Ollama's newline-delimited JSON.

import (
	"bytes"
	"encoding/json"
)

type framing int

const (
	sseWithDone framing = iota
	sseNamedEvents
	ssePlain
	ndjson
)

func (f framing) contentType() string {
	if f == ndjson {
		return "application/x-ndjson"
	}
	return "text/event-stream"
}

// frame is one chunk on the wire.
func (f framing) frame(chunk []byte) []byte {
	out := make([]byte, 0, len(chunk)+48)
	switch f {
	case ndjson:
		out = append(out, chunk...)
		return append(out, '\n')
	case sseNamedEvents:
		out = append(out, "event: "...)
		out = append(out, eventType(chunk)...)
		out = append(out, '\n')
	}
	out = append(out, "data: "...)
	out = append(out, chunk...)
	return append(out, "\n\n"...)
}

// end is what follows the last chunk.
func (f framing) end() string {
	if f == sseWithDone {
		return "data: [DONE]\n\n"
	}
	return ""
}

// failure is an error met after the stream's status line was sent, as the API's clients read one mid-stream:
// OpenAI's error body as an event, Anthropic's `error` event, the Responses API's `error` event, Ollama's
// `{"error": ...}` line.
func (f framing) failure(family apiFamily, e apiError) []byte {
	switch {
	case f == sseNamedEvents && family == apiAnthropic:
		return f.frame(inShapeOf(apiAnthropic, e).body)
	case f == sseNamedEvents:
		var openAI errorObject
		_ = json.Unmarshal(e.body, &openAI)
		event, _ := json.Marshal(struct {
			Type    string  `json:"type"`
			Code    *string `json:"code"`
			Message string  `json:"message"`
			Param   *string `json:"param"`
		}{"error", openAI.Error.Code, openAI.Error.Message, openAI.Error.Param})
		return f.frame(event)
	case f == ndjson:
		return f.frame(inShapeOf(apiOllama, e).body)
	}
	return f.frame(e.body)
}

// eventType is a named event's type: the chunk's first member, `{"type":"...",` as the engine writes it.
func eventType(chunk []byte) []byte {
	const prefix = `{"type":"`
	if !bytes.HasPrefix(chunk, []byte(prefix)) {
		return []byte("message")
	}
	rest := chunk[len(prefix):]
	if end := bytes.IndexByte(rest, '"'); end >= 0 {
		return rest[:end]
	}
	return []byte("message")
}
