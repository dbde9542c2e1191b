package main

// POST /v1/embeddings (OpenAI's shape) and POST /api/embed (Ollama's), served by an engine whose model is an
// encoder (bert, nomic-bert: docs/embeddings.md). The first hands the body to the engine as it is (engine_embed
// checks every field) and answers the engine's response body; the second translates Ollama's request into such a
// body, and the vectors back into Ollama's answer. On an engine whose model generates text both are refused (400),
// as the completion endpoints are on an encoder's. docs/go.md ("Routes") documents both. rerank.go serves
// POST /v1/rerank through the same path.

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	ember "ember.invalid/ember/bindings/go"
)

// embedFields are the fields of an embeddings request (docs/embeddings.md): the engine's refusals start with the
// name of the one at fault, which becomes the error's `param`.
var embedFields = map[string]bool{
	"input": true, "model": true, "user": true, "encoding_format": true, "dimensions": true, "pooling": true,
	"normalize": true, "priority": true, "deadline_ms": true, "include_metrics": true,
}

// unknownFieldSuffix ends the engine's refusal of a field that embeddings requests do not have.
const unknownFieldSuffix = ": not a field of an embeddings request"

// embeddings answers POST /v1/embeddings with the engine's response body.
func (s *server) embeddings(w http.ResponseWriter, r *http.Request) int {
	return s.encoderRoute(w, r, s.embed)
}

// encoderRoute answers a route whose body goes to the engine as it is and whose answer is the engine's response
// body (/v1/embeddings, /v1/rerank): work runs the body on the engine (embed, rerank).
func (s *server) encoderRoute(w http.ResponseWriter, r *http.Request,
	work func(*http.Request, []byte, *byteHold) (string, *apiError, bool)) int {
	var hold byteHold
	defer hold.release()
	body, bad := s.readJSONObject(w, r, &hold)
	if bad != nil {
		return bad.write(w)
	}
	response, bad, gone := work(r, body, &hold)
	switch {
	case gone:
		return statusClientClosed
	case bad != nil:
		return bad.write(w)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(response))
	_, _ = w.Write([]byte{'\n'})
	return http.StatusOK
}

// embed runs an embeddings request body on the engine (encoderWork).
func (s *server) embed(r *http.Request, request []byte, hold *byteHold) (response string, bad *apiError, gone bool) {
	return s.encoderWork(r, request, hold, s.engine.Embed, embedError)
}

// encoderWork runs a request body on the engine with call (Embed, RerankJSON), admitted to engine work on its
// bytes (limits.go), and returns the response body; or the answer to give instead (failed maps call's errors);
// or gone: the client left before the engine work began (nothing to answer). The engine call cannot be stopped
// once begun: it waits for the vectors or scores, which takes a fraction of a second for a few inputs, seconds
// for thousands. hold (the body's bytes) is released once the engine is done with them.
func (s *server) encoderWork(r *http.Request, request []byte, hold *byteHold, call func(string) (string, error),
	failed func(error) apiError) (response string, bad *apiError, gone bool) {
	admitted, tooMuch, bad := s.admit(r, int64(len(request)))
	switch {
	case tooMuch:
		return "", s.bodyTooLargeForWork(), false
	case bad != nil:
		return "", bad, false
	}
	defer admitted.done()
	if clientGone(r.Context()) {
		return "", nil, true
	}
	s.metrics.inFlight.Add(1)
	defer s.metrics.inFlight.Add(-1)
	response, err := call(string(request))
	hold.release()
	admitted.work.release()
	if err != nil {
		e := failed(err)
		return "", &e, false
	}
	return response, nil, false
}

// embedError maps a failure of Embed to an answer (encoderError).
func embedError(err error) apiError {
	return encoderError(err, embedParam)
}

// encoderError maps a failure of Embed or RerankJSON to an answer. The engine's refusals of such a request are
// sentences (not OpenAI bodies, as engine_submit's are) that start with the field at fault: 400 with that field,
// as param finds it, as `param`. The others are engineError's (503 with Retry-After when the engine is
// overloaded).
func encoderError(err error, param func(message string) string) apiError {
	var emberErr *ember.Error
	if errors.As(err, &emberErr) && emberErr.Status == ember.StatusInvalidRequest && !isErrorBody(emberErr.Message) {
		message := engineMessage(emberErr)
		return invalidRequest(message, param(message))
	}
	return engineError(err)
}

// embedParam is the embeddings request field an engine refusal names first ("dimensions: ...", "input[3] has
// ...", "foo: not a field of an embeddings request"), "" when it names none.
func embedParam(message string) string {
	return fieldParam(message, embedFields, unknownFieldSuffix)
}

// fieldParam is the field of fields (or, with an index, "input[3]", an item of one) that an engine refusal names
// first, or the unknown field it refuses (a message ending in unknownSuffix); "" when it names none.
func fieldParam(message string, fields map[string]bool, unknownSuffix string) string {
	if field, ok := strings.CutSuffix(message, unknownSuffix); ok && !strings.ContainsAny(field, " :") {
		return field
	}
	end := strings.IndexAny(message, ": ")
	if end <= 0 {
		return ""
	}
	field := message[:end]
	name, _, _ := strings.Cut(field, "[")
	if !fields[name] {
		return ""
	}
	return field
}

// ollamaEmbedFields are the fields of Ollama's POST /api/embed. keep_alive and options have no effect here: the
// model stays loaded for the gateway's life, and none of Ollama's options changes an encoder's vectors.
var ollamaEmbedFields = map[string]bool{
	"model": true, "input": true, "truncate": true, "dimensions": true, "keep_alive": true, "options": true,
}

// ollamaEmbedRequest is what /api/embed reads of its body.
type ollamaEmbedRequest struct {
	Input      json.RawMessage `json:"input"`
	Truncate   json.RawMessage `json:"truncate"`
	Dimensions json.RawMessage `json:"dimensions"`
}

// ollamaEmbedResponse is Ollama's answer: the vectors, and durations in nanoseconds.
type ollamaEmbedResponse struct {
	Model           string      `json:"model"`
	Embeddings      [][]float32 `json:"embeddings"`
	TotalDuration   int64       `json:"total_duration"`
	LoadDuration    int64       `json:"load_duration"`
	PromptEvalCount int         `json:"prompt_eval_count"`
}

// ollamaEmbed answers Ollama's POST /api/embed: `{"model", "input": a string or strings, "truncate",
// "dimensions"}` becomes the embeddings request `{"input": [...], "dimensions"}`, and its vectors Ollama's
// `{"model", "embeddings", "total_duration", "load_duration", "prompt_eval_count"}`. total_duration is the
// request's time in the gateway; load_duration is 0, the model having been loaded when the gateway started. An
// absent or empty input answers no vectors, as Ollama's does (its clients send one to load a model). ember never
// truncates: an input longer than the model's positions is refused (400), whatever `truncate` says. Errors are
// Ollama's `{"error": "message"}`, with the statuses of the OpenAI routes.
func (s *server) ollamaEmbed(w http.ResponseWriter, r *http.Request) int {
	start := time.Now()
	var hold byteHold
	defer hold.release()
	body, bad := s.readFields(w, r, ollamaEmbedFields, &hold)
	if bad != nil {
		return writeOllamaError(w, *bad)
	}
	var req ollamaEmbedRequest
	_ = json.Unmarshal(body, &req) // readFields has parsed it as an object
	inputs, ok := ollamaInputs(req.Input)
	if !ok {
		return writeOllamaError(w, invalidRequest("input: a string or an array of strings", "input"))
	}
	var truncate *bool
	if len(req.Truncate) > 0 && json.Unmarshal(req.Truncate, &truncate) != nil {
		return writeOllamaError(w, invalidRequest("truncate: true or false", "truncate"))
	}
	answer := ollamaEmbedResponse{Model: s.modelID, Embeddings: [][]float32{}}
	if len(inputs) > 0 {
		request := map[string]any{"input": inputs, "encoding_format": "base64"}
		if len(req.Dimensions) > 0 && string(req.Dimensions) != "null" {
			request["dimensions"] = req.Dimensions // the engine checks it
		}
		requestJSON, err := json.Marshal(request)
		if err != nil {
			return writeOllamaError(w, invalidRequest("cannot translate the request: "+err.Error(), ""))
		}
		response, bad, gone := s.embed(r, requestJSON, &hold)
		switch {
		case gone:
			return statusClientClosed
		case bad != nil:
			return writeOllamaError(w, *bad)
		}
		if answer.Embeddings, err = ember.DecodeEmbeddings([]byte(response)); err != nil {
			return writeOllamaError(w, newAPIError(http.StatusInternalServerError, "server_error", err.Error(), ""))
		}
		var usage struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		_ = json.Unmarshal([]byte(response), &usage) // DecodeEmbeddings has parsed it
		answer.PromptEvalCount = usage.Usage.PromptTokens
	}
	answer.TotalDuration = time.Since(start).Nanoseconds()
	return writeJSON(w, http.StatusOK, answer)
}

// ollamaInputs reads Ollama's `input`: a string (none when empty), an array of strings, or nothing.
func ollamaInputs(raw json.RawMessage) ([]string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, true
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		if text == "" {
			return nil, true
		}
		return []string{text}, true
	}
	var texts []string
	if json.Unmarshal(raw, &texts) != nil || texts == nil {
		return nil, false
	}
	return texts, true
}

// writeOllamaError writes an answer in Ollama's error shape, `{"error": "message"}`, with the status (and
// Retry-After) that the OpenAI routes give it.
func writeOllamaError(w http.ResponseWriter, e apiError) int {
	var body errorObject
	message := string(e.body)
	if json.Unmarshal(e.body, &body) == nil && body.Error.Message != "" {
		message = body.Error.Message
	}
	if e.retryAfter {
		w.Header().Set("Retry-After", "1")
	}
	return writeJSON(w, e.status, map[string]string{"error": message})
}
