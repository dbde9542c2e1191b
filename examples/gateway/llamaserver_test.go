package main

// llama-server's routes over the real model: /completion whole and streamed, /tokenize with `content` and
// `with_pieces`, /detokenize's `content`, /props (whose defaults are a completion's generation_settings) and
// /slots.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// getJSON decodes the answer of GET path, which must be 200.
func getJSON(t *testing.T, path string, into any) {
	t.Helper()
	resp, err := http.Get(testServer.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	decodeJSON(t, resp, http.StatusOK, into)
}

func TestLlamaCompletionIsTheCompletionsText(t *testing.T) {
	var openAI struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	decodeJSON(t, post(t, "/v1/completions", `{"prompt": "The sky is", "max_tokens": 6, "temperature": 0}`),
		http.StatusOK, &openAI)
	for _, path := range llamaServerPaths {
		var answer struct {
			Content         string `json:"content"`
			Stop            bool   `json:"stop"`
			TokensPredicted int    `json:"tokens_predicted"`
			StopType        string `json:"stop_type"`
		}
		decodeJSON(t, post(t, path, `{"prompt": "The sky is", "n_predict": 6, "temperature": 0}`), http.StatusOK,
			&answer)
		if answer.Content != openAI.Choices[0].Text || !answer.Stop || answer.TokensPredicted == 0 {
			t.Errorf("%s: %+v; /v1/completions says %q", path, answer, openAI.Choices[0].Text)
		}
	}
	// A refusal names llama-server's field, in an error body llama-server's clients read.
	e := openAIError(t, post(t, "/completion", `{"prompt": "x", "mirostat": 2}`), http.StatusBadRequest)
	if e.Error.Param == nil || *e.Error.Param != "mirostat" {
		t.Errorf("refusal %+v", e)
	}
}

// The stream is read as llama.cpp's clients read it: `data: ` lines of JSON, no [DONE], the last one stop:true.
func TestLlamaCompletionStream(t *testing.T) {
	resp := post(t, "/completion", `{"prompt": "The sky is", "n_predict": 6, "temperature": 0, "stream": true}`)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var content strings.Builder
	var last map[string]any
	scanner := bufio.NewScanner(resp.Body)
	for scanner.Scan() {
		line := scanner.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok || data == "[DONE]" {
			t.Fatalf("line %q", line)
		}
		last = nil
		if err := json.Unmarshal([]byte(data), &last); err != nil {
			t.Fatal(err)
		}
		content.WriteString(last["content"].(string))
	}
	var whole struct {
		Content string `json:"content"`
	}
	decodeJSON(t, post(t, "/completion", `{"prompt": "The sky is", "n_predict": 6, "temperature": 0}`),
		http.StatusOK, &whole)
	if last["stop"] != true || last["stop_type"] == nil || content.String() != whole.Content {
		t.Errorf("last %v; streamed %q, whole %q", last, content.String(), whole.Content)
	}
}

func TestLlamaTokenizeAndDetokenize(t *testing.T) {
	const text = "Hello 漢字"
	want, err := testEngine.Tokenize(text, false, true)
	if err != nil {
		t.Fatal(err)
	}
	var ids struct {
		Tokens []uint32 `json:"tokens"`
	}
	decodeJSON(t, post(t, "/tokenize", `{"content": "`+text+`"}`), http.StatusOK, &ids)
	if !reflect.DeepEqual(ids.Tokens, want) {
		t.Fatalf("/tokenize {content}: %v; want %v", ids.Tokens, want)
	}
	// Pieces: text where it is UTF-8, bytes where a token ends inside a character; together, the text.
	var pieces struct {
		Tokens []struct {
			ID    uint32          `json:"id"`
			Piece json.RawMessage `json:"piece"`
		} `json:"tokens"`
	}
	decodeJSON(t, post(t, "/tokenize", `{"content": "`+text+`", "with_pieces": true}`), http.StatusOK, &pieces)
	var all []byte
	asBytes := 0
	for i, p := range pieces.Tokens {
		var s string
		var b []int
		switch {
		case json.Unmarshal(p.Piece, &s) == nil:
			all = append(all, s...)
		case json.Unmarshal(p.Piece, &b) == nil:
			asBytes++
			for _, x := range b {
				all = append(all, byte(x))
			}
		default:
			t.Fatalf("piece %s", p.Piece)
		}
		if p.ID != want[i] {
			t.Errorf("piece %d has id %d, want %d", i, p.ID, want[i])
		}
	}
	if string(all) != text || asBytes == 0 {
		t.Errorf("pieces give %q (%d as bytes); want %q with some split inside a character", all, asBytes, text)
	}
	// Ids and texts mixed, each text tokenized in place.
	hello, _ := testEngine.Tokenize("Hello", false, true)
	decodeJSON(t, post(t, "/tokenize", fmt.Sprintf(`{"content": [%d, " 漢字"]}`, hello[0])), http.StatusOK, &ids)
	if !reflect.DeepEqual(ids.Tokens, want) {
		t.Errorf("mixed content: %v; want %v", ids.Tokens, want)
	}
	e := openAIError(t, post(t, "/tokenize", `{"content": "a", "prompt": "b"}`), http.StatusBadRequest)
	if e.Error.Param == nil || *e.Error.Param != "prompt" {
		t.Errorf("a vLLM field in llama-server's body: %+v", e)
	}
	// /detokenize answers both servers' field.
	body, _ := json.Marshal(map[string]any{"tokens": want})
	var back struct{ Prompt, Content string }
	decodeJSON(t, post(t, "/detokenize", string(body)), http.StatusOK, &back)
	if back.Content != text || back.Prompt != text {
		t.Errorf("/detokenize: %+v; want %q in both", back, text)
	}
}

func TestPropsAgreeWithACompletion(t *testing.T) {
	var props struct {
		Defaults struct {
			NCtx   int            `json:"n_ctx"`
			Params map[string]any `json:"params"`
		} `json:"default_generation_settings"`
		TotalSlots   int             `json:"total_slots"`
		ModelPath    string          `json:"model_path"`
		ChatTemplate string          `json:"chat_template"`
		Modalities   map[string]bool `json:"modalities"`
		BuildInfo    string          `json:"build_info"`
		EOSToken     string          `json:"eos_token"`
	}
	getJSON(t, "/props", &props)
	info, err := testServerInfo()
	if err != nil {
		t.Fatal(err)
	}
	if props.Defaults.NCtx != info.MaxModelLen || props.TotalSlots != 64 || !strings.HasSuffix(props.ModelPath,
		".gguf") || !strings.Contains(props.ChatTemplate, "im_start") || props.Modalities["vision"] ||
		!strings.HasPrefix(props.BuildInfo, "ember ") || props.EOSToken == "" {
		t.Fatalf("/props: %+v", props)
	}
	// The defaults are what a /completion request that sets nothing (but its length) gets.
	var answer struct {
		Settings map[string]any `json:"generation_settings"`
	}
	decodeJSON(t, post(t, "/completion", `{"prompt": "Hi", "n_predict": 1}`), http.StatusOK, &answer)
	for _, bounded := range []string{"n_predict", "max_tokens"} {
		delete(answer.Settings, bounded)
		delete(props.Defaults.Params, bounded)
	}
	if !reflect.DeepEqual(answer.Settings, props.Defaults.Params) {
		t.Errorf("/props params %v\n/completion generation_settings %v", props.Defaults.Params, answer.Settings)
	}
}

func TestSlots(t *testing.T) {
	var slots []struct {
		ID           *int  `json:"id"`
		IsProcessing *bool `json:"is_processing"`
	}
	getJSON(t, "/slots", &slots)
	if len(slots) != 64 || slots[63].ID == nil || *slots[63].ID != 63 || slots[0].IsProcessing == nil {
		t.Fatalf("/slots: %d slots, %+v", len(slots), slots[0])
	}
	resp, err := http.Get(testServer.URL + "/slots?fail_on_no_slot=1")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("an idle engine has free slots: %d", resp.StatusCode)
	}
}

// testServerInfo is the model description the test gateway's engine gives.
func testServerInfo() (modelInfo, error) {
	raw, err := testEngine.ModelInfo()
	var info modelInfo
	if err == nil {
		err = json.Unmarshal(raw, &info)
	}
	return info, err
}
