package main

// Ollama's API besides its generation routes (apis.go: POST /api/chat and /api/generate, which the engine reads
// and answers) and POST /api/embed (embeddings.go): the load call its clients send before using a model, GET
// /api/version, and `/`, which tools probe to find a running Ollama. ollama_models.go describes the model
// (/api/tags, /api/show, /api/ps).

import (
	"encoding/json"
	"net/http"
	"time"

	ember "ember.invalid/ember/bindings/go"
)

// ollamaLoadRequest is what the load call is recognized by: no prompt (/api/generate) or no messages (/api/chat).
type ollamaLoadRequest struct {
	Model     string          `json:"model"`
	Prompt    json.RawMessage `json:"prompt"`
	Messages  json.RawMessage `json:"messages"`
	KeepAlive json.RawMessage `json:"keep_alive"`
}

// ollamaLoad answers Ollama's load call, a request with an empty prompt (/api/generate) or no messages
// (/api/chat), which its clients send to load a model before they use it, and with `keep_alive` 0 to unload it.
// ember's model is loaded for the gateway's life: the answer comes at once, `done` with `done_reason` "load" (or
// "unload", though nothing is unloaded), and nothing is generated. false when body is not a load call.
func (s *server) ollamaLoad(w http.ResponseWriter, kind endpoint, body []byte) (int, bool) {
	var req ollamaLoadRequest
	if json.Unmarshal(body, &req) != nil {
		return 0, false // readBody has parsed it as an object: a field of another type is the engine's to refuse
	}
	switch {
	case kind.api == ember.APIOllamaGenerate && emptyJSON(req.Prompt):
	case kind.api == ember.APIOllamaChat && emptyJSON(req.Messages):
	default:
		return 0, false
	}
	reason := "load"
	if keepAliveZero(req.KeepAlive) {
		reason = "unload"
	}
	model := req.Model
	if model == "" {
		model = s.modelID
	}
	answer := map[string]any{"model": model, "created_at": ollamaTime(time.Now()), "done": true,
		"done_reason": reason}
	if kind.api == ember.APIOllamaChat {
		answer["message"] = map[string]string{"role": "assistant", "content": ""}
	} else {
		answer["response"] = ""
	}
	return writeJSON(w, http.StatusOK, answer), true
}

// emptyJSON says whether a field is absent, null, "" or [].
func emptyJSON(raw json.RawMessage) bool {
	if len(raw) == 0 {
		return true
	}
	var value any
	if json.Unmarshal(raw, &value) != nil {
		return false
	}
	switch v := value.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	}
	return false
}

// keepAliveZero says whether `keep_alive` is 0: a number, or a duration string ("0", "0s", "0m").
func keepAliveZero(raw json.RawMessage) bool {
	var seconds float64
	if json.Unmarshal(raw, &seconds) == nil {
		return seconds == 0
	}
	var text string
	if json.Unmarshal(raw, &text) != nil {
		return false
	}
	if text == "0" {
		return true
	}
	d, err := time.ParseDuration(text)
	return err == nil && d == 0
}

// ollamaTime is a time as Ollama writes one (Go's RFC 3339 with nanoseconds, UTC).
func ollamaTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}

// ollamaVersion answers GET /api/version with ember's version: the version of the server, as Ollama's answers
// its own.
func (s *server) ollamaVersion(w http.ResponseWriter, _ *http.Request) int {
	return writeJSON(w, http.StatusOK, map[string]string{"version": ember.Version()})
}

// ollamaRoot answers GET and HEAD / as Ollama does ("Ollama is running"), which tools probe before they call
// its API; another method is a 405.
func (s *server) ollamaRoot(w http.ResponseWriter, r *http.Request) int {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		return newAPIError(http.StatusMethodNotAllowed, "invalid_request_error",
			r.Method+" is not allowed here; use GET", "").write(w)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write([]byte("Ollama is running"))
	}
	return http.StatusOK
}
