package main

// The gateway's OS threads stay bounded however many streams it serves: every stream's handler reads its request
// through the engine's one dispatcher (bindings/go/dispatch.go), in Go, with no thread of its own.

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ember "ember.invalid/ember/bindings/go"
)

// processThreads is this process's thread count (/proc/self/status), or -1 where there is no such file.
func processThreads() int {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(rest))
			return n
		}
	}
	return -1
}

func TestTwoThousandStreamsNeedNoThreadEach(t *testing.T) {
	streams := 2000
	// Each stream holds two descriptors here (the client's end and the server's): stay within the limit.
	var limit syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &limit) == nil && int(limit.Cur) < 2*streams+256 {
		streams = (int(limit.Cur) - 256) / 2
		t.Logf("RLIMIT_NOFILE %d: %d streams", limit.Cur, streams)
	}
	model := os.Getenv("EMBER_MODEL")
	if model == "" {
		model = filepath.Join("..", "..", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
	}
	engine, err := ember.NewEngine(ember.Config{Model: model, Threads: 2, MaxWaitingRequests: streams})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	l := defaultLimits()
	l.maxConcurrentRequests = streams
	server := httptest.NewServer(newServer(engine, "test-model", false, l).routes())
	defer server.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams, MaxConnsPerHost: 0}}
	defer client.CloseIdleConnections()

	threadsBefore := processThreads()
	var wg sync.WaitGroup
	failures := make(chan string, streams)
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"prompt": "%d,", "max_tokens": 3, "temperature": 0, "stream": true}`, i)
			resp, err := client.Post(server.URL+"/v1/completions", "application/json", strings.NewReader(body))
			if err != nil {
				failures <- err.Error()
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				failures <- fmt.Sprintf("stream %d: status %d", i, resp.StatusCode)
				return
			}
			chunks, done := 0, false
			for lines := bufio.NewScanner(resp.Body); lines.Scan(); {
				switch line := lines.Text(); {
				case line == "data: [DONE]":
					done = true
				case strings.HasPrefix(line, "data: "):
					chunks++
				}
			}
			if !done || chunks == 0 {
				failures <- fmt.Sprintf("stream %d: %d chunks, done %v", i, chunks, done)
			}
		}()
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	mostThreads := threadsBefore
	for serving := true; serving; {
		select {
		case <-finished:
			serving = false
		case <-time.After(5 * time.Millisecond):
			mostThreads = max(mostThreads, processThreads())
		}
	}
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	t.Logf("%d concurrent streams: %d threads before, at most %d while serving (GOMAXPROCS %d)", streams,
		threadsBefore, mostThreads, runtime.GOMAXPROCS(0))
	if mostThreads > 64 {
		t.Errorf("%d threads while serving %d streams, want at most 64", mostThreads, streams)
	}
}
