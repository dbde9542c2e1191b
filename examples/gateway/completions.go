package main

// POST /v1/chat/completions and POST /v1/completions: the body goes to the engine as it is; the answer is the
// engine's response body, or its streaming chunks as server-sent events ending with `data: [DONE]`.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	ember "ember.invalid/ember/bindings/go"
)

// endpoint is a generation route: OpenAI's two (the body field that makes a request of its kind), or another
// API's (apis.go), which the engine reads and answers in that API's shape.
type endpoint struct {
	name  string
	field string
	// api is the body's API; ember.APIOpenAI for the two OpenAI routes, whose kind field is checked here.
	api ember.API
	// family is the shape of the route's errors.
	family apiFamily
	// framing is how its stream goes on the wire.
	framing framing
	// streamByDefault: a body without `stream` streams (Ollama's).
	streamByDefault bool
}

var (
	endpointChat        = endpoint{name: "chat", field: "messages", api: ember.APIOpenAI, framing: sseWithDone}
	endpointCompletions = endpoint{name: "completions", field: "prompt", api: ember.APIOpenAI, framing: sseWithDone}
)

// statusClientClosed is the status counted for a client that went away before its answer (nginx's 499).
const statusClientClosed = 499

func (s *server) completions(kind endpoint) func(http.ResponseWriter, *http.Request) int {
	return func(w http.ResponseWriter, r *http.Request) int {
		// The body first, within its own limits (limits.go): admission is for engine work, and a client slow to
		// send its body must hold no part of it meanwhile.
		var hold byteHold
		defer hold.release()
		body, stream, bad := s.readBody(w, r, kind, &hold)
		if bad != nil {
			return inShapeOf(kind.family, *bad).write(w)
		}
		if kind.family == apiOllama {
			if status, answered := s.ollamaLoad(w, kind, body); answered {
				return status
			}
		}
		if body, bad = withClientTimeout(body, r.Header.Get(clientTimeoutHeader)); bad != nil {
			return inShapeOf(kind.family, *bad).write(w)
		}
		admitted, tooMuch, bad := s.admit(r, int64(len(body)))
		switch {
		case tooMuch:
			return inShapeOf(kind.family, *s.bodyTooLargeForWork()).write(w)
		case bad != nil:
			return inShapeOf(kind.family, *bad).write(w)
		}
		defer admitted.done()
		// The request context ends when the client disconnects; cancel also ends it when a write fails.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		if clientGone(ctx) {
			return statusClientClosed
		}
		// A stream is read as chunk bodies, a whole response as events: both from the engine's one dispatcher.
		// The engine checks the request before it returns (and compiles its grammar, if it has one): a client
		// that leaves meanwhile is seen once it has, when the first read cancels the request, which the engine
		// then ends at its next step.
		req, err := s.engine.SubmitAPI(ctx, kind.api, body, stream)
		// The engine has its own copy, or nothing: the body no longer counts against the gateway's limits.
		body = nil
		hold.release()
		admitted.work.release()
		if errors.Is(err, context.Canceled) {
			return statusClientClosed
		}
		if err != nil {
			return inShapeOf(kind.family, engineError(err)).write(w)
		}
		defer req.Close()
		setWarningHeaders(w.Header(), req)
		s.metrics.inFlight.Add(1)
		record := accessRecordOf(r.Context())
		var status int
		if stream {
			status = s.stream(w, req, cancel, record, kind)
		} else {
			status = s.respond(w, req, record, kind.family)
		}
		// The readers return only once the engine has ended the request, a cancelled one included.
		s.metrics.inFlight.Add(-1)
		record.noteEngineRequest(req)
		return status
	}
}

// readBody reads a completion request and checks what the gateway itself relies on: a JSON object with the
// endpoint's input field. It returns the body and its `stream` flag. Everything else the engine checks.
func (s *server) readBody(w http.ResponseWriter, r *http.Request, kind endpoint, hold *byteHold) ([]byte, bool,
	*apiError) {
	body, bad := s.readJSONObject(w, r, hold)
	if bad != nil {
		return nil, false, bad
	}
	// Only whether the input field is there, and `stream`: the other fields are the engine's to read, and
	// decoding them here would copy the body again.
	var fields struct {
		Messages, Prompt present
		Stream           json.RawMessage `json:"stream"`
	}
	_ = json.Unmarshal(body, &fields) // checkJSONObject has parsed it
	// The C API picks the kind from the fields (engine_submit), so a body of the other kind sent here would be
	// served as that kind: refuse it, as OpenAI does a chat request without messages.
	if (kind == endpointChat && !fields.Messages) || (kind == endpointCompletions && !fields.Prompt) {
		e := invalidRequest(fmt.Sprintf("missing required parameter: '%s'", kind.field), kind.field)
		return nil, false, &e
	}
	// A `stream` that is not a boolean reads as the default here; the engine then refuses it, naming the field.
	stream := kind.streamByDefault
	if len(fields.Stream) > 0 {
		_ = json.Unmarshal(fields.Stream, &stream)
	}
	return body, stream, nil
}

// present records whether a JSON field is there, without keeping its value.
type present bool

func (p *present) UnmarshalJSON([]byte) error {
	*p = true
	return nil
}

// readJSONObject reads a request body within the gateway's limits (size, time, bytes held; readBodyBytes) and
// checks that it is one JSON object in UTF-8. The caller releases the hold (also after a refusal).
func (s *server) readJSONObject(w http.ResponseWriter, r *http.Request, hold *byteHold) ([]byte, *apiError) {
	if bad := checkContentType(r.Header.Get("Content-Type")); bad != nil {
		return nil, bad
	}
	body, bad := s.readBodyBytes(w, r, hold)
	if bad != nil {
		return nil, bad
	}
	// The body is in: from here the connection is only watched for the client going away (net/http's
	// background read), which must not time out, or it would end the request's context mid-generation.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if bad := checkJSONObject(body); bad != nil {
		return nil, bad
	}
	return body, nil
}

// checkContentType refuses bodies that say they are not JSON. No Content-Type passes, and so does
// application/x-www-form-urlencoded, which `curl -d` sends unless told otherwise: the body must still be JSON.
func checkContentType(contentType string) *apiError {
	if contentType == "" {
		return nil
	}
	mediaType, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		e := invalidRequest(fmt.Sprintf("the Content-Type header %q cannot be parsed: %v", contentType, err), "")
		return &e
	}
	if mediaType != "application/json" && mediaType != "application/x-www-form-urlencoded" {
		e := invalidRequest(fmt.Sprintf("Content-Type %s is not accepted: send the body as application/json",
			mediaType), "")
		return &e
	}
	// JSON is UTF-8 (RFC 8259); a body in another charset would reach the engine misread.
	if charset, ok := params["charset"]; ok && !strings.EqualFold(charset, "utf-8") {
		e := invalidRequest(fmt.Sprintf("charset %s is not accepted: the body must be UTF-8", charset), "")
		return &e
	}
	return nil
}

// checkJSONObject says what is wrong with a body that is not one JSON object, in UTF-8, with the byte at
// fault where there is one.
func checkJSONObject(body []byte) *apiError {
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(body) &&
		utf8.Valid(body) {
		return nil // the common case, checked without building anything: an object, in UTF-8
	}
	var message string
	if len(bytes.TrimSpace(body)) == 0 {
		message = "the request body is empty: send a JSON object"
	} else if !utf8.Valid(body) {
		// encoding/json would let invalid bytes in strings through as U+FFFD; the engine refuses them too,
		// but only the gateway can say where they are.
		message = fmt.Sprintf("the request body is not valid UTF-8 (byte offset %d)", invalidUTF8Offset(body))
	} else {
		var fields map[string]json.RawMessage
		err := json.Unmarshal(body, &fields)
		var syntax *json.SyntaxError
		var notObject *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syntax):
			message = fmt.Sprintf("the request body is not valid JSON: %v (byte offset %d)", err, syntax.Offset)
		case errors.As(err, &notObject):
			message = "the request body must be a JSON object, not " + articled(notObject.Value)
		case err != nil:
			message = "the request body is not a JSON object: " + err.Error()
		case fields == nil:
			message = "the request body must be a JSON object, not null"
		default:
			return nil
		}
	}
	e := invalidRequest(message, "")
	return &e
}

// invalidUTF8Offset is the offset of the first byte that does not start a valid UTF-8 sequence.
func invalidUTF8Offset(b []byte) int {
	offset := 0
	for offset < len(b) {
		r, size := utf8.DecodeRune(b[offset:])
		if r == utf8.RuneError && size <= 1 {
			return offset
		}
		offset += size
	}
	return offset
}

// articled puts "a" or "an" before the name of a JSON value's kind ("array", "string", "number", "bool").
func articled(kind string) string {
	if kind != "" && strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
}

// respond waits for the whole response body and writes it; record (nil without --access-log) reads its id.
func (s *server) respond(w http.ResponseWriter, req *ember.Request, record *accessRecord, family apiFamily) int {
	if err := req.Wait(); err != nil {
		if errors.Is(err, context.Canceled) {
			return statusClientClosed
		}
		return inShapeOf(family, engineError(err)).write(w)
	}
	body, err := req.ResponseJSON()
	if err != nil {
		return inShapeOf(family, engineError(err)).write(w)
	}
	if s.metricsHeaders {
		setMetricsHeaders(w.Header(), req)
	}
	record.noteResponse(w.Header(), body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(body, '\n'))
	return http.StatusOK
}

// stream writes the request's chunks as server-sent events. A failed write means the client is gone: cancel
// then ends the request, and the reader drains what is left. record (nil without --access-log) reads the
// response's id from the first chunk.
func (s *server) stream(w http.ResponseWriter, req *ember.Request, cancel context.CancelFunc,
	record *accessRecord, kind endpoint) int {
	h := w.Header()
	h.Set("Content-Type", kind.framing.contentType())
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // proxies must pass each event on at once
	flusher := http.NewResponseController(w)
	for first := true; ; first = false {
		chunk, err := req.NextChunk()
		if first && !errors.Is(err, context.Canceled) {
			// The headers wait for the first chunk, which has the response's id (X-Request-Id). Nothing reaches
			// the client before the first flush anyway: the status line costs no time to first token.
			record.noteResponse(h, chunk)
			w.WriteHeader(http.StatusOK)
		}
		switch {
		case err == io.EOF:
			_, err = io.WriteString(w, kind.framing.end())
			if err == nil {
				err = flusher.Flush()
			}
			if err != nil {
				return statusClientClosed
			}
			return http.StatusOK
		case errors.Is(err, context.Canceled):
			return statusClientClosed
		case err != nil:
			// The status line is sent: the failure can only be an event.
			_, _ = w.Write(kind.framing.failure(kind.family, engineError(err)))
			_ = flusher.Flush()
			return http.StatusInternalServerError
		}
		if _, err := w.Write(kind.framing.frame(chunk)); err != nil || flusher.Flush() != nil {
			cancel()
		}
	}
}

// metricsHeaderNames are the response headers of --metrics-headers, beside the fields they carry
// (docs/per_request_metrics.md has the definitions).
var metricsHeaderNames = [...]string{
	"X-Ember-Queue-Time-Ms",
	"X-Ember-Time-To-First-Token-Ms",
	"X-Ember-Generation-Time-Ms",
	"X-Ember-Mean-Itl-Ms",
	"X-Ember-Tokens-Per-Second",
}

// setMetricsHeaders adds the five timing metrics of a one-choice request as headers, and the standard
// Server-Timing header (which browsers' developer tools and many HTTP clients display); absent metrics get no
// header or entry. A request with several choices gets none, as its body's `metrics` is null: one timing for
// several sequences would be ambiguous.
func setMetricsHeaders(h http.Header, req *ember.Request) {
	m, ok := oneChoiceTimingMetrics(req)
	if !ok {
		return
	}
	for i, value := range [...]*float64{m.QueueTimeMs, m.TimeToFirstTokenMs, m.GenerationTimeMs, m.MeanITLMs,
		m.TokensPerSecond} {
		if value != nil {
			h.Set(metricsHeaderNames[i], strconv.FormatFloat(*value, 'f', 3, 64))
		}
	}
	var e2e *float64
	if x, err := req.ExtendedMetrics(0); err == nil {
		e2e = x.E2ELatencyMs
	}
	if value := serverTiming(m, e2e); value != "" {
		h.Set("Server-Timing", value)
	}
}

// oneChoiceTimingMetrics reads the five timing metrics of a request with one choice, for the metrics headers and
// the access log; false for a request with several (one timing for several sequences would be ambiguous) or
// none to read.
func oneChoiceTimingMetrics(req *ember.Request) (ember.TimingMetrics, bool) {
	if _, err := req.ChoiceTimingMetrics(1); err == nil {
		return ember.TimingMetrics{}, false
	}
	m, err := req.TimingMetrics()
	return m, err == nil
}

// serverTiming is the Server-Timing header value (W3C Server Timing: `name;dur=milliseconds`, comma-separated)
// of a request's metrics: `queue` (queue_time_ms), `ttft` (time_to_first_token_ms: from scheduling, so queue
// and ttft add up to the wait for the first token), `gen` (generation_time_ms) and `e2e` (the engine's
// submit-to-end latency). Absent metrics are left out; "" when none is present.
func serverTiming(m ember.TimingMetrics, e2eMs *float64) string {
	var entries []string
	for _, metric := range [...]struct {
		name string
		ms   *float64
	}{{"queue", m.QueueTimeMs}, {"ttft", m.TimeToFirstTokenMs}, {"gen", m.GenerationTimeMs}, {"e2e", e2eMs}} {
		if metric.ms != nil {
			entries = append(entries, metric.name+";dur="+strconv.FormatFloat(*metric.ms, 'f', 3, 64))
		}
	}
	return strings.Join(entries, ", ")
}

// setWarningHeaders tells the client which of its fields were accepted without effect (engine_request_warnings_json),
// one `Warning: 299 - "..."` header each (RFC 9111's miscellaneous persistent warning): clients that send every
// field to every model keep working, and their users can see why a field did nothing.
func setWarningHeaders(h http.Header, req *ember.Request) {
	warnings, err := req.Warnings()
	if err != nil {
		return
	}
	for _, warning := range warnings {
		h.Add("Warning", "299 - "+strconv.Quote(warning))
	}
}
