package main

// API keys (--api-key, --api-key-file): once any is configured, every request but GET /health (load balancers'
// and the image's health checks carry no key) and OPTIONS (a browser's CORS preflight carries no credentials)
// must present one, as OpenAI's SDKs send it (`Authorization: Bearer KEY`) or Anthropic's (`x-api-key: KEY`).

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// apiKeys are the keys the gateway accepts, as SHA-256 digests: comparing digests of equal length tells nothing
// about a key's length, and the keys themselves need not stay in memory.
type apiKeys struct {
	digests [][sha256.Size]byte
}

// loadAPIKeys gathers the keys of --api-key and of --api-key-file (one a line; blank lines and lines starting
// with # are skipped); nil when neither flag is given, so that requests need no key.
func loadAPIKeys(flagKeys []string, file string) (*apiKeys, error) {
	keys := append([]string(nil), flagKeys...)
	for _, key := range flagKeys {
		if strings.TrimSpace(key) == "" {
			return nil, errors.New("--api-key: a key cannot be empty")
		}
	}
	if file != "" {
		fromFile, err := readKeyFile(file)
		if err != nil {
			return nil, err
		}
		keys = append(keys, fromFile...)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	k := &apiKeys{}
	for _, key := range keys {
		k.digests = append(k.digests, sha256.Sum256([]byte(key)))
	}
	return k, nil
}

// readKeyFile reads --api-key-file. A file with no key is an error: started with it, the gateway would
// otherwise serve everyone, the opposite of what was asked.
func readKeyFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--api-key-file: %w", err)
	}
	defer f.Close()
	var keys []string
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		// Spaces around a key are an editor's, not the key's (and \r a Windows line end).
		line := strings.TrimSpace(lines.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		keys = append(keys, line)
	}
	if err := lines.Err(); err != nil {
		return nil, fmt.Errorf("--api-key-file %s: %w", path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("--api-key-file %s has no key (one a line; blank lines and # comments are skipped)",
			path)
	}
	return keys, nil
}

// needsKey says whether a request must present a key: all but the health check and CORS preflights.
func needsKey(r *http.Request) bool {
	return r.Method != http.MethodOptions && !(r.Method == http.MethodGet && r.URL.Path == "/health")
}

// check answers nil for a request that presents one of the keys, else the 401 in its route's API shape.
func (k *apiKeys) check(r *http.Request) *apiError {
	presented := presentedKeys(r.Header)
	if len(presented) == 0 {
		return unauthorized(r.URL.Path,
			"missing API key: send it as `Authorization: Bearer KEY` or as `x-api-key: KEY`")
	}
	if !k.acceptsAny(presented) {
		return unauthorized(r.URL.Path, "invalid API key")
	}
	return nil
}

// presentedKeys are the keys a request carries: the Bearer token of Authorization and x-api-key, either or both
// (a client may send one header for a proxy in front and the other for the gateway).
func presentedKeys(h http.Header) []string {
	var keys []string
	if scheme, token, ok := strings.Cut(h.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		if token = strings.TrimSpace(token); token != "" {
			keys = append(keys, token)
		}
	}
	if key := h.Get("X-Api-Key"); key != "" {
		keys = append(keys, key)
	}
	return keys
}

// acceptsAny compares every presented key with every configured one, in constant time and without stopping at a
// match, so that the answer's timing says nothing about which key matched or how much of one did.
func (k *apiKeys) acceptsAny(presented []string) bool {
	match := 0
	for _, key := range presented {
		digest := sha256.Sum256([]byte(key))
		for _, accepted := range k.digests {
			match |= subtle.ConstantTimeCompare(digest[:], accepted[:])
		}
	}
	return match == 1
}

// unauthorized is a 401 in the shape of the API path belongs to; OpenAI's carries code "invalid_api_key", as
// OpenAI's own does.
func unauthorized(path, message string) *apiError {
	e := newAPIError(http.StatusUnauthorized, "invalid_request_error", message, "")
	e.body = withCode(e.body, "invalid_api_key")
	e = inShapeOf(apiOfPath(path), e)
	e.authenticate = true
	return &e
}
