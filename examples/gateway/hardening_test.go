package main

// The gateway under bad HTTP (limits.go), on the real engine: malformed and huge bodies, slow clients, a
// thousand connections at once, clients that go away mid-stream. Each test starts a gateway of its own with the
// limits it exercises and ends by checking that nothing leaked: no completion handler left, nothing running or
// waiting in the engine, and the goroutines back to what they were before the test's clients came.
//
// Nothing here measures a duration. The timeouts are short so that the tests are quick, and the tests wait on
// conditions, each with a generous bound (patience) that only a broken gateway reaches.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// patience bounds every wait on a condition; never a measured duration.
const patience = 60 * time.Second

// longStream is a streaming completion that would run for minutes if nothing cancelled it.
const longStream = `{"prompt": "Once upon a time", "max_tokens": 4000, "ignore_eos": true, "temperature": 0, "stream": true}`

// startGateway starts a gateway on the test engine with l; wrap, when not nil, wraps its listener.
func startGateway(t *testing.T, l limits, wrap func(net.Listener) net.Listener) (*server, *httptest.Server) {
	t.Helper()
	s := newServer(testEngine, "test-model", false, l)
	ts := httptest.NewUnstartedServer(nil)
	s.configure(ts.Config)
	if wrap != nil {
		ts.Listener = wrap(ts.Listener)
	}
	ts.Start()
	t.Cleanup(ts.Close)
	return s, ts
}

// waitFor polls cond until it holds, and fails the test after patience.
func waitFor(t *testing.T, what string, cond func() bool, detail func() string) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after %s\n%s", what, patience, detail())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func noDetail() string { return "" }

// settled waits until the gateway holds nothing: no handler holds a slot, an engine request or bytes of a body,
// the engine runs and queues nothing, and the process runs no more goroutines than baseline (taken once the
// gateway had started, before any client). Every client connection must be closed by then.
func settled(t *testing.T, s *server, baseline int) {
	t.Helper()
	waitFor(t, "without completion handlers", func() bool {
		return len(s.slots) == 0 && s.metrics.inFlight.Load() == 0 && s.metrics.bodiesReading.Load() == 0 &&
			s.bodyBytes.used.Load() == 0 && s.workBytes.used.Load() == 0
	}, func() string {
		return fmt.Sprintf("%d slots held, %d in flight, %d bodies reading, %d body bytes, %d work bytes",
			len(s.slots), s.metrics.inFlight.Load(), s.metrics.bodiesReading.Load(), s.bodyBytes.used.Load(),
			s.workBytes.used.Load())
	})
	var stats string
	waitFor(t, "idle in the engine", func() bool {
		st, err := testEngine.Stats()
		stats = fmt.Sprintf("%+v %v", st, err)
		return err == nil && st.Running == 0 && st.Waiting == 0
	}, func() string { return stats })
	waitFor(t, fmt.Sprintf("back to %d goroutines", baseline), func() bool {
		return runtime.NumGoroutine() <= baseline
	}, func() string {
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		return fmt.Sprintf("%d goroutines:\n%s", runtime.NumGoroutine(), b.String())
	})
}

// count is how many answers the gateway has counted for endpoint with code.
func count(s *server, endpoint string, code int) uint64 {
	s.metrics.mu.Lock()
	defer s.metrics.mu.Unlock()
	return s.metrics.requests[requestKey{endpoint, code}]
}

// dial opens a raw connection to the gateway; it fails rather than block if the gateway never answers.
func dial(t *testing.T, ts *httptest.Server, d *net.Dialer) net.Conn {
	t.Helper()
	if d == nil {
		d = &net.Dialer{}
	}
	conn, err := d.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(patience))
	return conn
}

// rawPost is a POST's request line and headers, without the body.
func rawPost(path string, contentLength int) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: gateway\r\nContent-Type: application/json\r\n"+
		"Content-Length: %d\r\n\r\n", path, contentLength)
}

// startStream sends longStream on a new connection and reads up to its first event, so that when it returns
// the request runs in the engine and holds a slot of the gateway.
func startStream(t *testing.T, ts *httptest.Server, d *net.Dialer) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn := dial(t, ts, d)
	if _, err := io.WriteString(conn, rawPost("/v1/completions", len(longStream))+longStream); err != nil {
		t.Fatal(err)
	}
	// A small buffer: what the client has read stays small next to what it leaves unread.
	r := bufio.NewReaderSize(conn, 64)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: status %d", resp.StatusCode)
	}
	// The body is chunked: its first event line is somewhere in the next bytes.
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if strings.Contains(line, "data: {") {
			return conn, r
		}
	}
}

// openAIErrorBody reads an answer that must be status with an OpenAI error whose message contains want.
func openAIErrorBody(t *testing.T, resp *http.Response, status int, want string) {
	t.Helper()
	defer resp.Body.Close()
	var e errorObject
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("want %d %q; status %d and an unreadable body: %v", status, want, resp.StatusCode, err)
	}
	if resp.StatusCode != status || e.Error.Type == "" || !strings.Contains(e.Error.Message, want) {
		t.Fatalf("status %d, error %+v; want %d with a message containing %q", resp.StatusCode, e.Error, status,
			want)
	}
}

// hiddenLength hides a reader's length from net/http, which then sends the body chunked, without Content-Length.
type hiddenLength struct{ io.Reader }

// zeros is an endless body of '0' bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}

func TestBadBodiesAreRefusedByName(t *testing.T) {
	l := defaultLimits()
	l.maxBodyBytes = 4096
	s, ts := startGateway(t, l, nil)
	transport := &http.Transport{}
	client := &http.Client{Transport: transport}
	baseline := runtime.NumGoroutine()

	const ok = `{"prompt": "Hi", "max_tokens": 1}`
	cases := []struct {
		name, contentType string
		body              io.Reader
		status            int
		message           string
	}{
		{"empty", "application/json", strings.NewReader(""), 400, "the request body is empty"},
		{"blank", "application/json", strings.NewReader(" \n\t"), 400, "the request body is empty"},
		{"cut short", "application/json", strings.NewReader(`{"prompt": "Hi"`), 400,
			"not valid JSON: unexpected end of JSON input"},
		{"bad token", "application/json", strings.NewReader(`{"prompt": Hi}`), 400,
			"not valid JSON: invalid character 'H' looking for beginning of value (byte offset 12)"},
		{"trailing data", "application/json", strings.NewReader(`{"prompt": "Hi"} {}`), 400,
			"not valid JSON: invalid character '{' after top-level value"},
		{"array", "application/json", strings.NewReader(`[1, 2]`), 400, "must be a JSON object, not an array"},
		{"string", "application/json", strings.NewReader(`"Hi"`), 400, "must be a JSON object, not a string"},
		{"null", "application/json", strings.NewReader(`null`), 400, "must be a JSON object, not null"},
		{"invalid UTF-8", "application/json", strings.NewReader("{\"prompt\": \"\xff\"}"), 400,
			"not valid UTF-8 (byte offset 12)"},
		{"NUL byte", "application/json", strings.NewReader("{\"prompt\": \"a\x00\"}"), 400,
			"invalid character '\\x00' in string literal"},
		{"text/plain", "text/plain", strings.NewReader(ok), 400,
			"Content-Type text/plain is not accepted: send the body as application/json"},
		{"multipart", "multipart/form-data; boundary=x", strings.NewReader(ok), 400,
			"Content-Type multipart/form-data is not accepted"},
		{"latin-1", "application/json; charset=iso-8859-1", strings.NewReader(ok), 400,
			"charset iso-8859-1 is not accepted"},
		{"unparsable type", "application/json; charset", strings.NewReader(ok), 400, "cannot be parsed"},
		{"too large", "application/json", strings.NewReader(`{"prompt": "` + strings.Repeat("a", 5000) + `"}`),
			413, "larger than 4096 bytes"},
		// No Content-Length: the limit counts what arrives. 64 MiB, of which the gateway reads 4 KiB.
		{"too large, chunked", "application/json", hiddenLength{io.LimitReader(zeros{}, 64<<20)}, 413,
			"larger than 4096 bytes"},
	}
	for _, c := range cases {
		req, err := http.NewRequest(http.MethodPost, ts.URL+"/v1/completions", c.body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", c.contentType)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.name == "too large, chunked" && req.ContentLength != 0 {
			t.Fatalf("%s: sent with Content-Length %d", c.name, req.ContentLength)
		}
		t.Run(c.name, func(t *testing.T) { openAIErrorBody(t, resp, c.status, c.message) })
	}

	// What passes: JSON with or without a charset, no Content-Type at all, and curl -d's form type.
	for _, contentType := range []string{"application/json", "application/json; charset=UTF-8", "",
		"application/x-www-form-urlencoded"} {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/completions", strings.NewReader(ok))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("Content-Type %q: status %d, %s", contentType, resp.StatusCode, body)
		}
	}
	transport.CloseIdleConnections()
	settled(t, s, baseline)
}

func TestSlowClientsAreCutOff(t *testing.T) {
	l := defaultLimits()
	l.readHeaderTimeout = 50 * time.Millisecond
	l.readBodyTimeout = 50 * time.Millisecond
	l.idleTimeout = 50 * time.Millisecond
	s, ts := startGateway(t, l, nil)
	baseline := runtime.NumGoroutine()

	// closed reads what is left on conn and fails unless the gateway closed it (EOF or reset), before patience.
	closed := func(what string, conn net.Conn) {
		t.Helper()
		_, err := io.ReadAll(conn)
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			t.Fatalf("%s: the gateway kept the connection open", what)
		}
		conn.Close()
	}

	t.Run("headers never end", func(t *testing.T) {
		conn := dial(t, ts, nil)
		if _, err := io.WriteString(conn, "POST /v1/completions HTTP/1.1\r\nHost: gateway\r\n"); err != nil {
			t.Fatal(err)
		}
		closed("headers never end", conn)
	})

	t.Run("no request at all", func(t *testing.T) {
		closed("no request at all", dial(t, ts, nil))
	})

	t.Run("body stalls", func(t *testing.T) {
		conn := dial(t, ts, nil)
		defer conn.Close()
		if _, err := io.WriteString(conn, rawPost("/v1/completions", 100)+`{"prompt": `); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		openAIErrorBody(t, resp, http.StatusRequestTimeout, "the request body did not arrive within 50ms")
	})

	t.Run("body trickles", func(t *testing.T) {
		conn := dial(t, ts, nil)
		defer conn.Close()
		// A byte every 10 ms: the 1000 bytes announced would take ten seconds, far past the body's deadline.
		if _, err := io.WriteString(conn, rawPost("/v1/completions", 1000)+`{"prompt": "`); err != nil {
			t.Fatal(err)
		}
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := io.WriteString(conn, "a"); err != nil {
						return
					}
				}
			}
		}()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		close(stop)
		<-done
		if err != nil {
			t.Fatal(err)
		}
		openAIErrorBody(t, resp, http.StatusRequestTimeout, "did not arrive")
	})

	t.Run("keep-alive connection idles", func(t *testing.T) {
		conn := dial(t, ts, nil)
		if _, err := io.WriteString(conn, "GET /health HTTP/1.1\r\nHost: gateway\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(conn)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("status %d, close %v: want a 200 that keeps the connection", resp.StatusCode, resp.Close)
		}
		closed("keep-alive connection idles", conn)
	})
	settled(t, s, baseline)
}

// smallSendBuffers makes accepted connections' kernel send buffers small, so that a client that stops reading
// blocks the gateway's writes after a few kilobytes rather than after megabytes.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetWriteBuffer(4096)
	}
	return conn, err
}

// smallReceiveBuffer is a dialer whose connections have a small kernel receive buffer (set before connecting,
// so that the window the client advertises is small from the start).
var smallReceiveBuffer = &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
	var err error
	if controlErr := c.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
	}); controlErr != nil {
		return controlErr
	}
	return err
}}

func TestClientThatStopsReadingIsDroppedAndItsRequestCancelled(t *testing.T) {
	l := defaultLimits()
	l.writeTimeout = 100 * time.Millisecond
	s, ts := startGateway(t, l, func(l net.Listener) net.Listener { return smallSendBuffers{l} })
	baseline := runtime.NumGoroutine()

	// The stream's first event came; from here the client reads nothing. Once the buffers between the two are
	// full, a write blocks past its deadline: the gateway drops the client and cancels the request, long before
	// the 4000 tokens asked for.
	conn, _ := startStream(t, ts, smallReceiveBuffer)
	waitFor(t, "counting the dropped client", func() bool { return count(s, "completions", statusClientClosed) == 1 },
		func() string { return fmt.Sprintf("%d in flight", s.metrics.inFlight.Load()) })
	conn.Close()
	settled(t, s, baseline)
}

func TestLongStreamOutlivesTheTimeouts(t *testing.T) {
	l := defaultLimits()
	l.readHeaderTimeout = 50 * time.Millisecond
	l.readBodyTimeout = 50 * time.Millisecond
	l.writeTimeout = 50 * time.Millisecond
	s, ts := startGateway(t, l, nil)
	baseline := runtime.NumGoroutine()

	conn, r := startStream(t, ts, nil)
	// The premise, not a measurement: the stream lives well past every timeout. The body's read deadline
	// must not outlive the body (it would end the request's context), nor one write's deadline the next
	// write (every write after it would fail). Meanwhile the gateway writes into the connection's buffers,
	// which hold far more than this stretch's tokens.
	<-time.After(4 * l.writeTimeout)
	if st, err := testEngine.Stats(); err != nil || st.Running != 1 || count(s, "completions", statusClientClosed) != 0 {
		t.Fatalf("stats %+v, %v, %d dropped: the stream should still run", st, err,
			count(s, "completions", statusClientClosed))
	}
	for events := 0; events < 5; {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("the stream ended: %v", err)
		}
		if strings.Contains(line, "data: {") {
			events++
		}
	}
	conn.Close()
	waitFor(t, "counting the disconnect", func() bool { return count(s, "completions", statusClientClosed) == 1 },
		noDetail)
	settled(t, s, baseline)
}

func TestDisconnectMidStreamCancelsTheEngineRequest(t *testing.T) {
	s, ts := startGateway(t, defaultLimits(), nil)
	baseline := runtime.NumGoroutine()

	conn, _ := startStream(t, ts, nil)
	if st, err := testEngine.Stats(); err != nil || st.Running != 1 {
		t.Fatalf("stats %+v, %v: the stream should run", st, err)
	}
	conn.Close()
	// 499 is counted once the binding has seen the engine end the cancelled request.
	waitFor(t, "counting the disconnect", func() bool { return count(s, "completions", statusClientClosed) == 1 },
		noDetail)
	settled(t, s, baseline)
}

func TestThousandConnectionsGetAnAnswerOr503(t *testing.T) {
	const connections = 1000
	l := defaultLimits()
	l.maxConcurrentRequests = 4
	s, ts := startGateway(t, l, nil)
	baseline := runtime.NumGoroutine()
	const short = `{"prompt": "Hi", "max_tokens": 1, "temperature": 0}`

	// storm opens every connection first, then sends a request on each at once, and returns each answer's
	// status; an answer must be a whole completion or a 503 with Retry-After and an OpenAI error.
	storm := func() map[int]int {
		conns := make([]net.Conn, connections)
		for i := range conns {
			conns[i] = dial(t, ts, nil)
		}
		statuses := make([]int, connections)
		failures := make(chan error, connections)
		var wg sync.WaitGroup
		for i, conn := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				if _, err := io.WriteString(conn, rawPost("/v1/completions", len(short))+short); err != nil {
					failures <- err
					return
				}
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil {
					failures <- err
					return
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				statuses[i] = resp.StatusCode
				var answer struct {
					Choices []json.RawMessage `json:"choices"`
					Error   *struct{ Message string }
				}
				switch {
				case err != nil || json.Unmarshal(body, &answer) != nil:
					failures <- fmt.Errorf("status %d, body %q: %v", resp.StatusCode, body, err)
				case resp.StatusCode == http.StatusOK && len(answer.Choices) == 1:
				case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" &&
					answer.Error != nil && strings.Contains(answer.Error.Message, "limit of 4 concurrent requests"):
				default:
					failures <- fmt.Errorf("status %d, Retry-After %q, body %s", resp.StatusCode,
						resp.Header.Get("Retry-After"), body)
				}
			}()
		}
		wg.Wait()
		close(failures)
		for err := range failures {
			t.Fatal(err)
		}
		byStatus := map[int]int{}
		for _, status := range statuses {
			byStatus[status]++
		}
		return byStatus
	}

	// Four streams hold every slot: each of the thousand is refused at once.
	var holders []net.Conn
	for range l.maxConcurrentRequests {
		conn, _ := startStream(t, ts, nil)
		holders = append(holders, conn)
	}
	if got := storm(); got[http.StatusServiceUnavailable] != connections {
		t.Fatalf("with every slot held: %v, want %d 503s", got, connections)
	}
	// Monitoring is not bounded: /health still answers.
	resp, err := http.Get(ts.URL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/health: %d while the slots are held", resp.StatusCode)
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	for _, conn := range holders {
		conn.Close()
	}
	waitFor(t, "releasing the slots", func() bool { return len(s.slots) == 0 }, noDetail)

	// Free slots: the first comes in, the others get an answer or a 503, and none waits for a slot.
	got := storm()
	if got[http.StatusOK] == 0 || got[http.StatusOK]+got[http.StatusServiceUnavailable] != connections {
		t.Fatalf("with the slots free: %v, want %d answers or 503s, at least one answer", got, connections)
	}
	t.Logf("with the slots free: %d answers, %d 503s", got[http.StatusOK], got[http.StatusServiceUnavailable])

	// And the gateway serves on.
	conn := dial(t, ts, nil)
	if _, err := io.WriteString(conn, rawPost("/v1/completions", len(short))+short); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(bufio.NewReader(conn), nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("after the storms: %v, %v", resp, err)
	}
	conn.Close()
	settled(t, s, baseline)
}

// slowBody opens a connection and sends a POST's headers announcing contentLength bytes, then only sent of them;
// the body is left unfinished until the connection is closed.
func slowBody(t *testing.T, ts *httptest.Server, path string, contentLength int, sent string) net.Conn {
	t.Helper()
	conn := dial(t, ts, nil)
	if _, err := io.WriteString(conn, rawPost(path, contentLength)+sent); err != nil {
		t.Fatal(err)
	}
	return conn
}

// postTo sends body to path with client and returns the answer's status and body.
func postTo(t *testing.T, client *http.Client, url, body string) (int, string) {
	t.Helper()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(answer)
}

// Issue 43: a slot was taken before the body was read, so 256 clients sending their bodies slowly made every
// completion answer 503 until --read-body-timeout. A body is now read before admission: slow bodies hold no
// slot, and the others are served meanwhile.
func TestSlowBodiesHoldNoSlot(t *testing.T) {
	l := defaultLimits()
	s, ts := startGateway(t, l, nil)
	transport := &http.Transport{}
	client := &http.Client{Transport: transport}
	baseline := runtime.NumGoroutine()

	var slow []net.Conn
	for range l.maxConcurrentRequests {
		slow = append(slow, slowBody(t, ts, "/v1/completions", 1000, `{"prompt": "`))
	}
	waitFor(t, "reading every slow body", func() bool {
		return s.metrics.bodiesReading.Load() == int64(l.maxConcurrentRequests)
	}, func() string { return fmt.Sprintf("%d bodies reading", s.metrics.bodiesReading.Load()) })
	for _, c := range []struct{ path, body string }{
		{"/v1/completions", `{"prompt": "Hi", "max_tokens": 1}`},
		{"/tokenize", `{"prompt": "Hi"}`},
	} {
		if status, answer := postTo(t, client, ts.URL+c.path, c.body); status != http.StatusOK {
			t.Fatalf("%s beside %d slow bodies: %d %s", c.path, len(slow), status, answer)
		}
	}
	for _, conn := range slow {
		conn.Close()
	}
	transport.CloseIdleConnections()
	settled(t, s, baseline)
}

// The bytes of bodies being read are bounded over every request (--max-body-bytes-in-flight), counted as they
// arrive: clients that send most of a large body and stall hold them until --read-body-timeout, and meanwhile
// another body is refused at once with a 503 naming the limit, not queued. A body larger than the whole budget
// is a 413 naming it, and one whose Content-Length is over --max-body-bytes a 413 before any byte is read.
func TestBodyBytesInFlightAreBounded(t *testing.T) {
	l := defaultLimits()
	l.maxBodyBytes = 32 << 10
	l.maxBodyBytesInFlight = 64 << 10
	l.maxEngineWorkBytes = 64 << 10
	s, ts := startGateway(t, l, nil)
	transport := &http.Transport{}
	client := &http.Client{Transport: transport}
	baseline := runtime.NumGoroutine()
	const ok = `{"prompt": "Hi", "max_tokens": 1}`

	// Two bodies of 32 KiB, all but their last byte sent: their buffers, of exactly the announced size, take
	// the whole budget.
	prefix := `{"prompt": "` + strings.Repeat("a", 32<<10-20)
	var stalled []net.Conn
	for range 2 {
		stalled = append(stalled, slowBody(t, ts, "/v1/completions", 32<<10, prefix))
	}
	waitFor(t, "holding the two stalled bodies", func() bool { return s.bodyBytes.used.Load() == 64<<10 },
		func() string { return fmt.Sprintf("%d bytes held", s.bodyBytes.used.Load()) })
	for _, path := range []string{"/v1/completions", "/tokenize", "/detokenize"} {
		resp, err := client.Post(ts.URL+path, "application/json", strings.NewReader(ok))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s: no Retry-After", path)
		}
		openAIErrorBody(t, resp, http.StatusServiceUnavailable,
			"limit of 65536 bytes of request bodies being read (--max-body-bytes-in-flight)")
	}
	// Monitoring reads no body: it still answers.
	if resp, err := client.Get(ts.URL + "/health"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/health with the budget held: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	for _, conn := range stalled {
		conn.Close()
	}
	waitFor(t, "releasing the stalled bodies", func() bool { return s.bodyBytes.used.Load() == 0 }, noDetail)
	if status, answer := postTo(t, client, ts.URL+"/v1/completions", ok); status != http.StatusOK {
		t.Fatalf("after the stalled bodies: %d %s", status, answer)
	}

	// Content-Length over --max-body-bytes: refused from the headers alone, before the body is sent.
	conn := dial(t, ts, nil)
	if _, err := io.WriteString(conn, rawPost("/v1/completions", 1<<30)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	openAIErrorBody(t, resp, http.StatusRequestEntityTooLarge, "larger than 32768 bytes (--max-body-bytes)")
	conn.Close()
	transport.CloseIdleConnections()
	settled(t, s, baseline)

	// No --max-body-bytes: a body that the whole budget cannot hold is a 413 naming the budget.
	l.maxBodyBytes = 0
	s, ts = startGateway(t, l, nil)
	baseline = runtime.NumGoroutine()
	resp, err = client.Post(ts.URL+"/v1/completions", "application/json",
		hiddenLength{io.LimitReader(zeros{}, 1<<20)})
	if err != nil {
		t.Fatal(err)
	}
	openAIErrorBody(t, resp, http.StatusRequestEntityTooLarge,
		"larger than the 65536 bytes that the gateway holds of all bodies at once (--max-body-bytes-in-flight)")
	transport.CloseIdleConnections()
	settled(t, s, baseline)
}

// /tokenize and /detokenize are bounded as completions are: their bodies by --max-body-bytes (413), their engine
// work by --max-concurrent-requests and --max-engine-work-bytes (503 at once), with /detokenize's answer counted
// at its largest; a completion finds the slot of a tokenization taken as it would another completion's.
func TestTokenizeAndDetokenizeAreBounded(t *testing.T) {
	l := defaultLimits()
	l.maxBodyBytes = 4096
	l.maxConcurrentRequests = 1
	l.maxEngineWorkBytes = 8192
	s, ts := startGateway(t, l, nil)
	transport := &http.Transport{}
	client := &http.Client{Transport: transport}
	baseline := runtime.NumGoroutine()

	for _, c := range []struct{ path, body string }{
		{"/tokenize", `{"prompt": "` + strings.Repeat("a", 5000) + `"}`},
		{"/detokenize", `{"tokens": [` + strings.Repeat("1, ", 2000) + `1]}`},
	} {
		resp, err := client.Post(ts.URL+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		openAIErrorBody(t, resp, http.StatusRequestEntityTooLarge, "larger than 4096 bytes (--max-body-bytes)")
	}

	// 1,000 ids of SmolLM2's longest token (81 bytes) could make an answer of 81,000 bytes: more than the
	// engine works on at once, refused by the count before any work.
	longest, err := s.longestToken()
	if err != nil || longest < 2 {
		t.Fatalf("longest token: %d bytes, %v", longest, err)
	}
	ids := strings.TrimSuffix(strings.Repeat("7, ", 8192/longest+1), ", ")
	resp, err := client.Post(ts.URL+"/detokenize", "application/json", strings.NewReader(`{"tokens": [`+ids+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	openAIErrorBody(t, resp, http.StatusBadRequest, "(--max-engine-work-bytes): send fewer ids at once")

	// A stream holds the one slot: tokenizing is refused as another completion would be.
	holder, _ := startStream(t, ts, nil)
	for _, c := range []struct{ path, body string }{
		{"/tokenize", `{"prompt": "Hi"}`},
		{"/detokenize", `{"tokens": [7]}`},
	} {
		resp, err := client.Post(ts.URL+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Get("Retry-After") == "" {
			t.Errorf("%s: no Retry-After", c.path)
		}
		openAIErrorBody(t, resp, http.StatusServiceUnavailable,
			"limit of 1 concurrent requests (--max-concurrent-requests)")
	}
	holder.Close()
	waitFor(t, "releasing the stream's slot", func() bool { return len(s.slots) == 0 }, noDetail)

	// A tokenization holds the slot, and its body's bytes as engine work, until it has answered.
	admitted, release := make(chan struct{}), make(chan struct{})
	s.onAdmit = func(r *http.Request) {
		if r.URL.Path == "/tokenize" {
			admitted <- struct{}{}
			<-release
		}
	}
	tokenized := make(chan int)
	go func() {
		status, _ := postTo(t, client, ts.URL+"/tokenize", `{"prompt": "Hi"}`)
		tokenized <- status
	}()
	<-admitted
	if got := s.workBytes.used.Load(); got != int64(len(`{"prompt": "Hi"}`)) {
		t.Errorf("a tokenization holds %d bytes of engine work, want its body's %d", got, len(`{"prompt": "Hi"}`))
	}
	resp, err = client.Post(ts.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt": "Hi", "max_tokens": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	openAIErrorBody(t, resp, http.StatusServiceUnavailable, "(--max-concurrent-requests)")
	close(release)
	if status := <-tokenized; status != http.StatusOK {
		t.Fatalf("the held tokenization: %d", status)
	}

	// With slots to spare, the engine's work bytes bound alone: a body that would take them past the limit
	// is refused while another holds them.
	s.onAdmit = nil
	l.maxConcurrentRequests = 4
	l.maxEngineWorkBytes = 4096
	transport.CloseIdleConnections()
	settled(t, s, baseline)
	s, ts = startGateway(t, l, nil)
	baseline = runtime.NumGoroutine()
	admitted, release = make(chan struct{}), make(chan struct{})
	s.onAdmit = func(r *http.Request) {
		if r.URL.Path == "/tokenize" {
			admitted <- struct{}{}
			<-release
		}
	}
	big := `{"prompt": "` + strings.Repeat("a", 3000) + `"}`
	go func() {
		status, _ := postTo(t, client, ts.URL+"/tokenize", big)
		tokenized <- status
	}()
	<-admitted
	resp, err = client.Post(ts.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt": "`+strings.Repeat("b", 1500)+`", "max_tokens": 1}`))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Error("engine work bytes: no Retry-After")
	}
	openAIErrorBody(t, resp, http.StatusServiceUnavailable,
		"working on its limit of 4096 bytes of request bodies (--max-engine-work-bytes)")
	close(release)
	if status := <-tokenized; status != http.StatusOK {
		t.Fatalf("the held tokenization: %d", status)
	}
	s.onAdmit = nil
	transport.CloseIdleConnections()
	settled(t, s, baseline)
}

// requestsEnded is the engine's count of choices that ended, whatever the reason (ember_request_success_total
// summed over finish reasons): a request the engine has seen ends there, even one cancelled before it started.
func requestsEnded(t *testing.T) float64 {
	t.Helper()
	text, err := testEngine.MetricsText()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "ember_request_success_total{") {
			value, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			sum += value
		}
	}
	return sum
}

// A client that leaves once its body is in, before the gateway has submitted it, costs the engine nothing: no
// request is submitted (its grammar, here a JSON schema, is never compiled), and the answer is counted as 499;
// a /tokenize is not tokenized either (it would be answered, and counted, 200).
// The hook holds the request between admission and submission until the gateway has seen the client go, which
// is the window the check closes; a client that leaves during the submission itself is seen once the engine
// returns, and its request cancelled (TestDisconnectMidStreamCancelsTheEngineRequest covers what follows).
func TestAClientGoneBeforeSubmitStartsNoEngineWork(t *testing.T) {
	s, ts := startGateway(t, defaultLimits(), nil)
	baseline := runtime.NumGoroutine()
	const body = `{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "response_format": ` +
		`{"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": ` +
		`{"a": {"type": "string"}}}}}}`

	// The premise: the same request from a client that stays is an ended choice in the engine's count.
	before := requestsEnded(t)
	if status, answer := postTo(t, http.DefaultClient, ts.URL+"/v1/chat/completions", body); status != http.StatusOK {
		t.Fatalf("%d %s", status, answer)
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	waitFor(t, "counting the request in the engine", func() bool { return requestsEnded(t) == before+1 },
		func() string { return fmt.Sprintf("%v ended, %v before", requestsEnded(t), before) })

	for _, path := range []string{"/v1/chat/completions", "/tokenize"} {
		payload := body
		if path == "/tokenize" {
			payload = `{"prompt": "Hi"}`
		}
		admitted := make(chan struct{})
		s.onAdmit = func(r *http.Request) {
			admitted <- struct{}{}
			<-r.Context().Done() // net/http has seen the connection close
		}
		before = requestsEnded(t)
		conn := dial(t, ts, nil)
		if _, err := io.WriteString(conn, rawPost(path, len(payload))+payload); err != nil {
			t.Fatal(err)
		}
		<-admitted
		conn.Close()
		endpoint := map[string]string{"/v1/chat/completions": "chat", "/tokenize": "tokenize"}[path]
		waitFor(t, "counting "+path+"'s client as gone", func() bool {
			return count(s, endpoint, statusClientClosed) == 1
		}, noDetail)
		if got := requestsEnded(t); got != before {
			t.Fatalf("%s: %v requests ended in the engine, %v before: the gateway submitted for a client that had left",
				path, got, before)
		}
	}
	s.onAdmit = nil
	settled(t, s, baseline)
}
