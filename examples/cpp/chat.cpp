// ember from C++: the RAII wrapper of ember.hpp streams a chat answer, then prints the timing metrics, the token
// timestamps and the OpenAI response body.
//
// Build: make c-examples      Run: target/c/chat_cpp "Your question"   (from the project root)
#include "ember.hpp"

#include <iostream>

int main(int argc, char **argv) {
    const std::string message = argc > 1 ? argv[1] : "What is the boiling point of water in Celsius?";
    std::string escaped;
    for (char c : message) {
        if (c == '"' || c == '\\') escaped += '\\';
        if (static_cast<unsigned char>(c) >= 0x20) escaped += c;
    }
    try {
        ember::Engine engine;
        ember::Request request = engine.submit(R"({"messages": [{"role": "user", "content": ")" + escaped +
                                               R"("}], "max_tokens": 64, "temperature": 0})");
        std::cout << "> " << message << "\n";
        while (std::optional<ember::Event> event = request.poll()) {  // std::nullopt after the final event
            if (event->kind == EMBER_EVENT_KIND_DELTA) {
                std::cout << event->text << std::flush;
            } else if (event->kind == EMBER_EVENT_KIND_ERROR) {
                std::cerr << "\nthe request failed: " << event->text << "\n";
                return 1;
            }
        }
        const EmberPerRequestTimingMetrics m = request.timing_metrics();
        auto show = [&](const char *name, double value, uint32_t bit) {
            std::cout << "  " << name << ": ";
            if (m.present & bit) {
                std::cout << value << "\n";
            } else {
                std::cout << "absent\n";
            }
        };
        std::cout << "\n\nper-request timing metrics:\n";
        show("time_to_first_token_ms", m.time_to_first_token_ms, EMBER_TIMING_TIME_TO_FIRST_TOKEN_MS);
        show("generation_time_ms", m.generation_time_ms, EMBER_TIMING_GENERATION_TIME_MS);
        show("queue_time_ms", m.queue_time_ms, EMBER_TIMING_QUEUE_TIME_MS);
        show("mean_itl_ms", m.mean_itl_ms, EMBER_TIMING_MEAN_ITL_MS);
        show("tokens_per_second", m.tokens_per_second, EMBER_TIMING_TOKENS_PER_SECOND);
        std::cout << "token timestamps: " << request.token_timestamps().size() << "\n";
        std::cout << "response: " << request.response_json().value_or("(still running)") << "\n";
    } catch (const ember::Error &e) {
        std::cerr << e.what() << "\n";
        return 1;
    }
    return 0;
}
