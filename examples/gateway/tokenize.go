package main

// POST /tokenize and POST /detokenize, in vLLM's shapes, so that a client can count a prompt's tokens, cut it
// to the context or bill before it submits, with the very tokenization the engine applies (engine_tokenize,
// engine_apply_chat_template, engine_detokenize). docs/go.md ("Routes") documents both.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"

	"ember"
)

// tokenizeFields are the fields /tokenize reads; any other is refused by name.
var tokenizeFields = map[string]bool{
	"model": true, "prompt": true, "messages": true, "tools": true, "add_special_tokens": true,
	"add_generation_prompt": true,
}

// detokenizeFields are the fields /detokenize reads.
var detokenizeFields = map[string]bool{"model": true, "tokens": true, "skip_special_tokens": true}

// tokenizeRequest is a /tokenize body: a completion's `prompt` or a chat's `messages` (with its `tools`).
type tokenizeRequest struct {
	Prompt              *string         `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
	Tools               json.RawMessage `json:"tools"`
	AddSpecialTokens    *bool           `json:"add_special_tokens"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
}

// tokenize answers `{"count", "max_model_len", "tokens"}`: a prompt's tokens as a completion request would have
// them (control tokens' texts parsed, BOS first unless add_special_tokens is false), or a chat's as a chat
// completion would (the chat template, ending with the assistant's turn).
func (s *server) tokenize(w http.ResponseWriter, r *http.Request) int {
	body, bad := s.readFields(w, r, tokenizeFields)
	if bad != nil {
		return bad.write(w)
	}
	var req tokenizeRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return invalidRequest("the request body does not fit /tokenize: "+err.Error(), "").write(w)
	}
	var tokens []uint32
	var err error
	switch {
	case (req.Prompt == nil) == (req.Messages == nil):
		return invalidRequest("send either 'prompt' (a text) or 'messages' (a chat)", "prompt").write(w)
	case req.Prompt != nil:
		if req.Tools != nil || req.AddGenerationPrompt != nil {
			field := "tools"
			if req.Tools == nil {
				field = "add_generation_prompt"
			}
			return invalidRequest("'"+field+"' goes with 'messages', not 'prompt'", field).write(w)
		}
		addSpecial := req.AddSpecialTokens == nil || *req.AddSpecialTokens
		tokens, err = s.engine.Tokenize(*req.Prompt, addSpecial, true)
	default:
		// A chat's special tokens are the chat template's to write: the tokens are exactly a chat completion's.
		if req.AddSpecialTokens != nil {
			return invalidRequest("with 'messages' the tokens are those of a chat completion's prompt, whose "+
				"special tokens the chat template writes: leave add_special_tokens out", "add_special_tokens").write(w)
		}
		if req.AddGenerationPrompt != nil && !*req.AddGenerationPrompt {
			return invalidRequest("the chat template is always rendered up to the assistant's turn, as a chat "+
				"completion's prompt is: add_generation_prompt false is not supported", "add_generation_prompt").write(w)
		}
		chat := map[string]json.RawMessage{"messages": req.Messages}
		if req.Tools != nil {
			chat["tools"] = req.Tools
		}
		chatBody, _ := json.Marshal(chat) // cannot fail: raw JSON already parsed
		var prompt ember.ChatPrompt
		prompt, err = s.engine.ApplyChatTemplate(chatBody)
		tokens = prompt.TokenIDs
	}
	if err != nil {
		return engineError(err).write(w)
	}
	maxModelLen, err := s.maxModelLen()
	if err != nil {
		return engineError(err).write(w)
	}
	if tokens == nil {
		tokens = []uint32{} // `[]`, not null
	}
	return writeJSON(w, http.StatusOK, map[string]any{"count": len(tokens), "max_model_len": maxModelLen,
		"tokens": tokens})
}

// detokenize answers `{"prompt": text}` for `{"tokens": [...]}`: control tokens' texts included unless
// skip_special_tokens is true, so that detokenizing /tokenize's answer gives the text back.
func (s *server) detokenize(w http.ResponseWriter, r *http.Request) int {
	body, bad := s.readFields(w, r, detokenizeFields)
	if bad != nil {
		return bad.write(w)
	}
	var req struct {
		Tokens            *[]json.Number `json:"tokens"`
		SkipSpecialTokens bool           `json:"skip_special_tokens"`
	}
	decoder := json.NewDecoder(bytes.NewReader(body))
	decoder.UseNumber()
	if err := decoder.Decode(&req); err != nil {
		return invalidRequest("the request body does not fit /detokenize: "+err.Error(), "").write(w)
	}
	if req.Tokens == nil {
		return invalidRequest("missing required parameter: 'tokens'", "tokens").write(w)
	}
	ids := make([]uint32, len(*req.Tokens))
	for i, n := range *req.Tokens {
		id, err := strconv.ParseUint(n.String(), 10, 32)
		if err != nil {
			param := fmt.Sprintf("tokens[%d]", i)
			return invalidRequest(fmt.Sprintf("%s is %s, not a token id", param, n), param).write(w)
		}
		ids[i] = uint32(id)
	}
	text, err := s.engine.Detokenize(ids, !req.SkipSpecialTokens)
	var emberErr *ember.Error
	if errors.As(err, &emberErr) && emberErr.Status == ember.StatusInvalidArgument {
		// An id outside the vocabulary, which the message names.
		return invalidRequest(emberErr.Message, "tokens").write(w)
	}
	if err != nil {
		return engineError(err).write(w)
	}
	return writeJSON(w, http.StatusOK, map[string]any{"prompt": text})
}

// readFields reads a JSON object and refuses, by name, a field that the route does not read.
func (s *server) readFields(w http.ResponseWriter, r *http.Request, known map[string]bool) ([]byte, *apiError) {
	body, bad := s.readJSONObject(w, r)
	if bad != nil {
		return nil, bad
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(body, &fields) // readJSONObject has parsed it
	var unknown []string
	for name := range fields {
		if !known[name] {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		var names []string
		for name := range known {
			names = append(names, name)
		}
		sort.Strings(names)
		e := invalidRequest(fmt.Sprintf("unsupported parameter: '%s' (this route reads %s)", unknown[0],
			strings.Join(names, ", ")), unknown[0])
		return nil, &e
	}
	return body, nil
}

// modelInfo is what the gateway reads of engine_model_info_json, once.
type modelInfo struct {
	MaxModelLen int `json:"max_model_len"`
}

// maxModelLen is the longest request the engine takes (prompt and output tokens together).
func (s *server) maxModelLen() (int, error) {
	info, err := s.info()
	return info.MaxModelLen, err
}

// info reads the model's description on first use (it hashes the model file: a fraction of a second).
func (s *server) info() (modelInfo, error) {
	s.infoOnce.Do(func() {
		var raw json.RawMessage
		raw, s.infoErr = s.engine.ModelInfo()
		if s.infoErr == nil {
			s.infoErr = json.Unmarshal(raw, &s.infoValue)
		}
	})
	return s.infoValue, s.infoErr
}

// infoCache holds the model's description for info.
type infoCache struct {
	infoOnce  sync.Once
	infoValue modelInfo
	infoErr   error
}
