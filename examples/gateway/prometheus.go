package main

// The gateway's own Prometheus metrics (what only the HTTP side knows: answers by endpoint and status, requests
// in flight), in the text exposition format (https://prometheus.io/docs/instrumenting/exposition_formats/). The
// engine's metrics (latency histograms, tokens, finish reasons, KV cache, ...) follow them in /metrics, as the
// engine writes them (engine_metrics_text; docs/c_api.md, "Prometheus metrics").

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// requestKey labels the request counter.
type requestKey struct {
	endpoint string
	code     int
}

// gatewayMetrics is what the gateway itself counts, labelled with the model it serves as the engine's are.
type gatewayMetrics struct {
	modelLabel string // model_name="...", escaped

	mu       sync.Mutex
	requests map[requestKey]uint64 // answered requests by endpoint and HTTP status

	// inFlight counts requests handed to the engine that it has not ended yet (the binding's readers return
	// only once the engine has ended a request, cancelled ones included).
	inFlight atomic.Int64
	// bodiesReading counts the request bodies being read now (their requests hold no slot yet).
	bodiesReading atomic.Int64
	// admitted counts the requests holding a slot for engine work (also when no limit bounds them).
	admitted atomic.Int64
}

func newGatewayMetrics(modelID string) *gatewayMetrics {
	escaped := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(modelID)
	return &gatewayMetrics{modelLabel: `model_name="` + escaped + `"`, requests: map[requestKey]uint64{}}
}

func (m *gatewayMetrics) countRequest(endpoint string, code int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[requestKey{endpoint, code}]++
}

func (m *gatewayMetrics) write(w io.Writer) {
	m.mu.Lock()
	keys := make([]requestKey, 0, len(m.requests))
	for key := range m.requests {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, func(a, b requestKey) int {
		return cmp.Or(cmp.Compare(a.endpoint, b.endpoint), cmp.Compare(a.code, b.code))
	})
	fmt.Fprintf(w, "# HELP ember_gateway_requests_total Requests answered, by endpoint and HTTP status "+
		"(499: the client went away first).\n# TYPE ember_gateway_requests_total counter\n")
	for _, key := range keys {
		fmt.Fprintf(w, "ember_gateway_requests_total{%s,endpoint=%q,code=\"%d\"} %d\n", m.modelLabel, key.endpoint,
			key.code, m.requests[key])
	}
	m.mu.Unlock()

	fmt.Fprintf(w, "# HELP ember_gateway_requests_in_flight Requests submitted to the engine and not ended yet.\n"+
		"# TYPE ember_gateway_requests_in_flight gauge\nember_gateway_requests_in_flight{%s} %d\n", m.modelLabel,
		m.inFlight.Load())
}

// writeLimitGauges writes what the gateway's limits (limits.go) bound, as it stands now, so that an operator sees
// how close each is to its limit: the bodies being read, the bytes of bodies held (--max-body-bytes-in-flight)
// and worked on by the engine (--max-engine-work-bytes), and the requests admitted to engine work
// (--max-concurrent-requests).
func (s *server) writeLimitGauges(w io.Writer) {
	label := s.metrics.modelLabel
	fmt.Fprintf(w, "# HELP ember_gateway_request_bodies_reading Request bodies being read (their requests hold no "+
		"slot yet).\n# TYPE ember_gateway_request_bodies_reading gauge\nember_gateway_request_bodies_reading{%s} %d\n",
		label, s.metrics.bodiesReading.Load())
	fmt.Fprintf(w, "# HELP ember_gateway_request_body_bytes Bytes of request bodies held, being read or not yet "+
		"taken by the engine (bounded by --max-body-bytes-in-flight).\n# TYPE ember_gateway_request_body_bytes gauge\n"+
		"ember_gateway_request_body_bytes{%s} %d\n", label, s.bodyBytes.used.Load())
	fmt.Fprintf(w, "# HELP ember_gateway_engine_work_bytes Bytes of request bodies (and /detokenize answers, at "+
		"their largest) that the engine works on (bounded by --max-engine-work-bytes).\n"+
		"# TYPE ember_gateway_engine_work_bytes gauge\nember_gateway_engine_work_bytes{%s} %d\n", label,
		s.workBytes.used.Load())
	fmt.Fprintf(w, "# HELP ember_gateway_requests_admitted Requests holding a slot for engine work: completions, "+
		"embeddings, reranking, /tokenize, /detokenize (bounded by --max-concurrent-requests).\n"+
		"# TYPE ember_gateway_requests_admitted gauge\nember_gateway_requests_admitted{%s} %d\n", label,
		s.metrics.admitted.Load())
}
