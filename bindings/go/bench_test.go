package ember

// Throughput through the binding alone (no HTTP): the load scripts/bench-gateway.py puts on the gateway, so
// that the two together show what HTTP and JSON cost. `go test -run '^$' -bench ConcurrentChat -benchtime 4x`
// runs 4 requests per client.

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// benchRequest is the gateway benchmark's request: a short chat, 32 generated tokens whatever the model says.
var benchRequest = chat("Write a short poem about the sea.", 32, `, "ignore_eos": true`)

// BenchmarkConcurrentChat keeps `clients` requests in flight, each client submitting its next request when its
// last one ends, for b.N requests per client. It reports requests/s and generated tokens/s over the whole run.
func BenchmarkConcurrentChat(b *testing.B) {
	for _, clients := range []int{8, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			var tokens atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for c := 0; c < clients; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < b.N; i++ {
						n, err := completionTokens(benchRequest)
						if err != nil {
							b.Error(err)
							return
						}
						tokens.Add(int64(n))
					}
				}()
			}
			wg.Wait()
			seconds := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N*clients)/seconds, "requests/s")
			b.ReportMetric(float64(tokens.Load())/seconds, "tokens/s")
		})
	}
}

// completionTokens runs one request to its end, reading its whole body as a non-streaming server would.
func completionTokens(body []byte) (int, error) {
	req, err := shared.Submit(context.Background(), body)
	if err != nil {
		return 0, err
	}
	defer req.Close()
	if err := req.Wait(); err != nil {
		return 0, err
	}
	response, err := req.ResponseJSON()
	if err != nil {
		return 0, err
	}
	var usage struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	err = json.Unmarshal(response, &usage)
	return usage.Usage.CompletionTokens, err
}
