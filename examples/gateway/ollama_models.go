package main

// Ollama's descriptions of its models, for the one model a gateway serves (loaded for the gateway's life): GET
// /api/tags (the models there are), POST /api/show (one model's details, chat template and capabilities) and GET
// /api/ps (the models loaded), from the engine's description of its model (engine_model_info_json). Ollama's model
// management (pull, push, create, copy, delete) is not served: those routes answer 404.

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"
)

// engineModel is what the Ollama routes read of engine_model_info_json (docs/c_api.md lists its fields); an
// encoder's description has no layers, heads or chat template.
type engineModel struct {
	Serves             string         `json:"serves"`
	Architecture       string         `json:"architecture"`
	Parameters         uint64         `json:"parameters"`
	ContextLength      int            `json:"context_length"`
	MaxModelLen        int            `json:"max_model_len"`
	EmbeddingLength    int            `json:"embedding_length"`
	Layers             int            `json:"layers"`
	Heads              int            `json:"heads"`
	KVHeads            int            `json:"kv_heads"`
	ChatTemplateSource string         `json:"chat_template_source"`
	ToolCallFormat     *string        `json:"tool_call_format"`
	Thinks             bool           `json:"thinks"`
	TensorTypes        map[string]int `json:"tensor_types"`
	File               struct {
		Path      string `json:"path"`
		SizeBytes int64  `json:"size_bytes"`
		SHA256    string `json:"sha256"`
	} `json:"file"`
	Backend struct {
		Kind string `json:"kind"`
	} `json:"backend"`
}

// ollamaDetails is Ollama's `details` of a model.
type ollamaDetails struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

// engineModel reads the engine's description of its model (once: info).
func (s *server) engineModel() (engineModel, *apiError) {
	var m engineModel
	if _, err := s.info(); err != nil {
		e := engineError(err)
		return m, &e
	}
	if err := json.Unmarshal(s.infoRaw, &m); err != nil {
		e := newAPIError(http.StatusInternalServerError, "server_error", "the engine's model description: "+err.Error(), "")
		return m, &e
	}
	return m, nil
}

func (m engineModel) details() ollamaDetails {
	return ollamaDetails{Format: "gguf", Family: m.Architecture, Families: []string{m.Architecture},
		ParameterSize: humanNumber(m.Parameters), QuantizationLevel: m.quantization()}
}

// quantization is the weight type most of the model's tensors have (its norms' F32 aside, unless every tensor is
// F32): "Q4_1" for SmolLM2-135M-Instruct.Q4_1. Ollama names the file's type, which a GGUF records as a number
// (general.file_type) that a mixed file ("Q4_K_M": Q4_K and Q6_K tensors) names better; ties go to the first
// name in order.
func (m engineModel) quantization() string {
	names := make([]string, 0, len(m.TensorTypes))
	for name := range m.TensorTypes {
		names = append(names, name)
	}
	sort.Strings(names)
	best := ""
	for _, name := range names {
		if name == "F32" && len(names) > 1 {
			continue
		}
		if best == "" || m.TensorTypes[name] > m.TensorTypes[best] {
			best = name
		}
	}
	return best
}

// modifiedAt is when the model file last changed, or when the gateway started if that cannot be read.
func (s *server) modifiedAt(m engineModel) string {
	if info, err := os.Stat(m.File.Path); err == nil && m.File.Path != "" {
		return ollamaTime(info.ModTime())
	}
	return ollamaTime(time.Unix(s.started, 0))
}

// humanNumber writes a parameter count as Ollama does: "8.0B", "134.52M", "22M", "500K".
func humanNumber(n uint64) string {
	scaled := func(unit float64, suffix string, decimals int) string {
		x := float64(n) / unit
		if x == math.Floor(x) {
			return fmt.Sprintf("%.0f%s", x, suffix)
		}
		return fmt.Sprintf("%.*f%s", decimals, x, suffix)
	}
	switch {
	case n >= 1e9:
		return scaled(1e9, "B", 1)
	case n >= 1e6:
		return scaled(1e6, "M", 2)
	case n >= 1e3:
		return fmt.Sprintf("%.0fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

// ollamaTags answers GET /api/tags: the served model, named as /v1/models names it.
func (s *server) ollamaTags(w http.ResponseWriter, _ *http.Request) int {
	m, bad := s.engineModel()
	if bad != nil {
		return writeOllamaError(w, *bad)
	}
	model := map[string]any{"name": s.modelID, "model": s.modelID, "modified_at": s.modifiedAt(m),
		"size": m.File.SizeBytes, "digest": m.File.SHA256, "details": m.details()}
	return writeJSON(w, http.StatusOK, map[string]any{"models": []any{model}})
}

// ollamaPs answers GET /api/ps: the served model, loaded until the gateway stops (Ollama's `expires_at` of a
// model kept loaded for ever), all of it in GPU memory on the CUDA backend.
func (s *server) ollamaPs(w http.ResponseWriter, _ *http.Request) int {
	m, bad := s.engineModel()
	if bad != nil {
		return writeOllamaError(w, *bad)
	}
	var vram int64
	if m.Backend.Kind == "cuda" {
		vram = m.File.SizeBytes
	}
	model := map[string]any{"name": s.modelID, "model": s.modelID, "size": m.File.SizeBytes,
		"digest": m.File.SHA256, "details": m.details(), "expires_at": ollamaTime(time.Now().Add(math.MaxInt64)),
		"size_vram": vram, "context_length": m.MaxModelLen}
	return writeJSON(w, http.StatusOK, map[string]any{"models": []any{model}})
}

// servesModel says whether an Ollama model name is the served model: its id, with or without Ollama's default
// tag ":latest".
func (s *server) servesModel(name string) bool {
	return name == s.modelID || strings.TrimSuffix(name, ":latest") == s.modelID
}

// ollamaShow answers POST /api/show for the served model: `{"model"}` (or the older `name`) →
// `{"modelfile", "parameters", "template", "details", "model_info", "capabilities", "modified_at"}`. `template`
// is the Jinja chat template the engine renders (Ollama's is a Go template); `model_info` has GGUF's keys for
// the architecture, size and shape; `capabilities` lists "completion" (or "embedding" for an encoder), "tools"
// where the engine reads the template's calls, "thinking" where it splits off reasoning. Another model is a 404.
func (s *server) ollamaShow(w http.ResponseWriter, r *http.Request) int {
	var hold byteHold
	defer hold.release()
	body, bad := s.readJSONObject(w, r, &hold)
	if bad != nil {
		return writeOllamaError(w, *bad)
	}
	var req struct {
		Model string `json:"model"`
		Name  string `json:"name"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return writeOllamaError(w, invalidRequest("model: "+err.Error(), "model"))
	}
	name := req.Model
	if name == "" {
		name = req.Name
	}
	switch {
	case name == "":
		return writeOllamaError(w, invalidRequest("model is required", "model"))
	case !s.servesModel(name):
		return writeOllamaError(w, newAPIError(http.StatusNotFound, "invalid_request_error",
			fmt.Sprintf("model '%s' not found: this gateway serves %q", name, s.modelID), "model"))
	}
	m, bad := s.engineModel()
	if bad != nil {
		return writeOllamaError(w, *bad)
	}
	arch := m.Architecture
	info := map[string]any{"general.architecture": arch, "general.parameter_count": m.Parameters,
		arch + ".context_length": m.ContextLength, arch + ".embedding_length": m.EmbeddingLength}
	capabilities := []string{"embedding"}
	if m.Serves == "generation" {
		info[arch+".block_count"] = m.Layers
		info[arch+".attention.head_count"] = m.Heads
		info[arch+".attention.head_count_kv"] = m.KVHeads
		capabilities = []string{"completion"}
		if m.ToolCallFormat != nil {
			capabilities = append(capabilities, "tools")
		}
		if m.Thinks {
			capabilities = append(capabilities, "thinking")
		}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"modelfile": "", "parameters": "",
		"template": m.ChatTemplateSource, "details": m.details(), "model_info": info, "capabilities": capabilities,
		"modified_at": s.modifiedAt(m)})
}
