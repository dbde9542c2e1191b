package main

// POST /v1/messages/count_tokens: the count is the prompt the same Messages request bills, with and without
// tools; refusals and a wrong method are Anthropic errors.

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func TestCountTokensInAnthropicShape(t *testing.T) {
	url := testServer.URL
	tools := `"tools": [{"name": "get_weather", "description": "Weather in a city", "input_schema": {"type": ` +
		`"object", "properties": {"city": {"type": "string"}}}}]`
	conversation := `"system": "Be brief.", "messages": [{"role": "user", "content": "Weather in Oslo?"}]`
	for _, fields := range []string{conversation, conversation + ", " + tools} {
		resp, body := send(t, http.MethodPost, url+"/v1/messages/count_tokens", "{"+fields+"}", anthropicHeaders...)
		var count struct {
			InputTokens *int `json:"input_tokens"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &count) != nil || count.InputTokens == nil {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		resp, body = send(t, http.MethodPost, url+"/v1/messages", `{"max_tokens": 1, `+fields+"}",
			anthropicHeaders...)
		var message struct {
			Usage struct {
				InputTokens int `json:"input_tokens"`
				CacheRead   int `json:"cache_read_input_tokens"`
			}
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &message) != nil {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if billed := message.Usage.InputTokens + message.Usage.CacheRead; billed != *count.InputTokens {
			t.Errorf("counted %d, the message billed %d (%s)", *count.InputTokens, billed, fields)
		}
	}

	for _, c := range []struct {
		method, body, errorType, says string
		status                        int
	}{
		{http.MethodPost, `{"messages": [{"role": "robot", "content": "x"}]}`, "invalid_request_error",
			"messages[0].role", http.StatusBadRequest},
		{http.MethodPost, `{"messages": []`, "invalid_request_error", "JSON", http.StatusBadRequest},
		{http.MethodPost, `{"messages": [{"role": "user", "content": "x"}], "mcp_servers": []}`,
			"invalid_request_error", "mcp_servers", http.StatusBadRequest},
		{http.MethodGet, ``, "invalid_request_error", "POST", http.StatusMethodNotAllowed},
	} {
		resp, body := send(t, c.method, url+"/v1/messages/count_tokens", c.body, anthropicHeaders...)
		var e anthropicError
		if resp.StatusCode != c.status || json.Unmarshal(body, &e) != nil || e.Type != "error" ||
			e.Error.Type != c.errorType || !strings.Contains(e.Error.Message, c.says) {
			t.Errorf("%s %s: %d %s; want %d saying %s", c.method, c.body, resp.StatusCode, body, c.status, c.says)
		}
	}
}
