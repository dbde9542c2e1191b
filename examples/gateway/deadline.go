package main

// A client's timeout becomes the request's deadline: the engine then ends the request itself when the client
// would stop waiting for it (finish_reason "deadline"), instead of computing an answer nobody reads.

import (
	"encoding/json"
	"math"
	"strconv"
)

// clientTimeoutHeader is the timeout the OpenAI SDKs send with every request (Python and Node: the client's
// `timeout`, in seconds, e.g. "600").
const clientTimeoutHeader = "X-Stainless-Timeout"

// maxDeadlineMs is the engine's largest deadline_ms (a week; docs/protocol.md).
const maxDeadlineMs = 7 * 24 * 3600 * 1000

// clientTimeoutNotGiven is what the Anthropic Python SDK (2.x) sends as the timeout of a call that sets none of
// its own, whatever the client's: its placeholder for "not given", which says no timeout.
const clientTimeoutNotGiven = "NOT_GIVEN"

// withClientTimeout returns body with `deadline_ms` set from a client timeout header value (seconds), when the
// header is there and the body sets no deadline of its own; the body unchanged otherwise. A header that is not a
// positive number of seconds (nor clientTimeoutNotGiven) is a 400 naming the header.
func withClientTimeout(body []byte, header string) ([]byte, *apiError) {
	if header == "" || header == clientTimeoutNotGiven {
		return body, nil
	}
	seconds, err := strconv.ParseFloat(header, 64)
	if err != nil || !(seconds > 0) || math.IsInf(seconds, 0) {
		e := invalidRequest(clientTimeoutHeader+" must be a positive number of seconds, got "+strconv.Quote(header), "")
		return nil, &e
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return body, nil // checked by readBody already; the engine reports anything else
	}
	if _, set := fields["deadline_ms"]; set {
		return body, nil
	}
	ms := math.Min(math.Ceil(seconds*1000), maxDeadlineMs)
	fields["deadline_ms"] = json.RawMessage(strconv.FormatInt(int64(ms), 10))
	out, err := json.Marshal(fields)
	if err != nil {
		return body, nil
	}
	return out, nil
}
