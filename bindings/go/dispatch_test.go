package ember

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// osThreads is this process's thread count (/proc/self/status), or -1 where there is no such file.
func osThreads() int {
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

// A thousand requests at once, each read by its own goroutine: the readers wait in Go, so the process keeps about
// the threads it had (the runtime's, the engine's, the dispatcher's), and every goroutine ends with its request.
func TestAThousandConcurrentRequestsNeedNoThreadEach(t *testing.T) {
	const requests = 1000
	engine, err := NewEngine(Config{Model: modelPath(), Threads: 2, MaxWaitingRequests: requests})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	goroutinesBefore, threadsBefore := runtime.NumGoroutine(), osThreads()
	var wg sync.WaitGroup
	errs := make(chan error, requests)
	tokens := make([]int, requests)
	for i := 0; i < requests; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := []byte(fmt.Sprintf(`{"prompt": "%d,", "max_tokens": 3, "temperature": 0}`, i))
			submitFn := engine.Submit
			if i%2 == 1 {
				submitFn = engine.SubmitStream
			}
			req, err := submitFn(context.Background(), body)
			if err != nil {
				errs <- err
				return
			}
			defer req.Close()
			if i%2 == 1 {
				errs <- req.Wait()
				return
			}
			for event, err := range req.Events() {
				if err != nil {
					errs <- err
					return
				}
				tokens[i] += event.NumTokens
			}
			errs <- nil
		}()
	}
	// Sample the thread count while the requests run.
	done := make(chan struct{})
	mostThreads := threadsBefore
	go func() {
		wg.Wait()
		close(done)
	}()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-time.After(5 * time.Millisecond):
			mostThreads = max(mostThreads, osThreads())
		}
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < requests; i += 2 {
		if tokens[i] < 1 || tokens[i] > 3 {
			t.Fatalf("request %d: %d tokens of text", i, tokens[i])
		}
	}
	// A thread per stream would be a thousand. The runtime gives each goroutine blocked in a cgo call a thread,
	// and the thousand Submits start at once: Engine lets submitSlots of them into engine_submit at a time (65
	// threads were measured on a slow 2-core machine before it did, 13 after), so the count stays near what the
	// process had, plus a thread per slot and per P, plus the runtime's own spares.
	bound := threadsBefore + submitSlots() + runtime.GOMAXPROCS(0) + 16
	t.Logf("%d requests: %d threads before, at most %d while serving (bound %d)", requests, threadsBefore, mostThreads, bound)
	if threadsBefore > 0 && mostThreads > bound {
		t.Errorf("%d threads while serving %d requests, %d before", mostThreads, requests, threadsBefore)
	}
	// Every reader's goroutine has ended (the sampler's too); give the runtime a moment to reap them.
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > goroutinesBefore && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutinesBefore {
		t.Errorf("%d goroutines after, %d before", n, goroutinesBefore)
	}
}

func TestAReaderOfTheOtherKindIsRefused(t *testing.T) {
	stream := submitStream(t, shared, context.Background(), []byte(`{"prompt": "Hi", "max_tokens": 2}`))
	if _, err := stream.Next(); !errors.Is(err, StatusInvalidArgument) || !strings.Contains(err.Error(), "NextChunk") {
		t.Errorf("Next of a SubmitStream request: %v", err)
	}
	if err := stream.Wait(); err != nil {
		t.Errorf("Wait reads either kind: %v", err)
	}
	plain := submit(t, shared, context.Background(), []byte(`{"prompt": "Hi", "max_tokens": 2}`))
	if _, err := plain.NextChunk(); !errors.Is(err, StatusInvalidArgument) || !strings.Contains(err.Error(), "SubmitStream") {
		t.Errorf("NextChunk of a Submit request: %v", err)
	}
	if err := plain.Wait(); err != nil {
		t.Error(err)
	}
}

func TestOverloadedIsAStatusErrorsIsFinds(t *testing.T) {
	engine, err := NewEngine(Config{Model: modelPath(), Threads: 1, MaxNumSeqs: 1, MaxWaitingRequests: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer engine.Close()
	// One runs, one waits; the next is refused at once.
	var open []*Request
	defer func() {
		for _, r := range open {
			r.Close()
		}
	}()
	long := chat("Tell me a long story.", 4000, `, "ignore_eos": true`)
	for {
		req, err := engine.Submit(context.Background(), long)
		if errors.Is(err, StatusOverloaded) {
			var e *Error
			if !errors.As(err, &e) || e.Status != StatusOverloaded {
				t.Errorf("errors.As gives %v", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, req)
		if len(open) > 2 {
			t.Fatalf("%d requests admitted with max_num_seqs 1 and max_waiting_requests 1", len(open))
		}
	}
}
