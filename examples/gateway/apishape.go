package main

// Which API a route belongs to, for the answers the gateway gives on every route (a refused API key, ...): each
// API's clients read errors in their own shape (the OpenAI SDKs `{"error": {"message", ...}}`, Anthropic's
// `{"type": "error", "error": {"type", "message"}}`, Ollama's `{"error": "message"}`), so an answer given
// before a route's own handler runs must still be in that route's shape.

import (
	"encoding/json"
	"net/http"
	"strings"
)

// apiFamily is the API whose clients call a route.
type apiFamily int

const (
	// apiOpenAI: /v1/* but /v1/messages, and the gateway's own routes (/tokenize, /health, /metrics, ...).
	apiOpenAI apiFamily = iota
	// apiAnthropic: /v1/messages and everything under it (/v1/messages/count_tokens, ...).
	apiAnthropic
	// apiOllama: /api/*.
	apiOllama
)

// apiOfPath says which API a request path belongs to. Paths the gateway does not serve fall to the API their
// prefix names, so that a client calling a route that does not exist still reads the error.
func apiOfPath(path string) apiFamily {
	switch {
	case path == "/v1/messages" || strings.HasPrefix(path, "/v1/messages/"):
		return apiAnthropic
	case path == "/api" || strings.HasPrefix(path, "/api/"):
		return apiOllama
	}
	return apiOpenAI
}

// inShapeOf rewrites an answer built in OpenAI's shape (newAPIError, engineError) into a family's, keeping its
// status and Retry-After.
func inShapeOf(family apiFamily, e apiError) apiError {
	if family == apiOpenAI {
		return e
	}
	var openAI errorObject
	message := string(e.body)
	if json.Unmarshal(e.body, &openAI) == nil && openAI.Error.Message != "" {
		message = openAI.Error.Message
	}
	var body any
	switch family {
	case apiAnthropic:
		// Anthropic's errors have no `param`: its own messages begin with the field's path, and so does this one
		// when the engine's message does not name it already.
		if param := openAI.Error.Param; param != nil && *param != "" && !strings.Contains(message, *param) {
			message = *param + ": " + message
		}
		body = anthropicError{Type: "error", Error: anthropicErrorDetail{Type: anthropicErrorType(e.status),
			Message: message}}
	case apiOllama:
		body = map[string]string{"error": message}
	}
	e.body, _ = json.Marshal(body) // cannot fail: strings only
	return e
}

// anthropicError is the body of an Anthropic API error (https://docs.anthropic.com/en/api/errors).
type anthropicError struct {
	Type  string               `json:"type"`
	Error anthropicErrorDetail `json:"error"`
}

type anthropicErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// anthropicErrorType is the error type Anthropic's API gives with an HTTP status; its SDKs pick their exception
// from the status, the type is for people reading the body.
func anthropicErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}
