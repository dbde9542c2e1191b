package main

// The access log (accesslog.go): one whole JSON line per request, with the engine's tokens and metrics for a
// completion, streamed or not, and none for a request refused before it ran.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// engineFields are the line's fields of a request that ran on the engine.
var engineFields = []string{"prompt_tokens", "completion_tokens", "time_to_first_token_ms", "generation_time_ms",
	"queue_time_ms", "mean_itl_ms", "tokens_per_second"}

// startLoggedGateway starts a gateway whose access log is a buffer, with the keys of twoKeys.
func startLoggedGateway(t *testing.T) (string, *accessLog, *bytes.Buffer) {
	t.Helper()
	var out bytes.Buffer
	log := &accessLog{out: &out}
	ts := startOperatedGateway(t, func(s *server) {
		s.keys = twoKeys(t)
		s.accessLog = log
	})
	return ts.URL, log, &out
}

// logLines parses the log's lines. A request's line is written before its answer ends, so every answer read
// to its end has its line.
func logLines(t *testing.T, log *accessLog, out *bytes.Buffer) []map[string]any {
	t.Helper()
	log.mu.Lock()
	text := out.String()
	log.mu.Unlock()
	var lines []map[string]any
	for _, line := range strings.SplitAfter(text, "\n") {
		if line == "" {
			continue
		}
		var fields map[string]any
		if !strings.HasSuffix(line, "\n") || json.Unmarshal([]byte(line), &fields) != nil {
			t.Fatalf("log line %q is not one JSON object and a newline", line)
		}
		lines = append(lines, fields)
	}
	return lines
}

// checkCommonFields checks the fields every line has.
func checkCommonFields(t *testing.T, line map[string]any, method, route, path string, status int) {
	t.Helper()
	stamp, _ := line["time"].(string)
	at, err := time.Parse(time.RFC3339, stamp)
	if err != nil || !strings.HasSuffix(stamp, "Z") || len(stamp) != len("2006-01-02T15:04:05.000Z") ||
		at.IsZero() {
		t.Errorf("time %q: want RFC 3339 in UTC with milliseconds", stamp)
	}
	duration, ok := line["duration_ms"].(float64)
	if line["method"] != method || line["route"] != route || line["path"] != path ||
		line["status"] != float64(status) || !ok || duration < 0 || line["remote"] == "" || line["id"] == "" {
		t.Errorf("line %v: want %s %s (%s) %d with a duration, remote and id", line, method, path, route, status)
	}
}

func TestAccessLogLinesOnePerRequest(t *testing.T) {
	url, log, out := startLoggedGateway(t)
	key := []string{"Authorization", "Bearer key-from-flag"}

	// A completion: the engine's id (also X-Request-Id), its tokens and its five metrics.
	resp, body := send(t, http.MethodPost, url+"/v1/chat/completions",
		`{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "ignore_eos": true, "temperature": 0}`,
		key...)
	var completion struct {
		ID    string `json:"id"`
		Usage struct {
			PromptTokens     float64 `json:"prompt_tokens"`
			CompletionTokens float64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &completion) != nil || completion.ID == "" {
		t.Fatalf("completion: %d %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Request-Id"); got != completion.ID {
		t.Errorf("X-Request-Id %q, response id %q", got, completion.ID)
	}

	// A stream: its chunks' id, and the tokens the engine counted although the client asked for no usage.
	resp, body = send(t, http.MethodPost, url+"/v1/completions",
		`{"prompt": "Once upon a time", "max_tokens": 3, "ignore_eos": true, "temperature": 0, "stream": true}`,
		key...)
	streamID := resp.Header.Get("X-Request-Id")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(streamID, "cmpl-") ||
		!strings.Contains(string(body), `"id":"`+streamID+`"`) {
		t.Fatalf("stream: %d, X-Request-Id %q, body %s", resp.StatusCode, streamID, body)
	}

	// Refused before reaching the engine: a 400 and a 401, with the gateway's own ids.
	resp, _ = send(t, http.MethodPost, url+"/v1/chat/completions", `{"prompt": "no messages"}`, key...)
	refusedID := resp.Header.Get("X-Request-Id")
	if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(refusedID, "req-") {
		t.Fatalf("refused: %d, X-Request-Id %q", resp.StatusCode, refusedID)
	}
	resp, _ = send(t, http.MethodPost, url+"/v1/chat/completions", `{}`)
	unauthorizedID := resp.Header.Get("X-Request-Id")
	if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(unauthorizedID, "req-") ||
		unauthorizedID == refusedID {
		t.Fatalf("unauthorized: %d, X-Request-Id %q", resp.StatusCode, unauthorizedID)
	}
	resp, _ = send(t, http.MethodGet, url+"/health", "")
	healthID := resp.Header.Get("X-Request-Id")

	lines := logLines(t, log, out)
	if len(lines) != 5 {
		t.Fatalf("%d lines for 5 requests: %v", len(lines), lines)
	}
	chat, stream, refused, unauthorized, health := lines[0], lines[1], lines[2], lines[3], lines[4]
	checkCommonFields(t, chat, "POST", "chat", "/v1/chat/completions", http.StatusOK)
	checkCommonFields(t, stream, "POST", "completions", "/v1/completions", http.StatusOK)
	checkCommonFields(t, refused, "POST", "chat", "/v1/chat/completions", http.StatusBadRequest)
	checkCommonFields(t, unauthorized, "POST", "chat", "/v1/chat/completions", http.StatusUnauthorized)
	checkCommonFields(t, health, "GET", "health", "/health", http.StatusOK)
	for _, c := range []struct {
		line map[string]any
		id   string
	}{{chat, completion.ID}, {stream, streamID}, {refused, refusedID}, {unauthorized, unauthorizedID},
		{health, healthID}} {
		if c.line["id"] != c.id {
			t.Errorf("line id %v, X-Request-Id %q", c.line["id"], c.id)
		}
	}
	if chat["prompt_tokens"] != completion.Usage.PromptTokens || chat["completion_tokens"] != float64(4) {
		t.Errorf("chat tokens %v/%v, usage %+v", chat["prompt_tokens"], chat["completion_tokens"], completion.Usage)
	}
	if stream["completion_tokens"] != float64(3) || stream["prompt_tokens"] == nil {
		t.Errorf("stream tokens %v/%v", stream["prompt_tokens"], stream["completion_tokens"])
	}
	for _, ran := range []map[string]any{chat, stream} {
		for _, field := range engineFields {
			// Counts and metrics alike: whole thousandths at most (the metrics rounded as the headers are).
			value, ok := ran[field].(float64)
			if !ok || value < 0 || math.Abs(value*1000-math.Round(value*1000)) > 1e-6 {
				t.Errorf("%s line: %s = %v", ran["route"], field, ran[field])
			}
		}
	}
	for _, notRun := range []map[string]any{refused, unauthorized, health} {
		for _, field := range engineFields {
			if _, ok := notRun[field]; ok {
				t.Errorf("%v: %s on a request that did not run", notRun["status"], field)
			}
		}
	}
}

// TestAccessLogLinesAreWhole: concurrent requests' lines never interleave.
func TestAccessLogLinesAreWhole(t *testing.T) {
	url, log, out := startLoggedGateway(t)
	const requests = 32
	var wg sync.WaitGroup
	for i := 0; i < requests; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(url + "/health?probe=" + strings.Repeat("x", 512))
			if err == nil {
				_, _ = bufio.NewReader(resp.Body).WriteTo(&bytes.Buffer{})
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	if lines := logLines(t, log, out); len(lines) != requests {
		t.Errorf("%d lines for %d requests", len(lines), requests)
	}
}

// TestAccessLogFileIsAppendedTo: a restarted gateway continues its log.
func TestAccessLogFileIsAppendedTo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "access.log")
	for i := 0; i < 2; i++ {
		log, err := openAccessLog(path)
		if err != nil {
			t.Fatal(err)
		}
		log.write(&accessRecord{start: time.Now(), id: "req-test", method: "GET", path: "/health"}, "health", 200)
		if err := log.Close(); err != nil {
			t.Fatal(err)
		}
	}
	text, err := os.ReadFile(path)
	if err != nil || strings.Count(string(text), "\n") != 2 {
		t.Errorf("log file %q (%v): want two lines", text, err)
	}
	if log, err := openAccessLog(""); log != nil || err != nil {
		t.Errorf("no --access-log: %v, %v", log, err)
	}
}

// llama-server's /completion, whole and streamed: its answers carry no id, so the line's is the gateway's (also
// X-Request-Id), and its tokens are the final object's tokens_evaluated and tokens_predicted, not a partial's.
func TestAccessLogOfLlamaCompletion(t *testing.T) {
	url, log, out := startLoggedGateway(t)
	key := []string{"Authorization", "Bearer key-from-flag"}
	resp, body := send(t, http.MethodPost, url+"/completion", `{"prompt": "Hi", "n_predict": 3, "temperature": 0}`,
		key...)
	var answer struct {
		TokensEvaluated int `json:"tokens_evaluated"`
		TokensPredicted int `json:"tokens_predicted"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &answer) != nil || answer.TokensPredicted == 0 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	wholeID := resp.Header.Get("X-Request-Id")
	resp, _ = send(t, http.MethodPost, url+"/completion",
		`{"prompt": "Hi", "n_predict": 3, "temperature": 0, "stream": true}`, key...)
	streamID := resp.Header.Get("X-Request-Id")
	lines := logLines(t, log, out)
	if len(lines) != 2 {
		t.Fatalf("%d lines for 2 requests: %v", len(lines), lines)
	}
	for i, id := range []string{wholeID, streamID} {
		line := lines[i]
		checkCommonFields(t, line, "POST", "completion", "/completion", http.StatusOK)
		if !strings.HasPrefix(id, "req-") || line["id"] != id {
			t.Errorf("line %v, X-Request-Id %q", line, id)
		}
		if line["prompt_tokens"] != float64(answer.TokensEvaluated) ||
			line["completion_tokens"] != float64(answer.TokensPredicted) {
			t.Errorf("line %v: want the answer's %d and %d tokens", line, answer.TokensEvaluated,
				answer.TokensPredicted)
		}
	}
}
