package main

// POST /v1/messages (Anthropic's Messages API, engine_submit_api): the engine's message object, its stream as
// named events, refusals in Anthropic's error shape, Anthropic's headers taken, and the access log's line.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// anthropicHeaders are what Anthropic's SDKs send besides the body.
var anthropicHeaders = []string{"Content-Type", "application/json", "anthropic-version", "2023-06-01",
	"x-api-key", "key-from-flag"}

func TestMessagesInAnthropicShape(t *testing.T) {
	url, log, out := startLoggedGateway(t)
	hi := `"messages": [{"role": "user", "content": "Hi"}], "temperature": 0`

	resp, body := send(t, http.MethodPost, url+"/v1/messages", `{"max_tokens": 4, `+hi+`}`, anthropicHeaders...)
	var message struct {
		ID, Type, Role string
		StopReason     string `json:"stop_reason"`
		Content        []struct{ Type, Text string }
		Usage          struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		}
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &message) != nil {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if !strings.HasPrefix(message.ID, "msg_") || message.Type != "message" || message.Role != "assistant" ||
		len(message.Content) != 1 || message.Content[0].Type != "text" || message.StopReason == "" ||
		message.Usage.OutputTokens == 0 {
		t.Errorf("message %s", body)
	}
	if got := resp.Header.Get("X-Request-Id"); got != message.ID {
		t.Errorf("X-Request-Id %q, message id %q", got, message.ID)
	}

	// The stream: each event named after its data's type, from message_start to message_stop.
	resp, body = send(t, http.MethodPost, url+"/v1/messages", `{"max_tokens": 4, "stream": true, `+hi+`}`,
		anthropicHeaders...)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var names []string
	scanner := bufio.NewScanner(bytes.NewReader(body))
	for scanner.Scan() {
		name, ok := strings.CutPrefix(scanner.Text(), "event: ")
		if !ok {
			continue
		}
		scanner.Scan()
		var data struct{ Type string }
		raw, _ := strings.CutPrefix(scanner.Text(), "data: ")
		if json.Unmarshal([]byte(raw), &data) != nil || data.Type != name {
			t.Errorf("event %q with data %q", name, raw)
		}
		names = append(names, name)
	}
	if len(names) < 4 || names[0] != "message_start" || names[len(names)-1] != "message_stop" ||
		names[len(names)-2] != "message_delta" {
		t.Errorf("events %v", names)
	}
	streamID := resp.Header.Get("X-Request-Id")
	if !strings.HasPrefix(streamID, "msg_") {
		t.Errorf("stream X-Request-Id %q: want message_start's message id", streamID)
	}

	// Refusals name Anthropic's fields, in Anthropic's error shape.
	for _, c := range []struct{ body, field string }{
		{`{` + hi + `}`, "max_tokens"},
		{`{"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}`,
			"messages[0].content[0].type"},
	} {
		resp, body := send(t, http.MethodPost, url+"/v1/messages", c.body, anthropicHeaders...)
		var e anthropicError
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Type != "error" ||
			e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, c.field) {
			t.Errorf("%s: %d %s; want a 400 naming %s", c.body, resp.StatusCode, body, c.field)
		}
	}

	lines := logLines(t, log, out)
	if len(lines) != 4 {
		t.Fatalf("%d lines for 4 requests: %v", len(lines), lines)
	}
	whole, stream := lines[0], lines[1]
	checkCommonFields(t, whole, "POST", "messages", "/v1/messages", http.StatusOK)
	// Anthropic's input_tokens leave out what the prefix cache supplied; the log counts the whole prompt.
	if whole["id"] != message.ID || whole["prompt_tokens"] == nil || whole["prompt_tokens"].(float64) <
		float64(message.Usage.InputTokens) || whole["completion_tokens"] != float64(message.Usage.OutputTokens) {
		t.Errorf("line %v for message %+v", whole, message)
	}
	if stream["id"] != streamID || stream["completion_tokens"] == nil {
		t.Errorf("stream line %v", stream)
	}
}
