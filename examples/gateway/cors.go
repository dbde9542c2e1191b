package main

// Cross-origin requests from browsers (--cors-origin): a web page served from another origin may call the gateway
// only if the gateway says so in CORS headers (https://fetch.spec.whatwg.org/#http-cors-protocol). A request
// with a JSON body or an Authorization header is not "simple", so the browser first sends a preflight
// (OPTIONS with Access-Control-Request-Method), answered here before any key is asked for: preflights carry no
// credentials. An origin not allowed gets no CORS header at all, and the browser keeps the answer from the page.

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// corsPolicy is the origins allowed to call the gateway from a browser.
type corsPolicy struct {
	// anyOrigin: --cors-origin '*'.
	anyOrigin bool
	origins   map[string]bool
}

// corsMaxAge is how long, in seconds, a browser may reuse a preflight's answer (browsers cap it: Chrome at
// 2 hours, Firefox at 24).
const corsMaxAge = "600"

// corsExposedHeaders are the response headers a page's script may read besides the CORS-safelisted ones
// (Content-Type, Cache-Control, ...): the gateway's own.
var corsExposedHeaders = strings.Join(append([]string{"X-Request-Id", "Server-Timing", "Retry-After"},
	metricsHeaderNames[:]...), ", ")

// newCORSPolicy checks the origins of --cors-origin; nil when there are none (no CORS headers, OPTIONS is a 405).
func newCORSPolicy(origins []string) (*corsPolicy, error) {
	if len(origins) == 0 {
		return nil, nil
	}
	c := &corsPolicy{origins: map[string]bool{}}
	for _, origin := range origins {
		if origin == "*" {
			c.anyOrigin = true
			continue
		}
		if err := checkOrigin(origin); err != nil {
			return nil, fmt.Errorf("--cors-origin %q: %w", origin, err)
		}
		c.origins[origin] = true
	}
	return c, nil
}

// checkOrigin refuses what a browser never sends as Origin, so that a mistyped flag fails at start instead of
// matching nothing: an origin is scheme://host[:port], without a path or a trailing slash.
func checkOrigin(origin string) error {
	u, err := url.Parse(origin)
	switch {
	case err != nil:
		return err
	case u.Scheme == "" || u.Host == "":
		return errors.New("an origin is scheme://host[:port], e.g. https://example.com, or * for any")
	case u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return errors.New("an origin has no path (not even a trailing /), query or user: scheme://host[:port]")
	}
	return nil
}

// allowedOrigin is the Access-Control-Allow-Origin a request gets: "*" for any origin, else its own Origin if
// allowed; "" for a request without Origin (not from a browser's cross-origin fetch) or from another origin.
func (c *corsPolicy) allowedOrigin(r *http.Request) string {
	origin := r.Header.Get("Origin")
	switch {
	case origin == "":
		return ""
	case c.anyOrigin:
		return "*"
	case c.origins[origin]:
		return origin
	}
	return ""
}

// isPreflight says whether a request is a browser's CORS preflight.
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Origin") != "" &&
		r.Header.Get("Access-Control-Request-Method") != ""
}

// preflight answers a preflight from an allowed origin: the methods the gateway serves, and the headers the
// request asks to send, echoed (the SDKs send their own: x-stainless-*, anthropic-version, openai-organization,
// ...; keys travel in Authorization or x-api-key, which the key check reads, not this one).
func (c *corsPolicy) preflight(w http.ResponseWriter, r *http.Request, allowOrigin string) int {
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", allowOrigin)
	h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
	if headers := r.Header.Values("Access-Control-Request-Headers"); len(headers) > 0 {
		h.Set("Access-Control-Allow-Headers", strings.Join(headers, ", "))
	}
	h.Set("Access-Control-Max-Age", corsMaxAge)
	// The answer depends on these: caches must not give one origin's (or request's) answer to another.
	h.Add("Vary", "Origin")
	h.Add("Vary", "Access-Control-Request-Method")
	h.Add("Vary", "Access-Control-Request-Headers")
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

// addHeaders gives an actual (not preflight) response its CORS headers, for an allowed origin. Every response
// varies by Origin once CORS is on, allowed or not, so caches key them by it.
func (c *corsPolicy) addHeaders(h http.Header, allowOrigin string) {
	h.Add("Vary", "Origin")
	if allowOrigin == "" {
		return
	}
	h.Set("Access-Control-Allow-Origin", allowOrigin)
	h.Set("Access-Control-Expose-Headers", corsExposedHeaders)
}
