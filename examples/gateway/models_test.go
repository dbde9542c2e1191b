package main

// GET /v1/models and GET /v1/models/{id} (server.go).

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

func TestModelByIDIsTheListedModel(t *testing.T) {
	resp, body := send(t, http.MethodGet, testServer.URL+"/v1/models", "")
	var list struct {
		Data []map[string]any `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &list) != nil || len(list.Data) != 1 {
		t.Fatalf("/v1/models: %d %s", resp.StatusCode, body)
	}
	resp, body = send(t, http.MethodGet, testServer.URL+"/v1/models/test-model", "")
	var model map[string]any
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &model) != nil {
		t.Fatalf("/v1/models/test-model: %d %s", resp.StatusCode, body)
	}
	if !reflect.DeepEqual(model, list.Data[0]) || model["max_model_len"] == nil {
		t.Errorf("retrieved %v, listed %v", model, list.Data[0])
	}

	for _, path := range []string{"/v1/models/other-model", "/v1/models/test-model/x", "/v1/models/"} {
		resp, body = send(t, http.MethodGet, testServer.URL+path, "")
		var e errorObject
		if resp.StatusCode != http.StatusNotFound || json.Unmarshal(body, &e) != nil || e.Error.Code == nil ||
			*e.Error.Code != "model_not_found" || e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: %d %s, want a 404 with code model_not_found", path, resp.StatusCode, body)
		}
	}
	if resp, _ = send(t, http.MethodPost, testServer.URL+"/v1/models/test-model", "{}"); resp.StatusCode !=
		http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", resp.StatusCode)
	}
}

// TestModelIDWithASlash: a served name like Hugging Face's org/model is retrieved at its own path.
func TestModelIDWithASlash(t *testing.T) {
	ts := httptest.NewServer(newServer(testEngine, "org/test-model", false, defaultLimits()).routes())
	defer ts.Close()
	resp, body := send(t, http.MethodGet, ts.URL+"/v1/models/org/test-model", "")
	var model map[string]any
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &model) != nil || model["id"] != "org/test-model" {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
}
