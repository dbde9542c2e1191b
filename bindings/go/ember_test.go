package ember

// Tests on the real model (SmolLM2-135M-Instruct Q4_1): EMBER_MODEL, else the repository's models/ file. Every
// request is short (a few tokens) and greedy, so the suite is deterministic and runs in seconds on 2 cores.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// shared is one engine for the tests that do not need their own configuration (loading a model costs time).
var shared *Engine

func modelPath() string {
	if path := os.Getenv("EMBER_MODEL"); path != "" {
		return path
	}
	return filepath.Join("..", "..", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
}

func TestMain(m *testing.M) {
	if _, err := os.Stat(modelPath()); err != nil {
		// The same advice as the Rust tests give (ember::model::path::resolve_model_path).
		println("model not found at", modelPath(), "- run scripts/fetch-model.sh or set EMBER_MODEL")
		os.Exit(1)
	}
	engine, err := NewEngine(Config{Model: modelPath(), Threads: 2, EnablePerRequestMetrics: true})
	if err != nil {
		println(err.Error())
		os.Exit(1)
	}
	shared = engine
	code := m.Run()
	engine.Close()
	removeEncoderModel()
	os.Exit(code)
}

// chat is a greedy chat request body.
func chat(content string, maxTokens int, extra string) []byte {
	return []byte(`{"messages": [{"role": "user", "content": "` + content + `"}], "temperature": 0, "max_tokens": ` +
		itoa(maxTokens) + extra + `}`)
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func submit(t *testing.T, e *Engine, ctx context.Context, body []byte) *Request {
	t.Helper()
	req, err := e.Submit(ctx, body)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	t.Cleanup(req.Close)
	return req
}

// submitStream is submit for a request read as chunk bodies (SubmitStream).
func submitStream(t *testing.T, e *Engine, ctx context.Context, body []byte) *Request {
	t.Helper()
	req, err := e.SubmitStream(ctx, body)
	if err != nil {
		t.Fatalf("SubmitStream: %v", err)
	}
	t.Cleanup(req.Close)
	return req
}

type responseBody struct {
	Object  string `json:"object"`
	Choices []struct {
		Message      struct{ Content string } `json:"message"`
		Text         string                   `json:"text"`
		FinishReason string                   `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Metrics *TimingMetrics `json:"metrics"`
}

func decodeBody(t *testing.T, body []byte) responseBody {
	t.Helper()
	var r responseBody
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("response body %s: %v", body, err)
	}
	return r
}

func TestDeltasAddUpToTheResponse(t *testing.T) {
	req := submit(t, shared, context.Background(), chat("What is the capital of France?", 8, ""))
	var text strings.Builder
	tokens, finishes := 0, 0
	for event, err := range req.Events() {
		if err != nil {
			t.Fatalf("Events: %v", err)
		}
		switch event.Kind {
		case EventDelta:
			text.WriteString(event.Text)
			tokens += event.NumTokens
		case EventFinished:
			finishes++
			if event.FinishReason != FinishStop && event.FinishReason != FinishLength {
				t.Errorf("finish reason %v", event.FinishReason)
			}
		}
	}
	if finishes != 1 {
		t.Errorf("%d FINISHED events for one choice, want 1", finishes)
	}
	requireStreamDone(t, req)
	body, err := req.ResponseJSON()
	if err != nil {
		t.Fatal(err)
	}
	r := decodeBody(t, body)
	if r.Object != "chat.completion" || len(r.Choices) != 1 {
		t.Fatalf("unexpected body %s", body)
	}
	if got := r.Choices[0].Message.Content; got != text.String() || got == "" {
		t.Errorf("content %q, deltas %q", got, text.String())
	}
	if r.Usage.CompletionTokens != tokens {
		t.Errorf("completion_tokens %d, deltas cover %d tokens", r.Usage.CompletionTokens, tokens)
	}
}

func TestSeveralChoicesEndTogether(t *testing.T) {
	req := submit(t, shared, context.Background(),
		[]byte(`{"prompt": "Once upon a time", "max_tokens": 3, "n": 2, "temperature": 1, "seed": 7}`))
	var ended []Event
	for event, err := range req.Events() {
		if err != nil {
			t.Fatal(err)
		}
		if event.Kind == EventFinished {
			ended = append(ended, event)
		}
	}
	// One FINISHED per choice, none repeated: the stream ends on engine_poll's STREAM_DONE.
	if len(ended) != 2 || ended[0].Choice == ended[1].Choice || ended[0].FinishReason != FinishLength ||
		ended[1].FinishReason != FinishLength {
		t.Errorf("finish events %+v, want one per choice, both by length", ended)
	}
	requireStreamDone(t, req)
}

// requireStreamDone checks a request whose final event has been read: every later Next answers io.EOF.
func requireStreamDone(t *testing.T, req *Request) {
	t.Helper()
	for i := 0; i < 3; i++ {
		if _, err := req.Next(); err != io.EOF {
			t.Errorf("Next after the end = %v, want io.EOF", err)
		}
	}
}

func TestChunksEndWithUsage(t *testing.T) {
	req := submitStream(t, shared, context.Background(), []byte(`{"prompt": "The sky is", "max_tokens": 4, "temperature": 0, "stream": true,
		"stream_options": {"include_usage": true}, "include_metrics": true}`))
	var chunks []map[string]any
	for chunk, err := range req.Chunks() {
		if err != nil {
			t.Fatal(err)
		}
		var c map[string]any
		if err := json.Unmarshal(chunk, &c); err != nil {
			t.Fatalf("chunk %s: %v", chunk, err)
		}
		chunks = append(chunks, c)
	}
	if len(chunks) < 3 {
		t.Fatalf("%d chunks", len(chunks))
	}
	last := chunks[len(chunks)-1]
	if last["usage"] == nil || len(last["choices"].([]any)) != 0 || last["metrics"] == nil {
		t.Errorf("last chunk %v: want usage, no choices, metrics", last)
	}
	if _, err := req.NextChunk(); err != io.EOF {
		t.Errorf("NextChunk after the end = %v, want io.EOF", err)
	}
}

func TestRefusedRequestCarriesTheOpenAIError(t *testing.T) {
	_, err := shared.Submit(context.Background(),
		[]byte(`{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 5}`))
	var e *Error
	if !errors.As(err, &e) || e.Status != StatusInvalidRequest || e.Op != "engine_submit_with_user_data" {
		t.Fatalf("err = %v, want an *Error with StatusInvalidRequest", err)
	}
	if !errors.Is(err, StatusInvalidRequest) || errors.Is(err, StatusOverloaded) {
		t.Errorf("errors.Is(%v, status) does not test the status it carries", err)
	}
	var body struct {
		Error struct{ Type, Param string } `json:"error"`
	}
	if err := json.Unmarshal([]byte(e.Message), &body); err != nil {
		t.Fatalf("message %q is not JSON: %v", e.Message, err)
	}
	if body.Error.Type != "invalid_request_error" || body.Error.Param != "temperature" {
		t.Errorf("error body %+v", body.Error)
	}

	_, err = shared.Submit(context.Background(), []byte("{\"prompt\": \"a\"}\x00junk"))
	if !errors.As(err, &e) || e.Status != StatusInvalidRequest || !json.Valid([]byte(e.Message)) {
		t.Errorf("a body with a NUL byte: err = %v", err)
	}
}

func TestCancelledContextStopsTheRequest(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	// Without cancellation this would run for minutes.
	req := submit(t, shared, ctx, chat("Tell me a long story.", 4000, `, "ignore_eos": true`))
	for i := 0; i < 2; i++ {
		if event, err := req.Next(); err != nil || event.Kind != EventDelta {
			t.Fatalf("event %d: %+v, %v", i, event, err)
		}
	}
	cancel()
	if _, err := req.Next(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after cancel = %v, want context.Canceled", err)
	}
	// Next returned only once the engine ended the request, so the final body is ready at once.
	body, err := req.ResponseJSON()
	if err != nil {
		t.Fatalf("ResponseJSON right after the cancelled Next: %v", err)
	}
	r := decodeBody(t, body)
	if r.Choices[0].FinishReason != "cancelled" || r.Usage.CompletionTokens >= 4000 {
		t.Errorf("finish %q after %d tokens", r.Choices[0].FinishReason, r.Usage.CompletionTokens)
	}
}

func TestCancelledContextStopsAStream(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	req := submitStream(t, shared, ctx, chat("Tell me a long story.", 4000, `, "ignore_eos": true, "stream": true`))
	if _, err := req.NextChunk(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := req.NextChunk(); !errors.Is(err, context.Canceled) {
		t.Fatalf("NextChunk after cancel = %v, want context.Canceled", err)
	}
	if _, err := req.ResponseJSON(); err != nil {
		t.Errorf("ResponseJSON after the cancelled stream: %v", err)
	}
}

func TestContextEndedBeforeSubmit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := shared.Submit(ctx, chat("Hi", 4, "")); !errors.Is(err, context.Canceled) {
		t.Errorf("Submit with an ended context = %v", err)
	}
}

func TestCancelEndsTheRequestNormally(t *testing.T) {
	req := submit(t, shared, context.Background(), chat("Tell me a long story.", 4000, `, "ignore_eos": true`))
	if _, err := req.Next(); err != nil {
		t.Fatal(err)
	}
	if err := req.Cancel(); err != nil {
		t.Fatal(err)
	}
	var last Event
	for event, err := range req.Events() {
		if err != nil {
			t.Fatal(err)
		}
		last = event
	}
	if last.Kind != EventFinished || last.FinishReason != FinishCancelled {
		t.Errorf("last event %+v, want FINISHED cancelled", last)
	}
	requireStreamDone(t, req)
}

// near says whether two positive quantities agree within a relative tolerance.
func near(a, b, tolerance float64) bool {
	return math.Abs(a-b) <= tolerance*math.Max(math.Abs(a), math.Abs(b))
}

func TestTimingMetricsAreConsistent(t *testing.T) {
	req := submit(t, shared, context.Background(), chat("Name three colors.", 8, `, "ignore_eos": true, "include_metrics": true`))
	if err := req.Wait(); err != nil {
		t.Fatal(err)
	}
	m, err := req.TimingMetrics()
	if err != nil {
		t.Fatal(err)
	}
	if m.TimeToFirstTokenMs == nil || m.GenerationTimeMs == nil || m.QueueTimeMs == nil || m.MeanITLMs == nil ||
		m.TokensPerSecond == nil {
		t.Fatalf("a metric is absent: %+v", m)
	}
	const n = 8 // ignore_eos: exactly max_tokens tokens
	ttft, gen := *m.TimeToFirstTokenMs, *m.GenerationTimeMs
	if ttft < 0 || gen < 0 || *m.QueueTimeMs < 0 {
		t.Errorf("negative interval: %+v", m)
	}
	if !near(*m.MeanITLMs, gen/(n-1), 1e-6) {
		t.Errorf("mean_itl_ms %v, generation_time_ms / (n-1) = %v", *m.MeanITLMs, gen/(n-1))
	}
	if !near(*m.TokensPerSecond, n/((ttft+gen)/1000), 1e-6) {
		t.Errorf("tokens_per_second %v, n / (ttft + generation) = %v", *m.TokensPerSecond, n/((ttft+gen)/1000))
	}
	// The body's metrics (the double gate is open) are the same record.
	body, err := req.ResponseJSON()
	if err != nil {
		t.Fatal(err)
	}
	r := decodeBody(t, body)
	if r.Metrics == nil || r.Metrics.MeanITLMs == nil || !near(*r.Metrics.MeanITLMs, *m.MeanITLMs, 1e-6) {
		t.Errorf("body metrics %+v, C metrics %+v", r.Metrics, m)
	}

	x, err := req.ExtendedMetrics(0)
	if err != nil {
		t.Fatal(err)
	}
	if x.E2ELatencyMs == nil || x.TTFTFromArrivalMs == nil || *x.E2ELatencyMs < *x.TTFTFromArrivalMs {
		t.Errorf("e2e %v, ttft from arrival %v", x.E2ELatencyMs, x.TTFTFromArrivalMs)
	}
	if x.NumPromptTokens == nil || int(*x.NumPromptTokens) != r.Usage.PromptTokens {
		t.Errorf("num_prompt_tokens %v, usage.prompt_tokens %d", x.NumPromptTokens, r.Usage.PromptTokens)
	}
	if x.ITLMaxMs == nil || *x.ITLMaxMs < *m.MeanITLMs {
		t.Errorf("itl_max_ms %v below the mean %v", x.ITLMaxMs, *m.MeanITLMs)
	}

	times, err := req.TokenTimestamps(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(times) != n {
		t.Fatalf("%d token timestamps, want %d", len(times), n)
	}
	for i := 1; i < n; i++ {
		if times[i] < times[i-1] {
			t.Errorf("timestamps go back: %v", times)
		}
	}
	if !near(times[n-1]-times[0], gen, 1e-6) {
		t.Errorf("last - first timestamp %v, generation_time_ms %v", times[n-1]-times[0], gen)
	}

	if _, err := req.ChoiceTimingMetrics(1); !isStatus(err, StatusChoiceOutOfRange) {
		t.Errorf("choice 1 of a one-choice request: %v", err)
	}
	if _, err := req.ExtendedMetrics(-1); !isStatus(err, StatusChoiceOutOfRange) {
		t.Errorf("choice -1: %v", err)
	}
}

func isStatus(err error, status Status) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status
}

func TestMetricsAreAbsentWithoutStats(t *testing.T) {
	engine, err := NewEngine(Config{Model: modelPath(), Threads: 2, DisableLogStats: true})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	req := submit(t, engine, context.Background(), chat("Hi", 3, `, "include_metrics": true`))
	if err := req.Wait(); err != nil {
		t.Fatal(err)
	}
	m, err := req.TimingMetrics()
	if err != nil {
		t.Fatal(err)
	}
	if m != (TimingMetrics{}) {
		t.Errorf("metrics with stats off: %+v, want all nil", m)
	}
	x, err := req.ExtendedMetrics(0)
	if err != nil {
		t.Fatal(err)
	}
	if x != (ExtendedMetrics{}) {
		t.Errorf("extended metrics with stats off: %+v, want all nil", x)
	}
	if times, err := req.TokenTimestamps(0); err != nil || len(times) != 0 {
		t.Errorf("token timestamps with stats off: %v, %v", times, err)
	}
	body, err := req.ResponseJSON()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), `"metrics"`) {
		t.Errorf("body with stats off has metrics: %s", body)
	}
}

func TestBadConfigurations(t *testing.T) {
	_, err := NewEngine(Config{Model: modelPath(), EnablePerRequestMetrics: true, DisableLogStats: true})
	if !isStatus(err, StatusInvalidConfig) || !strings.Contains(err.Error(), "disable_log_stats") {
		t.Errorf("conflicting options: %v", err)
	}
	_, err = NewEngine(Config{Model: filepath.Join(t.TempDir(), "missing.gguf")})
	if !isStatus(err, StatusModelLoadFailed) {
		t.Errorf("missing model: %v", err)
	}
	_, err = NewEngine(Config{Model: modelPath(), Threads: -1})
	if !isStatus(err, StatusInvalidConfig) {
		t.Errorf("negative threads: %v", err)
	}
}

func TestLogLinesReachTheCallback(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	engine, err := NewEngine(Config{Model: modelPath(), Threads: 2, Log: func(level LogLevel, message string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, level.String()+": "+message)
	}})
	if err != nil {
		t.Fatal(err)
	}
	engine.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(lines) == 0 {
		t.Error("no log line from creating an engine")
	}
}

func TestRequestsOutliveTheirEngine(t *testing.T) {
	engine, err := NewEngine(Config{Model: modelPath(), Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	req := submit(t, engine, context.Background(), chat("Tell me a long story.", 4000, `, "ignore_eos": true`))
	if _, err := req.Next(); err != nil {
		t.Fatal(err)
	}
	engine.Close()
	engine.Close() // idempotent
	if _, err := req.Next(); !isStatus(err, StatusInvalidHandle) {
		t.Errorf("Next after the engine closed: %v, want StatusInvalidHandle", err)
	}
	body, err := req.ResponseJSON()
	if err != nil {
		t.Fatalf("ResponseJSON after the engine closed: %v", err)
	}
	if r := decodeBody(t, body); r.Choices[0].FinishReason != "cancelled" {
		t.Errorf("finish reason %q after engine close, want cancelled", r.Choices[0].FinishReason)
	}
	if _, err := engine.Submit(context.Background(), chat("Hi", 2, "")); !isStatus(err, StatusInvalidHandle) {
		t.Errorf("Submit to a closed engine: %v", err)
	}
	req.Close()
	req.Close() // idempotent
	if _, err := req.Next(); err == nil {
		t.Error("Next on a closed request succeeded")
	}
}

func TestConcurrentRequests(t *testing.T) {
	const clients = 8
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	start := time.Now()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := shared.Submit(context.Background(), chat("Count to three.", 4, `, "ignore_eos": true`))
			if err != nil {
				errs <- err
				return
			}
			defer req.Close()
			errs <- req.Wait()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	t.Logf("%d concurrent 4-token requests in %v", clients, time.Since(start))
}

func TestVersionsAgree(t *testing.T) {
	if Version() != HeaderVersion() {
		t.Errorf("library %s, header %s", Version(), HeaderVersion())
	}
}

func TestStatsShowACancelledRequestGone(t *testing.T) {
	engine, err := NewEngine(Config{Model: modelPath(), Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req := submit(t, engine, ctx, chat("Tell me a long story.", 4000, `, "ignore_eos": true`))
	if event, err := req.Next(); err != nil || event.Kind != EventDelta {
		t.Fatalf("first event: %+v, %v", event, err)
	}
	stats, err := engine.Stats()
	if err != nil || stats.Running != 1 || stats.KVBlocksFree >= stats.KVBlocksTotal || stats.Steps == 0 {
		t.Fatalf("while running: %+v, %v", stats, err)
	}
	// Gemma 3 has sliding-window layers, with a pool of their own that the request holds blocks of; SmolLM2 none.
	if gemma := strings.Contains(modelPath(), "gemma"); gemma != (stats.KVWindowBlocksTotal > 0) ||
		gemma && stats.KVWindowBlocksFree >= stats.KVWindowBlocksTotal {
		t.Fatalf("window pool while running: %+v", stats)
	}
	// A model without a window pool caches prefixes (on by default); the request's prompt was looked up.
	if gemma := strings.Contains(modelPath(), "gemma"); gemma != (stats.PrefixCache == nil) ||
		!gemma && (stats.PrefixCache.Queries == 0 || stats.PrefixCache.Hits > stats.PrefixCache.Queries) {
		t.Fatalf("prefix cache while running: %+v", stats)
	}
	if path := stats.CPUKernels; path != "scalar" && path != "avx2" && path != "avx512" && path != "amx" || stats.CPUThreads == 0 {
		t.Fatalf("CPU kernels %q on %d threads", path, stats.CPUThreads)
	}
	cancel()
	if _, err := req.Next(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after cancel = %v", err)
	}
	// The engine ended the request before Next returned: it holds nothing any more.
	stats, err = engine.Stats()
	if err != nil || stats.Running != 0 || stats.Waiting != 0 || stats.KVBlocksFree != stats.KVBlocksTotal ||
		stats.KVWindowBlocksFree != stats.KVWindowBlocksTotal {
		t.Fatalf("after cancel: %+v, %v", stats, err)
	}
	engine.Close()
	if _, err := engine.Stats(); err == nil {
		t.Error("Stats of a closed engine succeeded")
	}
}

// An engine that speculates counts drafts per request and in its stats; a request that opts out has none. The
// same text comes out either way. DraftPolicy "always" verifies every draft: whether one is tried does not depend
// on the step costs the adaptive policy learns from this machine's timing.
func TestSpeculativeDecodingCountsDrafts(t *testing.T) {
	spec := &SpeculativeConfig{NumSpeculativeTokens: 4, DraftPolicy: "always"}
	engine, err := NewEngine(Config{Model: modelPath(), Threads: 2, Speculative: spec})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	body := func(extra string) []byte {
		return []byte(`{"prompt": "one two three four, one two three four, one two three four, one two", ` +
			`"max_tokens": 12, "temperature": 0` + extra + `}`)
	}
	var texts [2]string
	var drafts [2]uint32
	for i, extra := range []string{"", `, "speculative_decoding": false`} {
		req := submit(t, engine, context.Background(), body(extra))
		if err := req.Wait(); err != nil {
			t.Fatal(err)
		}
		x, err := req.ExtendedMetrics(0)
		if err != nil || x.NumDraftTokens == nil || x.NumAcceptedTokens == nil || *x.NumAcceptedTokens > *x.NumDraftTokens {
			t.Fatalf("draft counts %v %v, %v", x.NumDraftTokens, x.NumAcceptedTokens, err)
		}
		drafts[i] = *x.NumDraftTokens
		raw, err := req.ResponseJSON()
		if err != nil {
			t.Fatal(err)
		}
		texts[i] = decodeBody(t, raw).Choices[0].Text
	}
	gemma := strings.Contains(modelPath(), "gemma") // its sliding-window pool rules speculation out
	if (drafts[0] > 0) == gemma || drafts[1] != 0 || texts[0] != texts[1] {
		t.Fatalf("drafts %v, texts %q", drafts, texts)
	}
	stats, err := engine.Stats()
	if err != nil || stats.SpecDecode == nil || stats.SpecDecode.NumDraftTokens != uint64(drafts[0]) {
		t.Fatalf("engine counters %+v, %v", stats.SpecDecode, err)
	}
	if stats, err := shared.Stats(); err != nil || stats.SpecDecode != nil {
		t.Fatalf("an engine without the option reports no counters: %+v, %v", stats.SpecDecode, err)
	}
}

// With one seat and one waiting place, a third Submit fails at once with StatusOverloaded; a waiting request
// past its deadline_ms ends with FinishDeadline.
func TestOverloadedAndDeadline(t *testing.T) {
	engine, err := NewEngine(Config{Model: modelPath(), Threads: 2, MaxNumSeqs: 1, MaxWaitingRequests: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	running := submit(t, engine, context.Background(), chat("Tell me a story.", 4000, `, "ignore_eos": true`))
	if event, err := running.Next(); err != nil || event.Kind != EventDelta {
		t.Fatalf("first event: %+v, %v", event, err)
	}
	waiting := submit(t, engine, context.Background(), chat("Hi", 4, `, "deadline_ms": 20`))
	if _, err := engine.Submit(context.Background(), chat("Hi", 4, "")); !isStatus(err, StatusOverloaded) {
		t.Fatalf("a third request: %v", err)
	}
	var last Event
	for event, err := range waiting.Events() {
		if err != nil {
			t.Fatal(err)
		}
		last = event
	}
	if last.Kind != EventFinished || last.FinishReason != FinishDeadline || last.FinishReason.String() != "deadline" {
		t.Fatalf("last event %+v", last)
	}
	if err := running.Cancel(); err != nil {
		t.Fatal(err)
	}
}

// MetricsText is the engine's Prometheus text: the request just ended is counted in it, labelled with the model's
// name (by default the file's, without .gguf).
func TestMetricsTextCountsEndedRequests(t *testing.T) {
	modelName := strings.TrimSuffix(filepath.Base(modelPath()), ".gguf")
	req := submit(t, shared, context.Background(), chat("Hi", 2, `, "ignore_eos": true`))
	if err := req.Wait(); err != nil {
		t.Fatal(err)
	}
	text, err := shared.MetricsText()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# TYPE ember_time_to_first_token_seconds histogram\n",
		`ember_request_success_total{model_name="` + modelName + `",finished_reason="length"} `} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics text lacks %q", want)
		}
	}
}

// The tokenizer as the engine applies it: a chat's prompt tokens are what the request is billed for, the text
// comes back from its ids, and the model's description says what the engine serves.
func TestTokenizerAndModelInfo(t *testing.T) {
	body := chat("Name a colour.", 1, "")
	prompt, err := shared.ApplyChatTemplate(body)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := shared.Tokenize(prompt.Prompt, true, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) == 0 || !slices.Equal(ids, prompt.TokenIDs) {
		t.Fatalf("Tokenize %v, ApplyChatTemplate %v", ids, prompt.TokenIDs)
	}
	req := submit(t, shared, context.Background(), body)
	if err := req.Wait(); err != nil {
		t.Fatal(err)
	}
	raw, err := req.ResponseJSON()
	if err != nil {
		t.Fatal(err)
	}
	var response responseBody
	if err := json.Unmarshal(raw, &response); err != nil || response.Usage.PromptTokens != len(ids) {
		t.Fatalf("usage.prompt_tokens %d, %d tokens (%v)", response.Usage.PromptTokens, len(ids), err)
	}
	// The text comes back, after the BOS token's text where the model adds one.
	text, err := shared.Detokenize(ids, true)
	if err != nil || !strings.HasSuffix(text, prompt.Prompt) || len(text) > len(prompt.Prompt)+len("<bos>") {
		t.Fatalf("Detokenize: %q, %v; want %q", text, err, prompt.Prompt)
	}
	if empty, err := shared.Tokenize("", false, true); err != nil || len(empty) != 0 {
		t.Fatalf("Tokenize(\"\"): %v, %v", empty, err)
	}
	if _, err := shared.Detokenize([]uint32{1 << 30}, false); !isStatus(err, StatusInvalidArgument) {
		t.Fatalf("an id outside the vocabulary: %v", err)
	}
	// Counting, for this API and another, is the same prompt; a count refuses what a submission refuses.
	for _, api := range []API{APIOpenAI, APIChatCompletions} {
		if n, err := shared.CountPromptTokens(api, body); err != nil || n != len(ids) {
			t.Fatalf("CountPromptTokens(%d): %d, %v; want %d", api, n, err, len(ids))
		}
	}
	messages := []byte(`{"messages": [{"role": "user", "content": "Name a colour."}]}`)
	if n, err := shared.CountPromptTokens(APIAnthropicMessages, messages); err != nil || n != len(ids) {
		t.Fatalf("CountPromptTokens(Messages): %d, %v; want %d", n, err, len(ids))
	}
	if _, err := shared.CountPromptTokens(APIAnthropicMessages, []byte(`{"messages": 3}`)); !isStatus(err,
		StatusInvalidRequest) || !strings.Contains(err.Error(), "messages") {
		t.Fatalf("count of bad messages: %v", err)
	}
	if _, err := shared.CountPromptTokens(API(99), messages); !isStatus(err, StatusInvalidArgument) {
		t.Fatalf("count for an unknown API: %v", err)
	}
	if _, err := shared.CountPromptTokens(APIAnthropicMessages, []byte("{\x00}")); !isStatus(err,
		StatusInvalidRequest) {
		t.Fatalf("count of a body with a NUL byte: %v", err)
	}
	if _, err := shared.ApplyChatTemplate([]byte(`{"messages": 3}`)); !isStatus(err, StatusInvalidRequest) ||
		!strings.Contains(err.Error(), "messages") {
		t.Fatalf("bad messages: %v", err)
	}
	rawInfo, err := shared.ModelInfo()
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Architecture string `json:"architecture"`
		MaxModelLen  int    `json:"max_model_len"`
		VocabSize    int    `json:"vocab_size"`
		// SpecialTokens: "bos", "eos", ... each with its id and text.
		SpecialTokens map[string]struct {
			ID   uint32 `json:"id"`
			Text string `json:"text"`
		} `json:"special_tokens"`
		File struct {
			SHA256 string `json:"sha256"`
		} `json:"file"`
	}
	if err := json.Unmarshal(rawInfo, &info); err != nil || info.Architecture == "" || info.MaxModelLen <= 0 ||
		info.VocabSize <= 0 || len(info.File.SHA256) != 64 {
		t.Fatalf("model info %s (%v)", rawInfo, err)
	}
	// A control token's text is that token with parseSpecial, and plain text (several tokens) without.
	eos := info.SpecialTokens["eos"]
	if special, err := shared.Tokenize(eos.Text, false, true); err != nil || !slices.Equal(special, []uint32{eos.ID}) {
		t.Fatalf("Tokenize(%q, parseSpecial): %v, %v; want [%d]", eos.Text, special, err, eos.ID)
	}
	if plain, err := shared.Tokenize(eos.Text, false, false); err != nil || len(plain) < 2 {
		t.Fatalf("Tokenize(%q) as plain text: %v, %v", eos.Text, plain, err)
	}
}

// TokenBytes gives each token's exact bytes: a text's tokens add up to its bytes, characters split across
// byte-level tokens included (which Detokenize of one token would replace).
func TestTokenBytesAddUpToTheText(t *testing.T) {
	// Rare characters (an alchemical symbol, a hieroglyph, a Cyrillic ornament) that a byte-fallback vocabulary
	// as large as Gemma 3's still spells in bytes, beside common ones a byte-level BPE splits.
	const text = "naïve café ✓ 漢字 \U0001F732\U00013000\ua66e"
	ids, err := shared.Tokenize(text, false, false)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	partial := false
	for _, id := range ids {
		piece, err := shared.TokenBytes(id)
		if err != nil {
			t.Fatalf("TokenBytes(%d): %v", id, err)
		}
		partial = partial || !utf8.Valid(piece)
		all = append(all, piece...)
	}
	if string(all) != text || !partial {
		t.Fatalf("pieces %q (a partial character among them: %v); want %q split inside a character", all, partial, text)
	}
	if _, err := shared.TokenBytes(1 << 30); !isStatus(err, StatusInvalidArgument) {
		t.Fatalf("an id outside the vocabulary: %v", err)
	}
}

// Every tokenizer call on a closed engine is refused as such.
func TestTokenizerOnAClosedEngine(t *testing.T) {
	engine, err := NewEngine(Config{Model: modelPath(), Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	engine.Close()
	if _, err := engine.Tokenize("hi", true, true); !isStatus(err, StatusInvalidHandle) {
		t.Errorf("Tokenize: %v", err)
	}
	if _, err := engine.Detokenize([]uint32{1}, true); !isStatus(err, StatusInvalidHandle) {
		t.Errorf("Detokenize: %v", err)
	}
	if _, err := engine.TokenBytes(1); !isStatus(err, StatusInvalidHandle) {
		t.Errorf("TokenBytes: %v", err)
	}
	if _, err := engine.CountPromptTokens(APIOpenAI, chat("hi", 1, "")); !isStatus(err, StatusInvalidHandle) {
		t.Errorf("CountPromptTokens: %v", err)
	}
	if _, err := engine.ApplyChatTemplate(chat("hi", 1, "")); !isStatus(err, StatusInvalidHandle) {
		t.Errorf("ApplyChatTemplate: %v", err)
	}
	if _, err := engine.ModelInfo(); !isStatus(err, StatusInvalidHandle) {
		t.Errorf("ModelInfo: %v", err)
	}
}

// LoadProgress sees the load rise from 0 to 1, and cancels it by answering false; the load time is in Stats.
func TestLoadProgressAndLoadTime(t *testing.T) {
	var seen []float32
	engine, err := NewEngine(Config{Model: modelPath(), Threads: 2, LoadProgress: func(f float32) bool {
		seen = append(seen, f)
		return true
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	if len(seen) < 2 || seen[0] != 0 || seen[len(seen)-1] != 1 || !slices.IsSorted(seen) {
		t.Fatalf("progress %v", seen)
	}
	if stats, err := engine.Stats(); err != nil || !(stats.ModelLoadTimeMs > 0) {
		t.Fatalf("ModelLoadTimeMs %v, %v", stats.ModelLoadTimeMs, err)
	}
	calls := 0
	_, err = NewEngine(Config{Model: modelPath(), Threads: 2, LoadProgress: func(float32) bool {
		calls++
		return calls < 2
	}})
	if !isStatus(err, StatusLoadCancelled) || calls != 2 {
		t.Fatalf("cancelled at the second report: %v after %d calls", err, calls)
	}
	// A panic in the function cancels the load and reaches NewEngine's caller.
	defer func() {
		if p := recover(); p != "progress bar broke" {
			t.Fatalf("recovered %v", p)
		}
	}()
	_, _ = NewEngine(Config{Model: modelPath(), Threads: 2, LoadProgress: func(float32) bool {
		panic("progress bar broke")
	}})
	t.Fatal("NewEngine returned after its progress function panicked")
}
