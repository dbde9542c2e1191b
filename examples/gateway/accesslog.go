package main

// The access log (--access-log PATH, or - for stdout): one JSON line per request answered, for whoever bills,
// audits or debugs a deployment without a tracing system. A request that ran on the engine also has its tokens
// and its five timing metrics (docs/per_request_metrics.md), read as the metrics headers read them. The line's
// id is the response's X-Request-Id: the engine's response id (chatcmpl-..., cmpl-..., resp_..., msg_...) for
// a completion, a gateway-generated one otherwise (also for Ollama's and llama-server's answers, which carry no
// id), so a client's answer leads to its line.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	ember "ember.invalid/ember/bindings/go"
)

// accessLog writes the lines. Each line is one Write under the mutex, so lines from concurrent requests never
// interleave, in a file opened for appending or on stdout alike.
type accessLog struct {
	mu  sync.Mutex
	out io.Writer
	// file is what Close closes: nil for stdout.
	file *os.File
	// warned: a failed write is reported once, not once per request.
	warned atomic.Bool
}

// openAccessLog opens --access-log: "" for none (nil), "-" for stdout, else a file appended to (created if
// need be), so that a restarted gateway continues its log.
func openAccessLog(path string) (*accessLog, error) {
	switch path {
	case "":
		return nil, nil
	case "-":
		return &accessLog{out: os.Stdout}, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return &accessLog{out: f, file: f}, nil
}

// Close closes the log's file; nothing for stdout or no log.
func (l *accessLog) Close() error {
	if l == nil || l.file == nil {
		return nil
	}
	return l.file.Close()
}

// accessRecord is what one request's line says, gathered while it is answered. Only its handler's goroutine
// touches it.
type accessRecord struct {
	start  time.Time
	id     string
	method string
	path   string
	remote string
	// ran: the request was submitted to the engine; tokens and metrics are then its own, as far as known.
	ran              bool
	promptTokens     *int
	completionTokens *int
	metrics          ember.TimingMetrics
}

// accessLine is one line of the log, in its field order. The engine's fields are left out for a request that did
// not run on it, and each metric is left out when the engine has not measured it (mean_itl_ms needs two tokens;
// several choices have no one timing).
type accessLine struct {
	Time               string   `json:"time"`
	ID                 string   `json:"id"`
	Method             string   `json:"method"`
	Route              string   `json:"route"`
	Path               string   `json:"path"`
	Status             int      `json:"status"`
	DurationMs         float64  `json:"duration_ms"`
	Remote             string   `json:"remote"`
	PromptTokens       *int     `json:"prompt_tokens,omitempty"`
	CompletionTokens   *int     `json:"completion_tokens,omitempty"`
	TimeToFirstTokenMs *float64 `json:"time_to_first_token_ms,omitempty"`
	GenerationTimeMs   *float64 `json:"generation_time_ms,omitempty"`
	QueueTimeMs        *float64 `json:"queue_time_ms,omitempty"`
	MeanITLMs          *float64 `json:"mean_itl_ms,omitempty"`
	TokensPerSecond    *float64 `json:"tokens_per_second,omitempty"`
}

// begin starts a request's record and sends its gateway-generated id as X-Request-Id, which a handler that learns
// the engine's id replaces before its answer goes (useResponseID); nil without a log.
func (l *accessLog) begin(w http.ResponseWriter, r *http.Request) *accessRecord {
	if l == nil {
		return nil
	}
	record := &accessRecord{start: time.Now(), id: newRequestID(), method: r.Method, path: r.URL.Path,
		remote: r.RemoteAddr}
	w.Header().Set("X-Request-Id", record.id)
	return record
}

// newRequestID is a gateway-generated request id: 96 random bits, as unlikely to repeat across replicas as
// the engine's ids.
func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail on Linux
	return "req-" + hex.EncodeToString(b[:])
}

// write logs a request once it is answered, under the counted route's name (server.go's counted).
func (l *accessLog) write(record *accessRecord, route string, status int) {
	if l == nil || record == nil {
		return
	}
	line := accessLine{
		Time:       record.start.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
		ID:         record.id,
		Method:     record.method,
		Route:      route,
		Path:       record.path,
		Status:     status,
		DurationMs: float64(time.Since(record.start).Microseconds()) / 1000,
		Remote:     record.remote,
	}
	if record.ran {
		m := record.metrics
		line.PromptTokens, line.CompletionTokens = record.promptTokens, record.completionTokens
		line.TimeToFirstTokenMs, line.GenerationTimeMs = thousandths(m.TimeToFirstTokenMs),
			thousandths(m.GenerationTimeMs)
		line.QueueTimeMs, line.MeanITLMs = thousandths(m.QueueTimeMs), thousandths(m.MeanITLMs)
		line.TokensPerSecond = thousandths(m.TokensPerSecond)
	}
	text, err := json.Marshal(line)
	if err != nil {
		return // cannot happen: strings and numbers only, and the metrics are finite
	}
	l.mu.Lock()
	_, err = l.out.Write(append(text, '\n'))
	l.mu.Unlock()
	if err != nil && l.warned.CompareAndSwap(false, true) {
		slog.Warn("access log: cannot write; requests go on unlogged", "error", err)
	}
}

// thousandths rounds a metric to three decimals, as the metrics headers write it: microseconds are as far as the
// engine's clocks mean anything, and the digits beyond would only lengthen every line.
func thousandths(x *float64) *float64 {
	if x == nil {
		return nil
	}
	rounded := math.Round(*x*1000) / 1000
	return &rounded
}

// accessRecordKey is the request context's key for its record.
type accessRecordKey struct{}

func withAccessRecord(ctx context.Context, record *accessRecord) context.Context {
	return context.WithValue(ctx, accessRecordKey{}, record)
}

// accessRecordOf is a request's record; nil without a log (the record's methods then do nothing).
func accessRecordOf(ctx context.Context) *accessRecord {
	record, _ := ctx.Value(accessRecordKey{}).(*accessRecord)
	return record
}

// responseSummary is what the log reads of a completion's response body or of a stream's chunk, in any API's
// shape: a stream's first event nests the object whose id it is (Anthropic's message_start its `message`, the
// Responses API's response.created its `response`).
type responseSummary struct {
	ID      string        `json:"id"`
	Usage   *usageSummary `json:"usage"`
	Message *struct {
		ID string `json:"id"`
	} `json:"message"`
	Response *struct {
		ID string `json:"id"`
	} `json:"response"`
	// Ollama's answers count the tokens in their last object instead.
	PromptEvalCount *int `json:"prompt_eval_count"`
	EvalCount       *int `json:"eval_count"`
	// llama-server's /completion counts them in its final object (`stop` true); a partial object of its stream
	// also has them, counting its own part only.
	TokensEvaluated *int  `json:"tokens_evaluated"`
	TokensPredicted *int  `json:"tokens_predicted"`
	Stop            *bool `json:"stop"`
}

// usageSummary is a body's usage: OpenAI's names, or input and output tokens (Anthropic's and the Responses
// API's), where Anthropic counts the prompt tokens read from a cache apart.
type usageSummary struct {
	PromptTokens         *int `json:"prompt_tokens"`
	CompletionTokens     *int `json:"completion_tokens"`
	InputTokens          *int `json:"input_tokens"`
	OutputTokens         *int `json:"output_tokens"`
	CacheReadInputTokens int  `json:"cache_read_input_tokens"`
}

// id is the response's id, wherever its API puts it.
func (summary responseSummary) id() string {
	switch {
	case summary.ID != "":
		return summary.ID
	case summary.Message != nil:
		return summary.Message.ID
	case summary.Response != nil:
		return summary.Response.ID
	}
	return ""
}

// tokens are the prompt's tokens and the generated ones; false when the usage says neither.
func (u *usageSummary) tokens() (prompt, completion int, ok bool) {
	switch {
	case u == nil:
		return 0, 0, false
	case u.PromptTokens != nil && u.CompletionTokens != nil:
		return *u.PromptTokens, *u.CompletionTokens, true
	case u.InputTokens != nil && u.OutputTokens != nil:
		return *u.InputTokens + u.CacheReadInputTokens, *u.OutputTokens, true
	}
	return 0, 0, false
}

// noteResponse reads a completion's response body, or a stream's first chunk, before the answer's headers go:
// the engine's response id becomes the request's, sent as X-Request-Id in h; a body's usage gives its tokens.
func (record *accessRecord) noteResponse(h http.Header, body []byte) {
	if record == nil || body == nil {
		return
	}
	var summary responseSummary
	if json.Unmarshal(body, &summary) != nil {
		return
	}
	if id := summary.id(); id != "" {
		record.id = id
		h.Set("X-Request-Id", id)
	}
	record.noteUsage(summary)
}

func (record *accessRecord) noteUsage(summary responseSummary) {
	prompt, completion, ok := summary.Usage.tokens()
	switch {
	case ok:
		record.promptTokens, record.completionTokens = &prompt, &completion
	case summary.PromptEvalCount != nil && summary.EvalCount != nil:
		record.promptTokens, record.completionTokens = summary.PromptEvalCount, summary.EvalCount
	case summary.TokensEvaluated != nil && summary.TokensPredicted != nil && summary.Stop != nil && *summary.Stop:
		record.promptTokens, record.completionTokens = summary.TokensEvaluated, summary.TokensPredicted
	}
}

// noteEngineRequest records what the engine says of a request it has ended, whatever the answer's status: its
// timing metrics, and its tokens when noteResponse has not read them (a stream, a request cancelled or failed:
// the engine still has the whole body, with usage).
func (record *accessRecord) noteEngineRequest(req *ember.Request) {
	if record == nil {
		return
	}
	record.ran = true
	if record.promptTokens == nil {
		var summary responseSummary
		if body, err := req.ResponseJSON(); err == nil && json.Unmarshal(body, &summary) == nil {
			record.noteUsage(summary)
		}
	}
	if m, ok := oneChoiceTimingMetrics(req); ok {
		record.metrics = m
	}
}
