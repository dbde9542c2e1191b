package main

// llama-server's own routes (its tools/server/README.md), for the tools written against it: POST /completion
// and /completions go to the engine (engine_submit_api, which reads llama-server's body and writes its answer
// objects); GET /props and GET /slots answer from the model's description (engine_model_info_json) and the
// engine's counters (engine_get_stats). /tokenize and /detokenize answer llama-server's shapes beside vLLM's
// (tokenize.go), and /health's {"status": "ok"} is both servers'. docs/protocol.md, "llama-server endpoints",
// says what each serves and lacks.

import (
	"net/http"

	ember "ember.invalid/ember/bindings/go"
)

// endpointLlamaCompletion is llama-server's POST /completion: its objects as plain `data:` events, its errors in
// OpenAI's shape (llama-server's own are `{"error": {"code", "message", "type"}}`, which its clients read the
// same way).
var endpointLlamaCompletion = endpoint{name: "completion", api: ember.APILlamaCompletion, family: apiOpenAI,
	framing: ssePlain}

// llamaServerPaths are the routes llama-server answers POST /completion on (/completions is its non-OpenAI
// alias, not /v1/completions).
var llamaServerPaths = []string{"/completion", "/completions"}

// llamaDefaultParams are the settings a /completion request gets for the fields it leaves out: llama-server's
// defaults where ember has the sampler, the off value where it has not (a request that turns one on is
// refused). The engine writes the same object as a response's generation_settings (src/protocol/llama_server/
// settings.rs); TestPropsAgreeWithACompletion holds the two together.
func llamaDefaultParams() map[string]any {
	// llama-server's floats are float32, written as the float64 they widen to (0.8 is 0.800000011920929).
	round := func(x float64) float64 { return float64(float32(x)) }
	return map[string]any{
		"seed": uint32(0xFFFFFFFF), "temperature": round(0.8), "dynatemp_range": 0.0, "dynatemp_exponent": 1.0,
		"top_k": 40, "top_p": round(0.95), "min_p": round(0.05), "top_n_sigma": -1.0, "xtc_probability": 0.0,
		"xtc_threshold": round(0.1), "typical_p": 1.0, "repeat_last_n": -1, "repeat_penalty": 1.0,
		"presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0, "dry_base": 1.75,
		"dry_allowed_length": 2, "dry_penalty_last_n": -1, "mirostat": 0, "mirostat_tau": 5.0,
		"mirostat_eta": round(0.1), "stop": []string{}, "max_tokens": -1, "n_predict": -1, "n_keep": 0,
		"n_discard": 0, "ignore_eos": false, "stream": false, "logit_bias": []any{}, "n_probs": 0, "min_keep": 0,
		"grammar": "", "samplers": []string{"penalties", "top_k", "temperature", "top_p", "min_p"},
		"timings_per_token": false, "post_sampling_probs": false, "lora": []any{},
	}
}

// props answers GET /props: the default settings of a /completion request, the slots (ember's max_num_seqs:
// the sequences one engine step runs), the model file, its chat template's text and special tokens.
func (s *server) props(w http.ResponseWriter, _ *http.Request) int {
	info, err := s.info()
	if err != nil && !servesEmbeddingsOnly(err) {
		return engineError(err).write(w)
	}
	body := map[string]any{
		"default_generation_settings": map[string]any{
			"id": 0, "id_task": -1, "n_ctx": info.MaxModelLen, "speculative": false, "is_processing": false,
			"params": llamaDefaultParams(), "prompt": "",
			"next_token": map[string]any{"has_next_token": true, "has_new_line": false, "n_remain": -1,
				"n_decoded": 0, "stopping_word": ""},
		},
		"total_slots":        info.MaxNumSeqs,
		"model_path":         info.File.Path,
		"chat_template":      info.ChatTemplateSource,
		"chat_template_caps": map[string]any{},
		"modalities":         map[string]bool{"vision": false, "audio": false},
		"build_info":         "ember " + ember.Version(),
		"is_sleeping":        false,
	}
	for _, special := range []string{"bos", "eos"} {
		if token, ok := info.SpecialTokens[special]; ok {
			body[special+"_token"] = token.Text
		}
	}
	return writeJSON(w, http.StatusOK, body)
}

// llamaSlots answers GET /slots. ember schedules sequences, not slots: a request waits until the engine has room
// for it, and any free place serves it. So the slots are max_num_seqs places, the first `running` (the
// engine's running sequences) processing; which request each serves, with what settings and how far along, the
// engine does not say, and those fields are left out. `?fail_on_no_slot=1` answers 503 when none is free, as
// llama-server does.
func (s *server) llamaSlots(w http.ResponseWriter, r *http.Request) int {
	info, err := s.info()
	if err != nil {
		return engineError(err).write(w)
	}
	stats, err := s.engine.Stats()
	if err != nil {
		return engineError(err).write(w)
	}
	running := int(stats.Running)
	if r.URL.Query().Get("fail_on_no_slot") == "1" && running >= info.MaxNumSeqs {
		return newAPIError(http.StatusServiceUnavailable, "unavailable_error", "no slot available", "").write(w)
	}
	slots := make([]map[string]any, info.MaxNumSeqs)
	for i := range slots {
		slots[i] = map[string]any{"id": i, "id_task": -1, "n_ctx": info.MaxModelLen, "speculative": false,
			"is_processing": i < running}
	}
	return writeJSON(w, http.StatusOK, slots)
}
