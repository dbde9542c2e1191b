package main

// The gateway's Prometheus metrics, written in the text exposition format
// (https://prometheus.io/docs/instrumenting/exposition_formats/) with the standard library only.

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
)

// Histogram bucket bounds, in seconds. Like vLLM's (vllm/v1/metrics/loggers.py), they span from well below one
// engine step to the longest a request may reasonably take, so that percentiles stay readable both for the
// small CPU model and for a loaded server.
var (
	ttftBuckets    = []float64{0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40}
	queueBuckets   = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	itlBuckets     = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5}
	latencyBuckets = []float64{0.05, 0.1, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 60, 120}
)

// histogram counts observations into fixed buckets.
type histogram struct {
	name, help string
	bounds     []float64 // [buckets] upper bounds, seconds, increasing; +Inf is implicit

	mu     sync.Mutex
	counts []uint64 // [buckets + 1] observations in each bucket alone (the last is above every bound)
	sum    float64  // seconds
}

func newHistogram(name, help string, bounds []float64) *histogram {
	return &histogram{name: name, help: help, bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

func (h *histogram) observe(seconds float64) {
	bucket, _ := slices.BinarySearch(h.bounds, seconds) // the first bound >= seconds: `le` is inclusive
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[bucket]++
	h.sum += seconds
}

func (h *histogram) write(w io.Writer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", h.name, h.help, h.name)
	var cumulative uint64
	for i, count := range h.counts {
		cumulative += count
		le := "+Inf"
		if i < len(h.bounds) {
			le = formatFloat(h.bounds[i])
		}
		fmt.Fprintf(w, "%s_bucket{le=%q} %d\n", h.name, le, cumulative)
	}
	fmt.Fprintf(w, "%s_sum %s\n%s_count %d\n", h.name, formatFloat(h.sum), h.name, cumulative)
}

// requestKey labels the request counter.
type requestKey struct {
	endpoint string
	code     int
}

// gatewayMetrics is everything /metrics reports.
type gatewayMetrics struct {
	mu       sync.Mutex
	requests map[requestKey]uint64 // answered requests by endpoint and HTTP status

	// inFlight counts requests handed to the engine that it has not ended yet (the binding's readers return
	// only once the engine has ended a request, cancelled ones included).
	inFlight atomic.Int64

	ttft, queue, itl, latency *histogram
}

func newGatewayMetrics() *gatewayMetrics {
	return &gatewayMetrics{
		requests: map[requestKey]uint64{},
		ttft: newHistogram("ember_request_time_to_first_token_seconds",
			"Time from a sequence's first scheduling to its first generated token (queueing excluded).", ttftBuckets),
		queue: newHistogram("ember_request_queue_time_seconds",
			"Time from queueing in the engine to first scheduling.", queueBuckets),
		itl: newHistogram("ember_request_inter_token_latency_seconds",
			"Time between consecutive generated tokens of a sequence.", itlBuckets),
		latency: newHistogram("ember_request_e2e_latency_seconds",
			"Time from submission to the engine to the end of a sequence.", latencyBuckets),
	}
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
		fmt.Fprintf(w, "ember_gateway_requests_total{endpoint=%q,code=\"%d\"} %d\n", key.endpoint, key.code,
			m.requests[key])
	}
	m.mu.Unlock()

	fmt.Fprintf(w, "# HELP ember_gateway_requests_in_flight Requests submitted to the engine and not ended yet.\n"+
		"# TYPE ember_gateway_requests_in_flight gauge\nember_gateway_requests_in_flight %d\n", m.inFlight.Load())
	for _, h := range []*histogram{m.ttft, m.queue, m.itl, m.latency} {
		h.write(w)
	}
}

// formatFloat writes a sample value as Prometheus parses it (Go's shortest representation; Inf and NaN spelled
// its way).
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
