package ember

// Embeddings on an encoder engine: a synthetic bge-small (two layers, 384-wide vectors, llama.cpp's real BERT
// vocabulary) that `ember-cli synthetic` writes into a temporary directory, or EMBER_ENCODER_MODEL. The generating
// engine of the other tests (shared) refuses Embed. rerank_test.go writes its reranker the same way.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// bgeWidth is bge-small's hidden size: every vector's length.
const bgeWidth = 384

// syntheticFile is a model file that ember-cli writes once per test run.
type syntheticFile struct {
	once sync.Once
	path string
	dir  string // the temporary directory it was written to, removed by removeEncoderModel; "" for none
	err  error
}

// encoderFile is the encoder (bge-small); rerankerFile the reranker (bge-small-rerank: bge-small's layers and a
// cross-encoder's classification head), rerank_test.go's.
var encoderFile, rerankerFile syntheticFile

// encoderModelPath is EMBER_ENCODER_MODEL, else a synthetic bge-small written once per test run.
func encoderModelPath(t *testing.T) string {
	t.Helper()
	return encoderFile.get(t, "EMBER_ENCODER_MODEL", "bge-small")
}

// get is the file named by the environment variable env, else a synthetic file of the family written once per
// test run by ember-cli (EMBER_CLI, else target/release/ember-cli) with llama.cpp's BERT vocabulary
// (EMBER_LLAMACPP_VOCABS, else .cache/llamacpp/vocab; `make vocabs` fetches it).
func (f *syntheticFile) get(t *testing.T, env, family string) string {
	t.Helper()
	f.once.Do(func() {
		if f.path = os.Getenv(env); f.path != "" {
			return
		}
		cli := os.Getenv("EMBER_CLI")
		if cli == "" {
			cli = filepath.Join("..", "..", "target", "release", "ember-cli")
		}
		vocabs := os.Getenv("EMBER_LLAMACPP_VOCABS")
		if vocabs == "" {
			vocabs = filepath.Join("..", "..", ".cache", "llamacpp", "vocab")
		}
		if f.dir, f.err = os.MkdirTemp("", "ember-go-embed-"); f.err != nil {
			return
		}
		f.path = filepath.Join(f.dir, family+"-synthetic.gguf")
		out, err := exec.Command(cli, "synthetic", f.path, "--family", family, "--layers", "2", "--seed", "1",
			"--vocab", filepath.Join(vocabs, "ggml-vocab-bert-bge.gguf")).CombinedOutput()
		if err != nil {
			f.err = fmt.Errorf("%s synthetic: %v: %s (build it with `cargo build --release --bin ember-cli`, "+
				"fetch the vocabulary with `make vocabs`, or set %s)", cli, err, out, env)
		}
	})
	if f.err != nil {
		t.Fatal(f.err)
	}
	return f.path
}

// removeEncoderModel deletes the synthetic files, if the tests wrote any (TestMain calls it).
func removeEncoderModel() {
	for _, f := range []*syntheticFile{&encoderFile, &rerankerFile} {
		if f.dir != "" {
			_ = os.RemoveAll(f.dir)
		}
	}
}

// encoderEngine starts an engine on the encoder file, closed when the test ends.
func encoderEngine(t *testing.T, config Config) *Engine {
	t.Helper()
	config.Model, config.Threads, config.ServedModelName = encoderModelPath(t), 2, "bge-test"
	engine, err := NewEngine(config)
	if err != nil {
		t.Fatalf("NewEngine on the encoder: %v", err)
	}
	t.Cleanup(engine.Close)
	return engine
}

type embeddingsBody struct {
	Object string `json:"object"`
	Model  string `json:"model"`
	Data   []struct {
		Object string `json:"object"`
		Index  int    `json:"index"`
	} `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func norm(v []float32) float64 {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	return math.Sqrt(sum)
}

func TestEncoderEngineEmbeds(t *testing.T) {
	engine := encoderEngine(t, Config{})
	texts := []string{"Hello, world!", "Embeddings through Go", "a"}
	request, _ := json.Marshal(map[string]any{"input": texts, "model": "anything"})
	body, err := engine.Embed(string(request))
	if err != nil {
		t.Fatal(err)
	}
	var r embeddingsBody
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("response %.200s: %v", body, err)
	}
	if r.Object != "list" || r.Model != "bge-test" || len(r.Data) != len(texts) || r.Data[2].Index != 2 ||
		r.Data[0].Object != "embedding" {
		t.Errorf("response %.300s", body)
	}
	// [CLS] and [SEP] around each text: at least 3 tokens each.
	if r.Usage.PromptTokens < 3*len(texts) || r.Usage.TotalTokens != r.Usage.PromptTokens {
		t.Errorf("usage %+v", r.Usage)
	}
	floats, err := DecodeEmbeddings([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	// EmbedTexts reads base64: the same float32 bits as the JSON numbers (each is the shortest text of its f32).
	vectors, err := engine.EmbedTexts(texts)
	if err != nil {
		t.Fatal(err)
	}
	if len(vectors) != len(texts) {
		t.Fatalf("%d vectors for %d texts", len(vectors), len(texts))
	}
	for i, v := range vectors {
		if len(v) != bgeWidth || math.Abs(norm(v)-1) > 1e-5 {
			t.Errorf("vector %d: width %d, norm %v; want %d wide, unit length", i, len(v), norm(v), bgeWidth)
		}
		for j := range v {
			if v[j] != floats[i][j] {
				t.Fatalf("vector %d[%d]: base64 %v, float %v", i, j, v[j], floats[i][j])
			}
		}
	}
	if vectors[0][0] == vectors[1][0] && vectors[0][1] == vectors[1][1] {
		t.Errorf("two texts, the same vector start: %v %v", vectors[0][:2], vectors[1][:2])
	}
	// Matryoshka truncation: the first N, normalized again.
	body, err = engine.Embed(`{"input": "Hello, world!", "dimensions": 64, "encoding_format": "base64"}`)
	if err != nil {
		t.Fatal(err)
	}
	short, err := DecodeEmbeddings([]byte(body))
	if err != nil || len(short) != 1 || len(short[0]) != 64 || math.Abs(norm(short[0])-1) > 1e-5 {
		t.Errorf("dimensions 64: %d vectors, err %v", len(short), err)
	}
}

func TestEmbedRefusalsAreTyped(t *testing.T) {
	engine := encoderEngine(t, Config{})
	cases := []struct{ body, field string }{
		{`{"input": "a", "dimensions": 1000}`, "dimensions"},
		{`{"input": "a", "temperature": 0}`, "temperature"},
		{`{"input": []}`, "input"},
		{`{"input": "a", "encoding_format": "hex"}`, "encoding_format"},
		{`{}`, "input"},
		{`{"input": "` + strings.Repeat("word ", 600) + `"}`, "input[0]"},
		{"{\"input\": \"a\"}\x00", "NUL"},
	}
	for _, c := range cases {
		_, err := engine.Embed(c.body)
		var e *Error
		if !errors.As(err, &e) || e.Status != StatusInvalidRequest || e.Op != "engine_embed" ||
			!errors.Is(err, StatusInvalidRequest) {
			t.Errorf("%.40s: err = %v, want an *Error with StatusInvalidRequest", c.body, err)
			continue
		}
		if !strings.Contains(e.Message, c.field) {
			t.Errorf("%.40s: message %q does not name %s", c.body, e.Message, c.field)
		}
	}
	// 2,048 inputs is the most one request takes.
	many := make([]string, 2049)
	for i := range many {
		many[i] = "x"
	}
	if _, err := engine.EmbedTexts(many); !errors.Is(err, StatusInvalidRequest) {
		t.Errorf("2,049 texts: err = %v, want StatusInvalidRequest", err)
	}
	if vectors, err := engine.EmbedTexts(many[:2048]); err != nil || len(vectors) != 2048 {
		t.Errorf("2,048 texts: %d vectors, err %v", len(vectors), err)
	}

	// The encoder engine serves embeddings only.
	_, err := engine.Submit(context.Background(), chat("Hi", 4, ""))
	var e *Error
	if !errors.As(err, &e) || e.Status != StatusInvalidRequest || !strings.Contains(e.Message, "serves embeddings") {
		t.Errorf("Submit on an encoder engine: err = %v", err)
	}

	engine.Close()
	if _, err := engine.Embed(`{"input": "a"}`); !errors.Is(err, StatusInvalidHandle) {
		t.Errorf("Embed on a closed engine: err = %v, want StatusInvalidHandle", err)
	}
}

func TestEmbedOverloaded(t *testing.T) {
	// One request may wait: while a large one is being computed, others are refused at once.
	engine := encoderEngine(t, Config{MaxWaitingRequests: 1})
	large := make([]string, 2048)
	for i := range large {
		large[i] = fmt.Sprintf("sentence %d of a large batch", i)
	}
	for attempt := 0; attempt < 5; attempt++ {
		done := make(chan error, 1)
		go func() {
			_, err := engine.EmbedTexts(large)
			done <- err
		}()
		// A head start, so that the large request is queued first (it is refused itself when it comes while a
		// small one waits: then the attempt is lost).
		time.Sleep(time.Duration(10*(attempt+1)) * time.Millisecond)
		checkLarge := func(err error) {
			if err != nil && !errors.Is(err, StatusOverloaded) {
				t.Fatalf("the large request: %v", err)
			}
		}
		for {
			select {
			case err := <-done:
				checkLarge(err)
			default:
				_, err := engine.Embed(`{"input": "small"}`)
				if err == nil {
					continue
				}
				var e *Error
				if !errors.As(err, &e) || !errors.Is(err, StatusOverloaded) || e.Op != "engine_embed" ||
					!strings.Contains(e.Message, "waiting") {
					t.Fatalf("err = %v, want StatusOverloaded", err)
				}
				checkLarge(<-done)
				return
			}
			break // the large request has ended before a small one was refused: try again
		}
	}
	t.Fatal("no request was refused as overloaded in 5 attempts")
}

func TestGeneratingEngineRefusesEmbed(t *testing.T) {
	_, err := shared.Embed(`{"input": "a"}`)
	var e *Error
	if !errors.As(err, &e) || e.Status != StatusInvalidRequest || e.Op != "engine_embed" ||
		!strings.Contains(e.Message, "encoder model") {
		t.Errorf("Embed on a generating engine: err = %v", err)
	}
	if _, err := shared.EmbedTexts([]string{"a"}); !errors.Is(err, StatusInvalidRequest) {
		t.Errorf("EmbedTexts on a generating engine: err = %v", err)
	}
}

func TestDecodeEmbeddings(t *testing.T) {
	// 1.0 and 2.0 as little-endian float32, in base64; data out of order is put back in index order.
	vectors, err := DecodeEmbeddings([]byte(`{"data": [{"index": 1, "embedding": [0.5, -1]},
		{"index": 0, "embedding": "AACAPwAAAEA="}]}`))
	if err != nil || len(vectors) != 2 || vectors[0][0] != 1 || vectors[0][1] != 2 || vectors[1][1] != -1 {
		t.Errorf("vectors %v, err %v", vectors, err)
	}
	for _, bad := range []string{
		`{"data": [{"index": 1, "embedding": []}]}`,
		`{"data": [{"index": 0, "embedding": "AAA"}]}`,
		`{"data": [{"index": 0, "embedding": [1]}, {"index": 0, "embedding": [1]}]}`,
		`[]`,
	} {
		if _, err := DecodeEmbeddings([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
