package main

// A helper of the tests of routes: one request, with any headers, its answer read whole.

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// send sends a request with headers (name, value, name, value, ...) and returns the answer, body read.
func send(t *testing.T, method, url, body string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, answer
}
