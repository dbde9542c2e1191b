package main

// CORS (cors.go): preflights, the headers of actual answers, origins allowed, refused and any.

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

const allowedOrigin = "https://app.example"

// preflightHeaders are what a browser sends before an SDK's POST with a key.
var preflightHeaders = []string{"Access-Control-Request-Method", "POST",
	"Access-Control-Request-Headers", "authorization,content-type,x-stainless-os,anthropic-version"}

// vary is every name a response's Vary headers list.
func vary(h http.Header) []string {
	var names []string
	for _, value := range h.Values("Vary") {
		for _, name := range strings.Split(value, ",") {
			names = append(names, strings.TrimSpace(name))
		}
	}
	return names
}

func TestCORSPreflightAndActualAnswers(t *testing.T) {
	ts := startOperatedGateway(t, func(s *server) {
		s.keys = twoKeys(t)
		var err error
		if s.cors, err = newCORSPolicy([]string{allowedOrigin, "http://localhost:3000"}); err != nil {
			t.Fatal(err)
		}
	})

	// A preflight from an allowed origin: 204 with the CORS answer, and no key asked for (it carries none).
	resp, body := send(t, http.MethodOptions, ts.URL+"/v1/chat/completions", "",
		append([]string{"Origin", allowedOrigin}, preflightHeaders...)...)
	h := resp.Header
	if resp.StatusCode != http.StatusNoContent || len(body) != 0 {
		t.Fatalf("preflight: %d %s", resp.StatusCode, body)
	}
	for name, want := range map[string]string{
		"Access-Control-Allow-Origin":  allowedOrigin,
		"Access-Control-Allow-Methods": "GET, POST, OPTIONS",
		"Access-Control-Allow-Headers": "authorization,content-type,x-stainless-os,anthropic-version",
		"Access-Control-Max-Age":       corsMaxAge,
	} {
		if got := h.Get(name); got != want {
			t.Errorf("preflight %s: %q, want %q", name, got, want)
		}
	}
	if !slices.Contains(vary(h), "Origin") {
		t.Errorf("preflight Vary %q", h.Values("Vary"))
	}

	// A preflight from another origin: no CORS header (the browser then stops there); OPTIONS is not served.
	resp, _ = send(t, http.MethodOptions, ts.URL+"/v1/chat/completions", "",
		append([]string{"Origin", "https://evil.example"}, preflightHeaders...)...)
	if resp.StatusCode != http.StatusMethodNotAllowed || corsHeaders(resp.Header) != nil {
		t.Errorf("preflight from another origin: %d, CORS headers %v", resp.StatusCode, corsHeaders(resp.Header))
	}

	// Actual answers to an allowed origin carry the origin and the gateway's headers a script may read: a
	// completion with its metrics headers, and a 401 (so that the page can tell a bad key from a network error).
	resp, body = send(t, http.MethodPost, ts.URL+"/v1/completions",
		`{"prompt": "The sky is", "max_tokens": 2, "temperature": 0}`,
		"Origin", "http://localhost:3000", "x-api-key", "key-from-flag")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("completion from an allowed origin: %d %s", resp.StatusCode, body)
	}
	exposed := strings.Split(resp.Header.Get("Access-Control-Expose-Headers"), ", ")
	for _, name := range append([]string{"X-Request-Id", "Server-Timing", "Retry-After"}, metricsHeaderNames[:]...) {
		if !slices.Contains(exposed, name) {
			t.Errorf("Access-Control-Expose-Headers %q lacks %s", exposed, name)
		}
	}
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "http://localhost:3000" ||
		!slices.Contains(vary(resp.Header), "Origin") {
		t.Errorf("completion: Access-Control-Allow-Origin %q, Vary %q", got, resp.Header.Values("Vary"))
	}
	resp, _ = send(t, http.MethodGet, ts.URL+"/v1/models", "", "Origin", allowedOrigin)
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Access-Control-Allow-Origin") != allowedOrigin {
		t.Errorf("401 to an allowed origin: %d, headers %v", resp.StatusCode, corsHeaders(resp.Header))
	}

	// Another origin, or a request without Origin (not a browser's cross-origin call): no CORS header.
	for _, origin := range []string{"https://evil.example", "https://app.example:8443", ""} {
		resp, _ = send(t, http.MethodGet, ts.URL+"/health", "", "Origin", origin)
		if resp.StatusCode != http.StatusOK || corsHeaders(resp.Header) != nil {
			t.Errorf("origin %q: %d, CORS headers %v", origin, resp.StatusCode, corsHeaders(resp.Header))
		}
	}
}

func TestCORSAnyOrigin(t *testing.T) {
	ts := startOperatedGateway(t, func(s *server) {
		var err error
		if s.cors, err = newCORSPolicy([]string{"*"}); err != nil {
			t.Fatal(err)
		}
	})
	resp, _ := send(t, http.MethodOptions, ts.URL+"/v1/embeddings", "",
		append([]string{"Origin", "https://anywhere.example"}, preflightHeaders...)...)
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("preflight: %d, headers %v", resp.StatusCode, corsHeaders(resp.Header))
	}
	resp, _ = send(t, http.MethodGet, ts.URL+"/v1/models", "", "Origin", "https://anywhere.example")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Errorf("actual: %d, headers %v", resp.StatusCode, corsHeaders(resp.Header))
	}
	// OPTIONS that is not a preflight (no Access-Control-Request-Method) is not served.
	resp, _ = send(t, http.MethodOptions, ts.URL+"/v1/models", "", "Origin", "https://anywhere.example")
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("OPTIONS without Access-Control-Request-Method: %d", resp.StatusCode)
	}
}

// TestNoCORSWithoutTheFlag: OPTIONS stays a 405, and no answer carries CORS headers.
func TestNoCORSWithoutTheFlag(t *testing.T) {
	resp, _ := send(t, http.MethodOptions, testServer.URL+"/v1/chat/completions", "",
		append([]string{"Origin", allowedOrigin}, preflightHeaders...)...)
	if resp.StatusCode != http.StatusMethodNotAllowed || corsHeaders(resp.Header) != nil {
		t.Errorf("preflight: %d, CORS headers %v", resp.StatusCode, corsHeaders(resp.Header))
	}
	resp, _ = send(t, http.MethodGet, testServer.URL+"/v1/models", "", "Origin", allowedOrigin)
	if corsHeaders(resp.Header) != nil || len(resp.Header.Values("Vary")) != 0 {
		t.Errorf("actual: CORS headers %v, Vary %q", corsHeaders(resp.Header), resp.Header.Values("Vary"))
	}
}

func TestCORSOriginsAreChecked(t *testing.T) {
	for _, origin := range []string{"https://app.example/", "app.example", "https://app.example/chat", ""} {
		if _, err := newCORSPolicy([]string{origin}); err == nil {
			t.Errorf("--cors-origin %q is accepted", origin)
		}
	}
	if c, err := newCORSPolicy(nil); c != nil || err != nil {
		t.Errorf("no origin: %v, %v", c, err)
	}
}

// corsHeaders are a response's Access-Control-* headers; nil when none.
func corsHeaders(h http.Header) http.Header {
	var found http.Header
	for name, values := range h {
		if strings.HasPrefix(name, "Access-Control-") {
			if found == nil {
				found = http.Header{}
			}
			found[name] = values
		}
	}
	return found
}
