// ember.hpp: a header-only C++17 wrapper of ember's C API (include/ember.h). Engines and requests are move-only
// RAII objects that free their handles; failures are thrown as ember::Error, which carries the EmberStatus and
// engine_last_error_message(). Event texts and JSON bodies are copied into std::string, so nothing returned
// depends on the lifetime of ember's buffers.
//
// Thread safety is the C API's: every method may be called from any thread; several threads may poll one
// Request (each event goes to one of them).
//
// Two ways to read requests: Request::poll (or next_chunk_json) waits on one request; Engine::submit_with_user_data
// and Engine::wait_events serve every request from one waiting point, which Engine::events_fd lets an epoll or asio
// loop watch (docs/c_api.md, "One thread for every request"; examples/cpp/epoll_server.cpp).
#ifndef EMBER_HPP
#define EMBER_HPP

#include "ember.h"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ember {

// A failed ember call: status() is the EmberStatus, what() names the call and gives ember's detail (for
// EMBER_STATUS_INVALID_REQUEST, the OpenAI error JSON).
class Error : public std::runtime_error {
  public:
    Error(EmberStatus status, const std::string &what) : std::runtime_error(what), status_(status) {}
    EmberStatus status() const noexcept { return status_; }

  private:
    EmberStatus status_;
};

namespace detail {
inline void check(EmberStatus status, const char *call) {
    if (status != EMBER_STATUS_OK) {
        throw Error(status, std::string(call) + ": " + engine_status_message(status) + ": " +
                                engine_last_error_message());
    }
}

// Takes ownership of a string from ember and copies it into a std::string.
inline std::string take_string(char *owned) {
    std::string copy(owned);
    engine_string_free(owned);
    return copy;
}
}  // namespace detail

// One event of a request (see EmberEvent in ember.h), with its text copied.
struct Event {
    EmberEventKind kind;
    uint32_t choice;
    std::string text;  // DELTA: the new text; ERROR: the message; FINISHED: empty
    uint32_t num_tokens;
    EmberFinishReason finish_reason;
};

// One record of Engine::wait_events: which request (user_data as given at submission, and its handle), its event
// (with EMBER_DELIVERY_CHUNKS: kind CHUNK with a chunk body as text, or STREAM_DONE), and whether it is the
// request's last.
struct Record {
    uint64_t user_data;
    const EmberRequest *request;
    Event event;
    bool last;
};

class Engine;

// A submitted request. Freed (and cancelled if still running) when destroyed.
class Request {
  public:
    Request(Request &&other) noexcept : engine_(other.engine_), handle_(std::exchange(other.handle_, nullptr)) {}
    Request &operator=(Request &&other) noexcept {
        if (this != &other) {
            engine_request_free(handle_);
            engine_ = other.engine_;
            handle_ = std::exchange(other.handle_, nullptr);
        }
        return *this;
    }
    Request(const Request &) = delete;
    Request &operator=(const Request &) = delete;
    ~Request() { engine_request_free(handle_); }

    // The next event, waiting up to timeout_ms (-1: no limit, 0: do not wait); std::nullopt once the final event
    // (the last choice's FINISHED, or the ERROR) has been returned, at once on every later call. A timeout throws
    // (status TIMEOUT), as in next_chunk_json: `while (auto event = request.poll()) { ... }` reads a request.
    std::optional<Event> poll(int32_t timeout_ms = -1) {
        EmberEvent event;
        EmberStatus status = engine_poll(engine_, handle_, timeout_ms, &event);
        if (status == EMBER_STATUS_STREAM_DONE) return std::nullopt;
        detail::check(status, "engine_poll");
        std::string text = event.text != nullptr ? std::string(event.text, event.text_len) : std::string();
        return Event{event.kind, event.choice, std::move(text), event.num_tokens, event.finish_reason};
    }

    void cancel() { detail::check(engine_cancel(handle_), "engine_cancel"); }

    EmberPerRequestTimingMetrics timing_metrics(uint32_t choice = 0) const {
        EmberPerRequestTimingMetrics metrics{};
        metrics.struct_size = sizeof metrics;
        detail::check(engine_get_choice_timing_metrics(handle_, choice, &metrics), "engine_get_choice_timing_metrics");
        return metrics;
    }

    EmberExtendedTimingMetrics extended_metrics(uint32_t choice = 0) const {
        EmberExtendedTimingMetrics metrics{};
        metrics.struct_size = sizeof metrics;
        detail::check(engine_get_extended_metrics(handle_, choice, &metrics), "engine_get_extended_metrics");
        return metrics;
    }

    // Milliseconds from submission to each generated token of `choice`.
    std::vector<double> token_timestamps(uint32_t choice = 0) const {
        std::vector<double> times;
        for (;;) {
            size_t needed = 0;
            EmberStatus status =
                engine_get_token_timestamps(handle_, choice, times.data(), times.size(), &needed);
            if (status == EMBER_STATUS_BUFFER_TOO_SMALL) {
                times.resize(needed);  // more tokens may have come meanwhile: try again
                continue;
            }
            detail::check(status, "engine_get_token_timestamps");
            times.resize(needed);
            return times;
        }
    }

    // The whole OpenAI response body; std::nullopt while the request is still running.
    std::optional<std::string> response_json() const {
        char *body = nullptr;
        EmberStatus status = engine_response_json(handle_, &body);
        if (status == EMBER_STATUS_NOT_FINISHED) return std::nullopt;
        detail::check(status, "engine_response_json");
        return detail::take_string(body);
    }

    // The next streaming chunk body; std::nullopt once the stream has ended. A timeout throws (status TIMEOUT).
    std::optional<std::string> next_chunk_json(int32_t timeout_ms = -1) {
        char *chunk = nullptr;
        EmberStatus status = engine_next_chunk_json(engine_, handle_, timeout_ms, &chunk);
        if (status == EMBER_STATUS_STREAM_DONE) return std::nullopt;
        detail::check(status, "engine_next_chunk_json");
        return detail::take_string(chunk);
    }

  private:
    friend class Engine;
    Request(::EmberEngine *engine, EmberRequest *handle) : engine_(engine), handle_(handle) {}

    ::EmberEngine *engine_;
    EmberRequest *handle_;
};

// An engine: the model and its serving thread. Freed when destroyed (its requests end as cancelled; Request
// objects stay safe to use: polling them then throws EMBER_STATUS_INVALID_HANDLE).
class Engine {
  public:
    // config_json: engine options as JSON ("" = defaults); see docs/c_api.md.
    explicit Engine(const std::string &config_json = "") {
        detail::check(engine_new(config_json.c_str(), &handle_), "engine_new");
    }
    Engine(Engine &&other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    Engine &operator=(Engine &&other) noexcept {
        if (this != &other) {
            engine_free(handle_);
            handle_ = std::exchange(other.handle_, nullptr);
        }
        return *this;
    }
    Engine(const Engine &) = delete;
    Engine &operator=(const Engine &) = delete;
    ~Engine() { engine_free(handle_); }

    // Submits an OpenAI Chat Completions (`messages`) or Completions (`prompt`) request body.
    Request submit(const std::string &request_json) {
        EmberRequest *request = nullptr;
        detail::check(engine_submit(handle_, request_json.c_str(), &request), "engine_submit");
        return Request(handle_, request);
    }

    // Submits a request whose events go to this engine's waiting point (wait_events), each carrying user_data.
    // delivery: EMBER_DELIVERY_EVENTS (deltas and finishes) or EMBER_DELIVERY_CHUNKS (OpenAI chunk bodies).
    Request submit_with_user_data(const std::string &request_json, uint64_t user_data,
                                  uint32_t delivery = EMBER_DELIVERY_EVENTS) {
        EmberRequest *request = nullptr;
        detail::check(engine_submit_with_user_data(handle_, request_json.c_str(), user_data, delivery, &request),
                      "engine_submit_with_user_data");
        return Request(handle_, request);
    }

    // Up to max_records events of any request submitted with submit_with_user_data, waiting up to timeout_ms for the
    // first (-1: no limit, 0: do not wait). Empty when the time ran out or wakeup() was called.
    std::vector<Record> wait_events(int32_t timeout_ms = -1, size_t max_records = 64) {
        std::vector<EmberEventRecord> raw(max_records == 0 ? 1 : max_records);
        size_t count = 0;
        EmberStatus status = engine_wait_events(handle_, timeout_ms, raw.data(), raw.size(), &count);
        if (status == EMBER_STATUS_TIMEOUT) return {};
        detail::check(status, "engine_wait_events");
        std::vector<Record> records;
        records.reserve(count);
        for (size_t i = 0; i < count; i++) {
            const EmberEvent &e = raw[i].event;
            std::string text = e.text != nullptr ? std::string(e.text, e.text_len) : std::string();
            records.push_back(Record{raw[i].user_data, raw[i].request,
                                     Event{e.kind, e.choice, std::move(text), e.num_tokens, e.finish_reason},
                                     raw[i].last});
        }
        return records;
    }

    // A descriptor readable while wait_events has something to return: watch it for reading (epoll, poll, asio's
    // posix::stream_descriptor), then call wait_events(0). ember owns it.
    int events_fd() const {
        int fd = -1;
        detail::check(engine_events_fd(handle_, &fd), "engine_events_fd");
        return fd;
    }

    // Makes a waiting (or the next) wait_events return at once, empty: how a loop is stopped from another thread.
    void wakeup() { detail::check(engine_events_wakeup(handle_), "engine_events_wakeup"); }

  private:
    ::EmberEngine *handle_ = nullptr;
};

}  // namespace ember

#endif  // EMBER_HPP
