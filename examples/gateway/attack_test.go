package main

// The gateway's part of issue 43's standing attack suite: each case starts the gateway as a process of its own,
// with the default limits, under a memory cap and a time cap, aims one attack at it, and then checks that it
// survived: it still answers /health and a normal completion, its peak resident memory (reported) stayed under
// the cap, and it shuts down cleanly on SIGTERM.
//
// The gateway is this test binary run again (attackChildEnv diverts TestMain to main()), so the suite needs no
// separate build. The memory cap is RLIMIT_DATA, not RLIMIT_AS: the idle gateway already has 2.4 GB of address
// space (Go's heap reservations, glibc's 64 MiB arena per thread that calls into ember), nearly all of it never
// touched, and under RLIMIT_AS of 2 GiB the engine could not even load. RLIMIT_DATA counts what can be written
// (private writable mappings: Go's heap and goroutine stacks, the engine's allocations; 0.7 GB at idle), so an
// allocation past it fails and the process dies: an attack that makes the gateway hold more than the cap ends the
// case. The time cap only detects a hang: it kills the gateway, and the case fails.
//
// Nothing is timed: each step waits on what the gateway reports (its /metrics) or on answers.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// attackChildEnv, when set, makes the test binary the gateway: its value is the gateway's arguments, as JSON.
const attackChildEnv = "EMBER_GATEWAY_ATTACK_CHILD"

// memoryCap is each case's RLIMIT_DATA.
const memoryCap = 2 << 30

// timeCap bounds each case, the gateway's start and shutdown included; only a hang reaches it.
const timeCap = 3 * time.Minute

// runAttackChild runs the gateway, capped, and exits with its status (main exits 1 itself on failure).
func runAttackChild(argsJSON string) {
	var args []string
	if err := json.Unmarshal([]byte(argsJSON), &args); err != nil {
		fmt.Fprintln(os.Stderr, "attack child:", err)
		os.Exit(3)
	}
	limit := syscall.Rlimit{Cur: memoryCap, Max: memoryCap}
	if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &limit); err != nil {
		fmt.Fprintln(os.Stderr, "attack child: RLIMIT_DATA:", err)
		os.Exit(3)
	}
	os.Args = append([]string{"ember-gateway"}, args...)
	main()
	os.Exit(0)
}

// cappedGateway is a gateway process under the caps.
type cappedGateway struct {
	cmd    *exec.Cmd
	url    string
	stderr *lockedBuffer
	exited chan struct{} // closed once the process has exited
	err    error         // its exit, once exited is closed
}

// lockedBuffer collects the gateway's log, written by the process's pipe and read by a failing test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startCapped starts the gateway with the default limits under the caps and waits for it to listen.
func startCapped(t *testing.T) *cappedGateway {
	t.Helper()
	model := os.Getenv("EMBER_MODEL")
	if model == "" {
		model = filepath.Join("..", "..", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
	}
	args, _ := json.Marshal([]string{"--model", model, "--listen", "127.0.0.1:0", "--threads", "2"})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), attackChildEnv+"="+string(args))
	g := &cappedGateway{cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = g.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		g.err = cmd.Wait()
		close(g.exited)
	}()
	hang := time.AfterFunc(timeCap, func() { _ = cmd.Process.Kill() })
	t.Cleanup(func() {
		hang.Stop()
		_ = cmd.Process.Kill()
		<-g.exited
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	_, address, found := strings.Cut(strings.TrimSpace(line), "listening on ")
	if err != nil || !found {
		t.Fatalf("the gateway did not start: %q %v\n%s", line, err, g.stderr)
	}
	g.url = address
	return g
}

// alive fails the test if the gateway process has exited (killed by the cap, or by the time cap).
func (g *cappedGateway) alive(t *testing.T) {
	t.Helper()
	select {
	case <-g.exited:
		t.Fatalf("the gateway died: %v\n%s", g.err, tail(g.stderr.String()))
	default:
	}
}

// tail is the end of a log, for failure messages.
func tail(log string) string {
	if len(log) > 4000 {
		return "..." + log[len(log)-4000:]
	}
	return log
}

// peakRSS is the process's peak resident memory (VmHWM), in bytes.
func (g *cappedGateway) peakRSS(t *testing.T) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", g.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if value, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kB, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(value), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kB << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", g.cmd.Process.Pid)
	return 0
}

// gauge reads one of the gateway's own gauges from its /metrics.
func (g *cappedGateway) gauge(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get(g.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(nil, 1<<20)
	for scanner.Scan() {
		if line := scanner.Text(); strings.HasPrefix(line, name+"{") {
			value, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatal(err)
			}
			return value
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

// serves checks that the gateway serves after (or during) an attack: /health, then a normal completion.
func (g *cappedGateway) serves(t *testing.T, attack string) {
	t.Helper()
	g.alive(t)
	client := &http.Client{Timeout: patience}
	defer client.CloseIdleConnections()
	resp, err := client.Get(g.url + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s, /health: %v %v\n%s", attack, resp, err, tail(g.stderr.String()))
	}
	resp.Body.Close()
	resp, err = client.Post(g.url+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt": "The capital of France is", "max_tokens": 4, "temperature": 0}`))
	if err != nil {
		t.Fatalf("%s, a completion: %v\n%s", attack, err, tail(g.stderr.String()))
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"choices"`)) {
		t.Fatalf("%s, a completion: %d %s", attack, resp.StatusCode, body)
	}
}

// stops reports the gateway's peak memory, checks it against the cap, and that SIGTERM ends the gateway cleanly.
func (g *cappedGateway) stops(t *testing.T, attack string) {
	t.Helper()
	g.alive(t)
	peak := g.peakRSS(t)
	t.Logf("%s: peak RSS %d MiB (cap: %d MiB of data)", attack, peak>>20, memoryCap>>20)
	if peak >= memoryCap {
		t.Errorf("%s: peak RSS %d MiB, at the cap", attack, peak>>20)
	}
	if err := g.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-g.exited
	if g.err != nil {
		t.Fatalf("after %s, the gateway's shutdown: %v\n%s", attack, g.err, tail(g.stderr.String()))
	}
}

// flood sends body to path on n connections at once and counts the outcomes by status ("closed": the gateway
// closed the connection before answering, as it does after refusing a body it has not read to its end). Each
// connection writes and reads at once, as an HTTP client does, so that it sees an early answer.
func (g *cappedGateway) flood(t *testing.T, n int, path string, body []byte) map[string]int {
	t.Helper()
	address := strings.TrimPrefix(g.url, "http://")
	outcomes := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcome := "closed"
			defer func() {
				mu.Lock()
				outcomes[outcome]++
				mu.Unlock()
			}()
			conn, err := net.Dial("tcp", address)
			if err != nil {
				outcome = "dial: " + err.Error()
				return
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(patience))
			go func() {
				_, _ = io.WriteString(conn, rawPost(path, len(body)))
				_, _ = conn.Write(body)
			}()
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			var netErr net.Error
			switch {
			case errors.As(err, &netErr) && netErr.Timeout():
				outcome = "no answer"
			case err == nil:
				outcome = strconv.Itoa(resp.StatusCode)
				_, _ = io.Copy(io.Discard, resp.Body)
			}
		}()
	}
	wg.Wait()
	return outcomes
}

// only fails the test if an outcome is not one of allowed.
func only(t *testing.T, attack string, outcomes map[string]int, allowed ...string) {
	t.Helper()
	t.Logf("%s: %v", attack, outcomes)
	for outcome := range outcomes {
		ok := false
		for _, a := range allowed {
			ok = ok || outcome == a
		}
		if !ok {
			t.Errorf("%s: %d answers %q; want only %v", attack, outcomes[outcome], outcome, allowed)
		}
	}
}

// bodyOfSize is a JSON object of just under the default --max-body-bytes: prefix, then piece repeated, then
// suffix.
func bodyOfSize(prefix, piece, suffix string) []byte {
	n := (defaultLimits().maxBodyBytes - int64(len(prefix)+len(suffix))) / int64(len(piece))
	return []byte(prefix + strings.Repeat(piece, int(n)) + suffix)
}

// 96 bodies of 8 MiB at once, each of the kind that makes the most work of its bytes, on each route that
// works: before the bounds, /tokenize alone held 3.4 GB, /detokenize 12 GB, a chat of tiny messages 3.7 GB.
// Now the bodies being read and the engine's work on them are bounded: a body is answered, refused with a 503,
// or (refused before it was all sent) its connection closed.
func TestAttackLargeBodiesOnEveryRoute(t *testing.T) {
	longestID, longest := 0, 0
	for id := 0; ; id++ {
		text, err := testEngine.Detokenize([]uint32{uint32(id)}, true)
		if err != nil {
			break // past the vocabulary
		}
		if len(text) > longest {
			longestID, longest = id, len(text)
		}
	}
	message := `{"role": "user", "content": "a"}`
	for _, c := range []struct {
		name, path string
		body       []byte
	}{
		// One token per byte: the most tokens, and the longest answer, a text can make.
		{"tokenize", "/tokenize", bodyOfSize(`{"prompt": "`, "1", `"}`)},
		// The longest token's id, over and over: the longest text ids can make.
		{"detokenize", "/detokenize", bodyOfSize(`{"tokens": [`, strconv.Itoa(longestID)+",", `0]}`)},
		// A chat of one-letter messages: the engine parses and renders each (55x the body's bytes).
		{"chat of tiny messages", "/v1/chat/completions",
			bodyOfSize(`{"max_tokens": 1, "messages": [`, message+",", message+`]}`)},
		// A prompt far over the context: the engine tokenizes all of it before it can refuse it.
		{"completion of a long prompt", "/v1/completions",
			bodyOfSize(`{"max_tokens": 1, "prompt": "`, "hello world ", `"}`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := startCapped(t)
			attack := "96 bodies of 8 MiB to " + c.path
			only(t, attack, g.flood(t, 96, c.path, c.body), "200", "400", "503", "closed")
			g.serves(t, "after "+attack)
			g.stops(t, attack)
		})
	}
}

// 1,000 clients send their completion's headers and the start of its body, then nothing (slowloris on bodies):
// before, each took a slot at once, and from the 256th every completion was refused with a 503 until
// --read-body-timeout. Now they hold no slot: a completion is served beside them.
func TestAttackSlowBodies(t *testing.T) {
	const clients = 1000
	g := startCapped(t)
	address := strings.TrimPrefix(g.url, "http://")
	var conns []net.Conn
	t.Cleanup(func() {
		for _, conn := range conns {
			conn.Close()
		}
	})
	for range clients {
		conn, err := net.Dial("tcp", address)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, conn)
		if _, err := io.WriteString(conn, rawPost("/v1/completions", 1000)+`{"prompt": "`); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "reading every slow body", func() bool {
		g.alive(t)
		return g.gauge(t, "ember_gateway_request_bodies_reading") == clients
	}, func() string { return tail(g.stderr.String()) })
	attack := fmt.Sprintf("%d slow bodies", clients)
	g.serves(t, "beside "+attack)
	// Closed now, or the shutdown would wait for --read-body-timeout to end their requests.
	for _, conn := range conns {
		conn.Close()
	}
	waitFor(t, "the slow bodies' end", func() bool {
		g.alive(t)
		return g.gauge(t, "ember_gateway_request_bodies_reading") == 0
	}, func() string { return tail(g.stderr.String()) })
	g.stops(t, attack)
}
