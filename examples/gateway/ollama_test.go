package main

// Ollama's routes (apis.go, ollama.go, ollama_models.go) over the real model: NDJSON streams by default, the load
// call, errors in Ollama's shape, the model's descriptions, and `/`. tests/e2e/test_gateway_apis.py drives them
// with the official ollama client.

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// ollamaObjects reads an NDJSON answer: one JSON object a line.
func ollamaObjects(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	var objects []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(body), []byte("\n")) {
		var o map[string]any
		if err := json.Unmarshal(line, &o); err != nil {
			t.Fatalf("a line that is not a JSON object: %q (%v)", line, err)
		}
		objects = append(objects, o)
	}
	return objects
}

func TestOllamaGenerationStreamsNDJSONUnlessToldNotTo(t *testing.T) {
	for _, c := range []struct{ path, body, text string }{
		{"/api/chat", `{"model": "m", "messages": [{"role": "user", "content": "hi"}], ` +
			`"options": {"temperature": 0, "num_predict": 6}}`, "message"},
		{"/api/generate", `{"model": "m", "prompt": "hi", "options": {"temperature": 0, "num_predict": 6}}`,
			"response"},
	} {
		resp, body := send(t, http.MethodPost, testServer.URL+c.path, c.body)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
			t.Fatalf("%s: %d %s %s", c.path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
		}
		objects := ollamaObjects(t, body)
		last := objects[len(objects)-1]
		if len(objects) < 2 || last["done"] != true || last["done_reason"] == nil || last["eval_count"] == nil {
			t.Fatalf("%s: %s", c.path, body)
		}
		for _, o := range objects[:len(objects)-1] {
			if o["done"] != false || o[c.text] == nil || o["model"] != "m" {
				t.Errorf("%s: %v", c.path, o)
			}
		}
		whole := strings.Replace(c.body, `"model": "m"`, `"model": "m", "stream": false`, 1)
		resp, body = send(t, http.MethodPost, testServer.URL+c.path, whole)
		var o map[string]any
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" ||
			json.Unmarshal(body, &o) != nil || o["done"] != true {
			t.Errorf("%s, stream false: %d %s", c.path, resp.StatusCode, body)
		}
	}
}

// TestOllamaLoadCall: an empty prompt or no messages loads the model (at once: nothing is generated), keep_alive
// 0 unloads it, as Ollama's clients expect.
func TestOllamaLoadCall(t *testing.T) {
	for _, c := range []struct{ path, body, reason, text string }{
		{"/api/generate", `{"model": "m"}`, "load", "response"},
		{"/api/generate", `{"model": "m", "prompt": "", "stream": false}`, "load", "response"},
		{"/api/chat", `{"model": "m", "messages": []}`, "load", "message"},
		{"/api/chat", `{"model": "m", "keep_alive": 0}`, "unload", "message"},
		{"/api/generate", `{"model": "m", "keep_alive": "0s"}`, "unload", "response"},
	} {
		resp, body := send(t, http.MethodPost, testServer.URL+c.path, c.body)
		var o map[string]any
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &o) != nil || o["done"] != true ||
			o["done_reason"] != c.reason || o[c.text] == nil || o["model"] != "m" {
			t.Errorf("%s %s: %d %s", c.path, c.body, resp.StatusCode, body)
		}
	}
}

func TestOllamaRefusalsAreOllamaErrors(t *testing.T) {
	for _, c := range []struct{ path, body, says string }{
		{"/api/chat", `{"messages": [{"role": "user", "content": "hi"}], "options": {"mirostat": 2}}`,
			"options.mirostat"},
		{"/api/generate", `{"prompt": "hi", "images": ["aGk="]}`, "images"},
		{"/api/generate", `{"prompt": "hi", "frobnicate": true}`, "frobnicate"},
		{"/api/chat", `not json`, "not valid JSON"},
	} {
		resp, body := send(t, http.MethodPost, testServer.URL+c.path, c.body)
		var e map[string]string
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(body, &e) != nil ||
			!strings.Contains(e["error"], c.says) {
			t.Errorf("%s %s: %d %s, want a 400 {\"error\"} naming %s", c.path, c.body, resp.StatusCode, body, c.says)
		}
	}
}

func TestOllamaModelDescriptions(t *testing.T) {
	var tags struct {
		Models []struct {
			Name, Model, Digest string
			Size                int64
			Details             ollamaDetails
		}
	}
	resp, body := send(t, http.MethodGet, testServer.URL+"/api/tags", "")
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &tags) != nil || len(tags.Models) != 1 {
		t.Fatalf("/api/tags: %d %s", resp.StatusCode, body)
	}
	tag := tags.Models[0]
	if tag.Name != "test-model" || tag.Model != "test-model" || len(tag.Digest) != 64 || tag.Size <= 0 ||
		tag.Details.Format != "gguf" || tag.Details.Family != "llama" || tag.Details.QuantizationLevel != "Q4_1" ||
		!strings.HasSuffix(tag.Details.ParameterSize, "M") {
		t.Errorf("/api/tags: %s", body)
	}

	var show struct {
		Template     string
		Details      ollamaDetails
		ModelInfo    map[string]any `json:"model_info"`
		Capabilities []string
	}
	resp, body = send(t, http.MethodPost, testServer.URL+"/api/show", `{"model": "test-model:latest"}`)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &show) != nil {
		t.Fatalf("/api/show: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(show.Template, "<|im_start|>") || show.ModelInfo["general.architecture"] != "llama" ||
		show.ModelInfo["llama.context_length"] == nil || strings.Join(show.Capabilities, ",") != "completion,tools" {
		t.Errorf("/api/show: %s", body)
	}
	resp, body = send(t, http.MethodPost, testServer.URL+"/api/show", `{"model": "llama3.2"}`)
	var e map[string]string
	if resp.StatusCode != http.StatusNotFound || json.Unmarshal(body, &e) != nil ||
		!strings.Contains(e["error"], "not found") {
		t.Errorf("/api/show of another model: %d %s", resp.StatusCode, body)
	}

	var ps struct{ Models []map[string]any }
	resp, body = send(t, http.MethodGet, testServer.URL+"/api/ps", "")
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &ps) != nil || len(ps.Models) != 1 ||
		ps.Models[0]["expires_at"] == nil || ps.Models[0]["context_length"] == nil {
		t.Errorf("/api/ps: %d %s", resp.StatusCode, body)
	}
	var version map[string]string
	resp, body = send(t, http.MethodGet, testServer.URL+"/api/version", "")
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &version) != nil || version["version"] == "" {
		t.Errorf("/api/version: %d %s", resp.StatusCode, body)
	}
}

// TestOllamaRoot: tools probe `/` for a running Ollama; other paths stay 404.
func TestOllamaRoot(t *testing.T) {
	if resp, body := send(t, http.MethodGet, testServer.URL+"/", ""); resp.StatusCode != http.StatusOK ||
		string(body) != "Ollama is running" {
		t.Errorf("GET /: %d %q", resp.StatusCode, body)
	}
	if resp, body := send(t, http.MethodHead, testServer.URL+"/", ""); resp.StatusCode != http.StatusOK ||
		len(body) != 0 {
		t.Errorf("HEAD /: %d %q", resp.StatusCode, body)
	}
	if resp, _ := send(t, http.MethodPost, testServer.URL+"/", "{}"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d", resp.StatusCode)
	}
	if resp, body := send(t, http.MethodGet, testServer.URL+"/nope", ""); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/nope: %d %s", resp.StatusCode, body)
	}
	// Ollama's routes that are not served (model management) and wrong methods answer in Ollama's shape.
	for _, c := range []struct {
		method, path string
		status       int
	}{{http.MethodPost, "/api/pull", http.StatusNotFound}, {http.MethodGet, "/api/chat", http.StatusMethodNotAllowed}} {
		resp, body := send(t, c.method, testServer.URL+c.path, "{}")
		var e map[string]string
		if resp.StatusCode != c.status || json.Unmarshal(body, &e) != nil || e["error"] == "" {
			t.Errorf("%s %s: %d %s", c.method, c.path, resp.StatusCode, body)
		}
	}
}

func TestHumanNumberIsOllamas(t *testing.T) {
	for n, want := range map[uint64]string{134_515_008: "134.52M", 8_030_261_248: "8.0B", 7_000_000_000: "7B",
		22_000_000: "22M", 500_000: "500K", 999: "999"} {
		if got := humanNumber(n); got != want {
			t.Errorf("humanNumber(%d) = %q, want %q", n, got, want)
		}
	}
}
