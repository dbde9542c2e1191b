package main

// API keys (auth.go) and the error shape of each API family (apishape.go), on gateways over the test engine.

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// startOperatedGateway starts a gateway on the test engine, with whatever operate sets of its keys, CORS and
// access log.
func startOperatedGateway(t *testing.T, operate func(*server)) *httptest.Server {
	t.Helper()
	s := newServer(testEngine, "test-model", true, defaultLimits())
	operate(s)
	ts := httptest.NewServer(s.routes())
	t.Cleanup(ts.Close)
	return ts
}

// writeFile writes a file in the test's temporary directory and returns its path.
func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// twoKeys are the keys of the gateways below: one from --api-key, one from --api-key-file.
func twoKeys(t *testing.T) *apiKeys {
	t.Helper()
	file := writeFile(t, "keys", "# the gateway's keys\n\n  key-from-file  \r\n# retired: old-key\n")
	keys, err := loadAPIKeys([]string{"key-from-flag"}, file)
	if err != nil || keys == nil || len(keys.digests) != 2 {
		t.Fatalf("loadAPIKeys: %v, %v", keys, err)
	}
	return keys
}

func TestAPIKeysAreAskedForOnEveryRouteButHealth(t *testing.T) {
	ts := startOperatedGateway(t, func(s *server) { s.keys = twoKeys(t) })
	cases := []struct {
		name    string
		headers []string
		status  int
	}{
		{"no key", nil, http.StatusUnauthorized},
		{"Bearer, the flag's key", []string{"Authorization", "Bearer key-from-flag"}, http.StatusOK},
		{"Bearer, the file's key", []string{"Authorization", "Bearer key-from-file"}, http.StatusOK},
		{"bearer in lower case", []string{"Authorization", "bearer key-from-file"}, http.StatusOK},
		{"x-api-key, the flag's key", []string{"x-api-key", "key-from-flag"}, http.StatusOK},
		{"x-api-key, the file's key", []string{"X-Api-Key", "key-from-file"}, http.StatusOK},
		{"Bearer, a wrong key", []string{"Authorization", "Bearer key-from-flag2"}, http.StatusUnauthorized},
		{"Bearer, a prefix of a key", []string{"Authorization", "Bearer key-from"}, http.StatusUnauthorized},
		{"x-api-key, a wrong key", []string{"x-api-key", "nope"}, http.StatusUnauthorized},
		{"a commented-out key", []string{"x-api-key", "old-key"}, http.StatusUnauthorized},
		{"Basic, not Bearer", []string{"Authorization", "Basic a2V5LWZyb20tZmxhZw=="}, http.StatusUnauthorized},
		{"a wrong Bearer and a right x-api-key",
			[]string{"Authorization", "Bearer proxy-token", "x-api-key", "key-from-flag"}, http.StatusOK},
	}
	for _, c := range cases {
		resp, body := send(t, http.MethodGet, ts.URL+"/v1/models", "", c.headers...)
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d (%s)", c.name, resp.StatusCode, c.status, body)
			continue
		}
		if c.status == http.StatusUnauthorized {
			if got := resp.Header.Get("WWW-Authenticate"); got != "Bearer" {
				t.Errorf("%s: WWW-Authenticate %q", c.name, got)
			}
			var e errorObject
			if json.Unmarshal(body, &e) != nil || e.Error.Code == nil || *e.Error.Code != "invalid_api_key" ||
				e.Error.Type != "invalid_request_error" || e.Error.Param != nil || e.Error.Message == "" {
				t.Errorf("%s: body %s, want an OpenAI error with code invalid_api_key", c.name, body)
			}
		}
	}

	// A request that presents a key reaches its handler, engine work included.
	if resp, body := send(t, http.MethodPost, ts.URL+"/tokenize", `{"prompt": "Hi"}`,
		"Authorization", "Bearer key-from-file"); resp.StatusCode != http.StatusOK {
		t.Errorf("/tokenize with a key: %d %s", resp.StatusCode, body)
	}
	// The health check alone is exempt; its other methods, /metrics and unknown routes are not.
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/health", http.StatusOK},
		{http.MethodPost, "/health", http.StatusUnauthorized},
		{http.MethodGet, "/metrics", http.StatusUnauthorized},
		{http.MethodGet, "/v1/models/test-model", http.StatusUnauthorized},
		{http.MethodPost, "/v1/chat/completions", http.StatusUnauthorized},
		{http.MethodGet, "/no/such/route", http.StatusUnauthorized},
		// No CORS configured: OPTIONS stays the 405 it is without keys, and asks for none.
		{http.MethodOptions, "/v1/chat/completions", http.StatusMethodNotAllowed},
	} {
		if resp, body := send(t, c.method, ts.URL+c.path, ""); resp.StatusCode != c.status {
			t.Errorf("%s %s without a key: %d, want %d (%s)", c.method, c.path, resp.StatusCode, c.status, body)
		}
	}
}

// TestUnauthorizedIsInTheRoutesAPIShape: each SDK reads the 401 of its own routes.
func TestUnauthorizedIsInTheRoutesAPIShape(t *testing.T) {
	ts := startOperatedGateway(t, func(s *server) { s.keys = twoKeys(t) })
	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/tokenize",
		"/v1/rerank", "/v1/messagesx"} {
		resp, body := send(t, http.MethodPost, ts.URL+path, "{}", "x-api-key", "wrong")
		var e errorObject
		if resp.StatusCode != http.StatusUnauthorized || json.Unmarshal(body, &e) != nil || e.Error.Code == nil ||
			*e.Error.Code != "invalid_api_key" {
			t.Errorf("%s: %d %s, want OpenAI's 401", path, resp.StatusCode, body)
		}
	}
	for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
		resp, body := send(t, http.MethodPost, ts.URL+path, "{}", "x-api-key", "wrong")
		var e anthropicError
		if resp.StatusCode != http.StatusUnauthorized || json.Unmarshal(body, &e) != nil || e.Type != "error" ||
			e.Error.Type != "authentication_error" || e.Error.Message == "" {
			t.Errorf("%s: %d %s, want Anthropic's 401", path, resp.StatusCode, body)
		}
	}
	for _, path := range []string{"/api/embed", "/api/chat", "/api/tags"} {
		resp, body := send(t, http.MethodPost, ts.URL+path, "{}")
		var e map[string]any
		decoded := json.Unmarshal(body, &e) == nil
		if message, _ := e["error"].(string); resp.StatusCode != http.StatusUnauthorized || !decoded || len(e) != 1 ||
			message == "" {
			t.Errorf("%s: %d %s, want Ollama's 401", path, resp.StatusCode, body)
		}
		if resp.Header.Get("WWW-Authenticate") != "Bearer" {
			t.Errorf("%s: no WWW-Authenticate", path)
		}
	}
}

func TestAPIOfPath(t *testing.T) {
	for path, want := range map[string]apiFamily{
		"/v1/chat/completions": apiOpenAI, "/v1/models/x": apiOpenAI, "/health": apiOpenAI, "/": apiOpenAI,
		"/v1/messages": apiAnthropic, "/v1/messages/count_tokens": apiAnthropic, "/v1/messages2": apiOpenAI,
		"/api/embed": apiOllama, "/api": apiOllama, "/apis": apiOpenAI,
	} {
		if got := apiOfPath(path); got != want {
			t.Errorf("apiOfPath(%q) = %d, want %d", path, got, want)
		}
	}
}

// TestInShapeOfKeepsStatusAndRetryAfter: a refusal rewritten for another API still says when to retry.
func TestInShapeOfKeepsStatusAndRetryAfter(t *testing.T) {
	overloaded := newAPIError(http.StatusServiceUnavailable, "server_error", "busy", "")
	overloaded.retryAfter = true
	e := inShapeOf(apiAnthropic, overloaded)
	if e.status != http.StatusServiceUnavailable || !e.retryAfter ||
		string(e.body) != `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}` {
		t.Errorf("Anthropic: %d %v %s", e.status, e.retryAfter, e.body)
	}
	if e := inShapeOf(apiOllama, overloaded); string(e.body) != `{"error":"busy"}` || !e.retryAfter {
		t.Errorf("Ollama: %s", e.body)
	}
	if e := inShapeOf(apiOpenAI, overloaded); string(e.body) != string(overloaded.body) {
		t.Errorf("OpenAI: %s", e.body)
	}
	// The field at fault, which Anthropic's shape has no `param` for, begins the message unless it is there.
	refused := invalidRequest("content blocks of type \"image\" are not supported", "messages[0].content[1].type")
	want := `{"type":"error","error":{"type":"invalid_request_error","message":` +
		`"messages[0].content[1].type: content blocks of type \"image\" are not supported"}}`
	if e := inShapeOf(apiAnthropic, refused); string(e.body) != want {
		t.Errorf("Anthropic refusal: %s", e.body)
	}
	named := invalidRequest("max_tokens is required", "max_tokens")
	if e := inShapeOf(apiAnthropic, named); !strings.Contains(string(e.body), `"message":"max_tokens is required"`) {
		t.Errorf("Anthropic refusal naming its field: %s", e.body)
	}
}

func TestAPIKeyFlagsRefuseWhatWouldServeEveryone(t *testing.T) {
	if keys, err := loadAPIKeys(nil, ""); keys != nil || err != nil {
		t.Errorf("no flag: %v, %v; want no keys", keys, err)
	}
	for name, text := range map[string]string{"empty": "", "comments only": "# none yet\n\n   \n"} {
		if _, err := loadAPIKeys(nil, writeFile(t, "keys", text)); err == nil ||
			!strings.Contains(err.Error(), "has no key") {
			t.Errorf("%s key file: %v, want an error", name, err)
		}
	}
	if _, err := loadAPIKeys(nil, filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("a key file that does not exist is accepted")
	}
	if _, err := loadAPIKeys([]string{" "}, ""); err == nil {
		t.Error("an empty --api-key is accepted")
	}
}
