package main

// POST /v1/messages/count_tokens: Anthropic's token counting. The engine reads the body as a Messages request
// (without max_tokens) and counts its prompt as generation would bill it (engine_count_prompt_tokens); nothing
// is generated. Answers `{"input_tokens": N}`, errors in Anthropic's shape. docs/protocol.md, "Counting tokens".

import (
	"encoding/json"
	"net/http"

	ember "ember.invalid/ember/bindings/go"
)

func (s *server) countTokens(w http.ResponseWriter, r *http.Request) int {
	var hold byteHold
	defer hold.release()
	body, bad := s.readJSONObject(w, r, &hold)
	if bad != nil {
		return inShapeOf(apiAnthropic, *bad).write(w)
	}
	// The chat template's render and the tokens are engine work, a multiple of the body's size, as /tokenize's.
	admitted, tooMuch, bad := s.admit(r, int64(len(body)))
	switch {
	case tooMuch:
		return inShapeOf(apiAnthropic, *s.bodyTooLargeForWork()).write(w)
	case bad != nil:
		return inShapeOf(apiAnthropic, *bad).write(w)
	}
	defer admitted.done()
	if clientGone(r.Context()) {
		return statusClientClosed
	}
	tokens, err := s.engine.CountPromptTokens(ember.APIAnthropicMessages, body)
	if err != nil {
		return inShapeOf(apiAnthropic, engineError(err)).write(w)
	}
	answer, _ := json.Marshal(map[string]int{"input_tokens": tokens}) // cannot fail: one integer
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(append(answer, '\n')); err != nil {
		return statusClientClosed
	}
	return http.StatusOK
}
