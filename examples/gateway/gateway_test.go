package main

// The gateway's HTTP behaviour over the real model (EMBER_MODEL, else the repository's models/ file), with
// net/http/httptest. tests/e2e/test_gateway.py drives the built binary with the official OpenAI client.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	ember "ember.invalid/ember/bindings/go"
)

var (
	testServer *httptest.Server
	// testEngine serves every gateway the tests start (hardening_test.go starts its own, with their limits).
	testEngine *ember.Engine
)

func TestMain(m *testing.M) {
	if args, child := os.LookupEnv(attackChildEnv); child {
		runAttackChild(args) // attack_test.go: this process is a gateway under attack; it never returns
	}
	model := os.Getenv("EMBER_MODEL")
	if model == "" {
		model = filepath.Join("..", "..", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
	}
	engine, err := ember.NewEngine(ember.Config{Model: model, Threads: 2, EnablePerRequestMetrics: true,
		ServedModelName: "test-model", MetricsVLLMNames: true})
	if err != nil {
		println(err.Error(), "- run scripts/fetch-model.sh or set EMBER_MODEL")
		os.Exit(1)
	}
	testEngine = engine
	l := defaultLimits()
	l.maxBodyBytes = 4096
	s := newServer(engine, "test-model", true, l)
	testServer = httptest.NewServer(s.routes())
	code := m.Run()
	testServer.Close()
	engine.Close()
	stopEncoder()
	os.Exit(code)
}

func post(t *testing.T, path, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(testServer.URL+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// openAIError reads an error answer and checks its shape.
func openAIError(t *testing.T, resp *http.Response, status int) errorObject {
	t.Helper()
	var e errorObject
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("error body: %v", err)
	}
	if resp.StatusCode != status || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("status %d, body %+v; want %d with an OpenAI error", resp.StatusCode, e, status)
	}
	return e
}

func TestRefusalsAreOpenAIErrors(t *testing.T) {
	cases := []struct {
		path, body string
		status     int
		param      string
	}{
		{"/v1/chat/completions", `{"messages": [`, 400, ""},
		{"/v1/chat/completions", `[1, 2]`, 400, ""},
		{"/v1/chat/completions", `{"prompt": "hi"}`, 400, "messages"},
		{"/v1/completions", `{"messages": [{"role": "user", "content": "hi"}]}`, 400, "prompt"},
		{"/v1/completions", `{"prompt": "hi", "temperature": 9}`, 400, "temperature"},
		{"/v1/completions", `{"prompt": "hi", "stream": "yes"}`, 400, "stream"},
		{"/v1/completions", `{"prompt": "` + strings.Repeat("a", 5000) + `"}`, 413, ""},
		{"/v1/nothing", `{}`, 404, ""},
	}
	for _, c := range cases {
		e := openAIError(t, post(t, c.path, c.body), c.status)
		if got := e.Error.Param; (got == nil) != (c.param == "") || (got != nil && *got != c.param) {
			t.Errorf("%s %.40s: param %v, want %q", c.path, c.body, got, c.param)
		}
	}
	resp, err := http.Get(testServer.URL + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	openAIError(t, resp, http.StatusMethodNotAllowed)
	if resp.Header.Get("Allow") != http.MethodPost {
		t.Errorf("Allow: %q", resp.Header.Get("Allow"))
	}
}

func TestMetricsHeadersOnlyForOneChoice(t *testing.T) {
	resp := post(t, "/v1/completions", `{"prompt": "The sky is", "max_tokens": 3, "temperature": 0}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for _, name := range metricsHeaderNames {
		if resp.Header.Get(name) == "" {
			t.Errorf("no %s header", name)
		}
	}
	// Server-Timing: the four entries, in order, each a duration in milliseconds that agrees with its X-Ember
	// header (same metric, same formatting).
	entries := strings.Split(resp.Header.Get("Server-Timing"), ", ")
	names := []string{"queue", "ttft", "gen", "e2e"}
	if len(entries) != len(names) {
		t.Fatalf("Server-Timing %q: want %v", resp.Header.Get("Server-Timing"), names)
	}
	for i, entry := range entries {
		name, dur, ok := strings.Cut(entry, ";dur=")
		if _, err := strconv.ParseFloat(dur, 64); !ok || name != names[i] || err != nil {
			t.Errorf("Server-Timing entry %q: want %s;dur=<ms>", entry, names[i])
		}
	}
	same := map[string]string{"queue": metricsHeaderNames[0], "ttft": metricsHeaderNames[1],
		"gen": metricsHeaderNames[2]}
	for _, entry := range entries[:3] {
		name, dur, _ := strings.Cut(entry, ";dur=")
		if header := resp.Header.Get(same[name]); header != dur {
			t.Errorf("Server-Timing %s %s, %s %s", name, dur, same[name], header)
		}
	}
	resp = post(t, "/v1/completions", `{"prompt": "The sky is", "max_tokens": 3, "n": 2, "temperature": 0}`)
	for _, name := range append(metricsHeaderNames[:], "Server-Timing") {
		if resp.Header.Get(name) != "" {
			t.Errorf("%s on a two-choice response", name)
		}
	}
}

func TestServerTimingLeavesAbsentMetricsOut(t *testing.T) {
	ms := func(x float64) *float64 { return &x }
	cases := []struct {
		m    ember.TimingMetrics
		e2e  *float64
		want string
	}{
		{ember.TimingMetrics{}, nil, ""},
		{ember.TimingMetrics{QueueTimeMs: ms(0.05)}, nil, "queue;dur=0.050"},
		{ember.TimingMetrics{QueueTimeMs: ms(0.05), TimeToFirstTokenMs: ms(21.4), GenerationTimeMs: ms(0),
			MeanITLMs: ms(9)}, ms(45.25), "queue;dur=0.050, ttft;dur=21.400, gen;dur=0.000, e2e;dur=45.250"},
		// Cancelled before scheduling: no queue time, but an end.
		{ember.TimingMetrics{}, ms(3), "e2e;dur=3.000"},
	}
	for _, c := range cases {
		if got := serverTiming(c.m, c.e2e); got != c.want {
			t.Errorf("serverTiming(%+v, %v) = %q, want %q", c.m, c.e2e, got, c.want)
		}
	}
}

func TestStreamIsServerSentEvents(t *testing.T) {
	resp := post(t, "/v1/chat/completions",
		`{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3, "temperature": 0, "stream": true}`)
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	var events []string
	scanner := bufio.NewScanner(resp.Body)
	for scanner.Scan() {
		line := scanner.Text()
		if line == "" {
			continue // the blank line that ends each event
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("line %q is not a data line", line)
		}
		events = append(events, data)
	}
	if len(events) < 3 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events %q: want chunks then [DONE]", events)
	}
	for _, data := range events[:len(events)-1] {
		if !json.Valid([]byte(data)) {
			t.Errorf("event %q is not JSON", data)
		}
	}
	if resp.Header.Get(metricsHeaderNames[0]) != "" || resp.Header.Get("Server-Timing") != "" {
		t.Error("a streaming response carries metrics headers")
	}
}

// TestStreamCarriesPromptProgress: `return_progress` (llama-server's field) passes through to the engine, whose
// progress chunks the SSE stream carries first, each with llama-server's `prompt_progress` object.
func TestStreamCarriesPromptProgress(t *testing.T) {
	resp := post(t, "/v1/completions", `{"prompt": "The days of the week are Monday, Tuesday, Wednesday,",
		"max_tokens": 3, "temperature": 0, "stream": true, "return_progress": true}`)
	progress, others := 0, 0
	scanner := bufio.NewScanner(resp.Body)
	for scanner.Scan() {
		data, ok := strings.CutPrefix(scanner.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Progress *struct {
				Total     *int `json:"total"`
				Cache     *int `json:"cache"`
				Processed *int `json:"processed"`
				TimeMs    *int `json:"time_ms"`
			} `json:"prompt_progress"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		p := chunk.Progress
		switch {
		case p == nil:
			others++
		case others > 0 || p.Total == nil || p.Cache == nil || p.Processed == nil || p.TimeMs == nil:
			t.Errorf("a progress chunk after the text, or without llama-server's four fields: %s", data)
		default:
			progress++
			if *p.Processed > *p.Total {
				t.Errorf("processed past the prompt: %s", data)
			}
		}
	}
	if progress < 2 || others == 0 {
		t.Errorf("%d progress chunks then %d others: want the admission and a chunk, then the stream", progress, others)
	}
}

// /metrics has the gateway's counters, then the engine's metrics (their content is the engine's tests' subject:
// tests/engine_prometheus.rs, and tests/e2e/test_gateway.py parses the whole text with the official parser).
func TestMetricsCountRequestsAndServeTheEngines(t *testing.T) {
	post(t, "/v1/completions", `{"prompt": "One, two,", "max_tokens": 4, "temperature": 0, "ignore_eos": true}`)
	resp, err := http.Get(testServer.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`ember_gateway_requests_total{model_name="test-model",endpoint="completions",code="200"}`,
		`ember_gateway_requests_in_flight{model_name="test-model"} 0`,
		`ember_time_to_first_token_seconds_count{model_name="test-model"}`,
		`ember_inter_token_latency_seconds_count{model_name="test-model"}`,
		`ember_request_queue_time_seconds_count{model_name="test-model"}`,
		`ember_e2e_request_latency_seconds_count{model_name="test-model"}`,
		`ember_request_success_total{model_name="test-model",finished_reason="length"}`,
		`vllm:num_requests_waiting{model_name="test-model"} 0`,
	} {
		if !strings.Contains(string(text), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(string(text), `inter_token_latency_seconds_count{model_name="test-model"} 0`+"\n") {
		t.Error("no inter-token latency observed after a 4-token request")
	}
}

// The engine's backpressure reaches the client as 503 with Retry-After and the engine's OpenAI body; a client's
// timeout header becomes the request's deadline (finish_reason "deadline").
func TestOverloadIs503AndAClientTimeoutIsADeadline(t *testing.T) {
	model := os.Getenv("EMBER_MODEL")
	if model == "" {
		model = filepath.Join("..", "..", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
	}
	engine, err := ember.NewEngine(ember.Config{Model: model, Threads: 2, MaxNumSeqs: 1, MaxWaitingRequests: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	server := httptest.NewServer(newServer(engine, "test-model", false, defaultLimits()).routes())
	defer server.Close()
	// One request holds the one seat (its first chunk says so), a second waits.
	running, err := engine.SubmitStream(context.Background(),
		[]byte(`{"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": true, "stream": true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer running.Close()
	if _, err := running.NextChunk(); err != nil {
		t.Fatal(err)
	}
	waiting, err := engine.Submit(context.Background(), []byte(`{"prompt": "Hi", "max_tokens": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	defer waiting.Close()
	resp, err := http.Post(server.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt": "Hello", "max_tokens": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	e := openAIError(t, resp, http.StatusServiceUnavailable)
	if e.Error.Code == nil || *e.Error.Code != "overloaded" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("code %v, Retry-After %q", e.Error.Code, resp.Header.Get("Retry-After"))
	}
	waiting.Cancel()
	if err := waiting.Wait(); err != nil {
		t.Fatal(err)
	}

	// The seat is still taken: a request with a 0.05 s client timeout waits, and ends at its deadline.
	req, err := http.NewRequest(http.MethodPost, server.URL+"/v1/completions",
		strings.NewReader(`{"prompt": "Hello", "max_tokens": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(clientTimeoutHeader, "0.05")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK ||
		len(body.Choices) != 1 || body.Choices[0].FinishReason != "deadline" {
		t.Fatalf("status %d, body %+v, %v", resp.StatusCode, body, err)
	}
	if got, apiErr := withClientTimeout([]byte(`{"prompt": "x"}`), "soon"); got != nil || apiErr == nil {
		t.Fatalf("a header that is not seconds: %s, %v", got, apiErr)
	}
	// The Anthropic SDK's placeholder for a call without a timeout of its own.
	if got, apiErr := withClientTimeout([]byte(`{"prompt": "x"}`), "NOT_GIVEN"); string(got) != `{"prompt": "x"}` ||
		apiErr != nil {
		t.Fatalf("NOT_GIVEN: %s, %v", got, apiErr)
	}
}

// /tokenize counts a prompt's tokens as the completion would bill them, /detokenize gives the text back, and
// /v1/models says how long a request may be.
func TestTokenizeAndDetokenize(t *testing.T) {
	type tokenized struct {
		Count       int      `json:"count"`
		MaxModelLen int      `json:"max_model_len"`
		Tokens      []uint32 `json:"tokens"`
	}
	decode := func(resp *http.Response, into any) {
		t.Helper()
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(resp.Body)
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			t.Fatal(err)
		}
	}
	var models struct {
		Data []struct {
			MaxModelLen int `json:"max_model_len"`
		} `json:"data"`
	}
	resp, err := http.Get(testServer.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	decode(resp, &models)
	if len(models.Data) != 1 || models.Data[0].MaxModelLen <= 0 {
		t.Fatalf("/v1/models: %+v", models)
	}

	for _, c := range []struct{ tokenize, completion string }{
		{`{"prompt": "The sky is"}`, `{"prompt": "The sky is", "max_tokens": 1}`},
		{`{"model": "test-model", "messages": [{"role": "user", "content": "Hi"}]}`,
			`{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}`},
	} {
		var got tokenized
		decode(post(t, "/tokenize", c.tokenize), &got)
		if got.Count != len(got.Tokens) || got.Count == 0 || got.MaxModelLen != models.Data[0].MaxModelLen {
			t.Fatalf("%s: %+v", c.tokenize, got)
		}
		path := "/v1/completions"
		if strings.Contains(c.completion, "messages") {
			path = "/v1/chat/completions"
		}
		var completion struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		decode(post(t, path, c.completion), &completion)
		if completion.Usage.PromptTokens != got.Count {
			t.Errorf("%s: %d tokens, the completion's prompt_tokens %d", c.tokenize, got.Count,
				completion.Usage.PromptTokens)
		}
		ids, _ := json.Marshal(got.Tokens)
		var text struct {
			Prompt string `json:"prompt"`
		}
		decode(post(t, "/detokenize", `{"tokens": `+string(ids)+`}`), &text)
		if !strings.Contains(text.Prompt, "The sky is") && !strings.Contains(text.Prompt, "Hi") {
			t.Errorf("/detokenize %s: %q", ids, text.Prompt)
		}
	}

	// Ids spaced out, and none at all.
	sky, err := testEngine.Tokenize("The sky", false, false)
	if err != nil || len(sky) != 2 {
		t.Fatalf("%v %v", sky, err)
	}
	spaced := fmt.Sprintf(`{"tokens": [ %d ,`+"\n\t"+`%d ] }`, sky[0], sky[1])
	for body, want := range map[string]string{spaced: "The sky", `{"tokens": []}`: ""} {
		var text struct {
			Prompt *string `json:"prompt"`
		}
		decode(post(t, "/detokenize", body), &text)
		if text.Prompt == nil || *text.Prompt != want {
			t.Errorf("/detokenize %s: %v, want %q", body, text.Prompt, want)
		}
	}

	for _, c := range []struct{ path, body, param string }{
		{"/tokenize", `{"prompt": "a", "messages": []}`, "prompt"},
		{"/tokenize", `{}`, "prompt"},
		{"/tokenize", `{"prompt": "a", "return_token_strs": true}`, "return_token_strs"},
		{"/tokenize", `{"messages": [{"role": "user", "content": "a"}], "add_special_tokens": true}`,
			"add_special_tokens"},
		{"/tokenize", `{"messages": [{"role": "user", "content": "a"}], "add_generation_prompt": false}`,
			"add_generation_prompt"},
		{"/tokenize", `{"messages": [{"content": "a"}]}`, "messages[0].role"},
		{"/detokenize", `{"tokens": [1, -2]}`, "tokens[1]"},
		{"/detokenize", `{"tokens": [1.5]}`, "tokens[0]"},
		{"/detokenize", `{"tokens": [1000000000]}`, "tokens"},
		{"/detokenize", `{"tokens": [1, [2]]}`, "tokens[1]"},
		{"/detokenize", `{"tokens": [1, "2"]}`, "tokens[1]"},
		{"/detokenize", `{"tokens": [1e3]}`, "tokens[0]"},
		{"/detokenize", `{"tokens": "1, 2"}`, "tokens"},
		{"/detokenize", `{"tokens": 7}`, "tokens"},
		{"/detokenize", `{}`, "tokens"},
	} {
		e := openAIError(t, post(t, c.path, c.body), http.StatusBadRequest)
		if got := e.Error.Param; (got == nil) != (c.param == "") || (got != nil && *got != c.param) {
			t.Errorf("%s %s: param %v, want %q (%s)", c.path, c.body, got, c.param, e.Error.Message)
		}
	}
}

// Once SIGTERM has started the drain, new work is refused with 503 and Retry-After (another replica takes it) and
// /health answers 503, so that load balancers stop sending.
func TestADrainingGatewayRefusesNewWorkWithRetryAfter(t *testing.T) {
	s := newServer(testEngine, "test-model", false, defaultLimits())
	s.draining.Store(true)
	server := httptest.NewServer(s.routes())
	defer server.Close()
	resp, err := http.Post(server.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt": "Hi", "max_tokens": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(string(body), "shutting down") {
		t.Fatalf("status %d, Retry-After %q, body %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	health, err := http.Get(server.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	health.Body.Close()
	if health.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/health while draining: %d", health.StatusCode)
	}
}
