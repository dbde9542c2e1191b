package main

// OpenAI error objects (https://platform.openai.com/docs/guides/error-codes): every failure the gateway answers
// is `{"error": {"message", "type", "param", "code"}}` with a fitting HTTP status, so that OpenAI clients raise
// their usual exceptions (400 BadRequestError, 404 NotFoundError, 500 InternalServerError, ...).

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	ember "ember.invalid/ember/bindings/go"
)

// apiError is one error answer: the HTTP status and the OpenAI error body; retryAfter adds `Retry-After: 1`
// (a refusal the client should retry), authenticate `WWW-Authenticate: Bearer` (a 401: how to present a key).
type apiError struct {
	status       int
	body         []byte
	retryAfter   bool
	authenticate bool
}

// errorObject is the body of an OpenAI error, fields in OpenAI's order.
type errorObject struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

// newAPIError builds an answer; param names the request field at fault, "" for none (JSON null).
func newAPIError(status int, errType, message, param string) apiError {
	var e errorObject
	e.Error.Message, e.Error.Type = message, errType
	if param != "" {
		e.Error.Param = &param
	}
	body, _ := json.Marshal(e) // cannot fail: strings only
	return apiError{status: status, body: body}
}

func invalidRequest(message, param string) apiError {
	return newAPIError(http.StatusBadRequest, "invalid_request_error", message, param)
}

func (e apiError) write(w http.ResponseWriter) int {
	if e.retryAfter {
		w.Header().Set("Retry-After", "1")
	}
	if e.authenticate {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	_, _ = w.Write(append(e.body, '\n'))
	return e.status
}

// engineError maps a failure of the binding to an answer.
func engineError(err error) apiError {
	var emberErr *ember.Error
	var failed *ember.RequestFailedError
	switch {
	case errors.As(err, &emberErr) && emberErr.Status == ember.StatusOverloaded:
		// Too many requests wait to start (the engine's max_waiting_requests): nothing was queued. engine_submit's
		// message is the OpenAI body, code "overloaded"; engine_embed's is a sentence, put in such a body.
		if isErrorBody(emberErr.Message) {
			return apiError{status: http.StatusServiceUnavailable, body: []byte(emberErr.Message), retryAfter: true}
		}
		e := newAPIError(http.StatusServiceUnavailable, "server_error", engineMessage(emberErr), "")
		e.body = withCode(e.body, "overloaded")
		e.retryAfter = true
		return e
	case errors.As(err, &emberErr) && emberErr.Status == ember.StatusInvalidRequest:
		// The message is already the OpenAI body (include/ember.h, EMBER_STATUS_INVALID_REQUEST). Its type
		// tells a refused request from an engine that has shut down (docs/protocol.md, "Errors").
		var body errorObject
		if json.Unmarshal([]byte(emberErr.Message), &body) == nil {
			status := http.StatusBadRequest
			if body.Error.Type != "invalid_request_error" {
				status = http.StatusServiceUnavailable
			}
			return apiError{status: status, body: []byte(emberErr.Message)}
		}
		// A sentence: the refusal of a call that an engine serving embeddings only does not serve (or the
		// reverse), or of a token id.
		return invalidRequest(engineMessage(emberErr), "")
	case errors.As(err, &emberErr) && emberErr.Status == ember.StatusTimeout:
		// An embedding or rerank request still waiting at its deadline_ms (engine_embed's EMBER_STATUS_TIMEOUT): the
		// engine gave up on it before any work, so a gateway timeout, code "deadline" as the engine names it.
		e := newAPIError(http.StatusGatewayTimeout, "server_error", engineMessage(emberErr), "")
		e.body = withCode(e.body, "deadline")
		return e
	case errors.As(err, &emberErr) && emberErr.Status == ember.StatusInvalidUTF8:
		return invalidRequest("the request body is not valid UTF-8", "")
	case errors.As(err, &emberErr) && emberErr.Status == ember.StatusInvalidHandle:
		// The engine was closed under the request: the gateway is shutting down.
		return newAPIError(http.StatusServiceUnavailable, "server_error", "the engine has shut down", "")
	case errors.As(err, &failed):
		return newAPIError(http.StatusInternalServerError, "server_error", failed.Message, "")
	}
	return newAPIError(http.StatusInternalServerError, "server_error", err.Error(), "")
}

// isErrorBody says whether an engine message is an OpenAI error body (engine_submit's refusals) rather than a
// sentence (the other calls').
func isErrorBody(message string) bool {
	var body errorObject
	return json.Unmarshal([]byte(message), &body) == nil && body.Error.Message != ""
}

// engineMessage is an engine error's sentence without the C function's name that starts it
// ("engine_embed: dimensions: ..." becomes "dimensions: ..."): HTTP clients call routes, not functions.
func engineMessage(e *ember.Error) string {
	return strings.TrimPrefix(e.Message, e.Op+": ")
}

// withCode sets the `code` of an OpenAI error body.
func withCode(body []byte, code string) []byte {
	var e errorObject
	if json.Unmarshal(body, &e) != nil {
		return body
	}
	e.Error.Code = &code
	out, _ := json.Marshal(e) // cannot fail: strings only
	return out
}
