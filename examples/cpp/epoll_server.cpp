// ember from one thread: a TCP server whose clients each send a prompt line and receive its completion as it is
// generated. One thread serves every connection and every request on one epoll loop: the listening socket, the
// client sockets and the engine's events descriptor (Engine::events_fd), whose records (Engine::wait_events) carry
// each request's connection id as user_data. No thread per stream, however many clients connect.
//
// Build: make c-examples
// Run:   target/c/epoll_server [PORT] [CONNECTIONS]   (from the project root; PORT 0 picks a free one, printed on
//        stdout; with CONNECTIONS the server exits after serving that many, which tests/c/epoll_server_check.py
//        uses)
// Try:   echo "The capital of France is" | nc localhost PORT
#include "ember.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <netinet/in.h>
#include <optional>
#include <string>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

namespace {

// What the loop keeps per client: its socket, the prompt line it is sending, the request serving it, and the text
// not yet written to it.
struct Connection {
    int fd;
    std::string line;
    std::optional<ember::Request> request;
    std::string pending;
    bool finished = false;  // the request's last record came: close once `pending` is written
};

// A Completions body for `prompt` (JSON-escaped).
std::string completion_body(const std::string &prompt) {
    std::string body = R"({"prompt": ")";
    for (unsigned char c : prompt) {
        if (c == '"' || c == '\\') {
            body += '\\';
            body += static_cast<char>(c);
        } else if (c < 0x20) {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
            body += escaped;
        } else {
            body += static_cast<char>(c);
        }
    }
    return body + R"(", "max_tokens": 24, "temperature": 0})";
}

void fail(const char *what) {
    std::perror(what);
    std::exit(1);
}

}  // namespace

int main(int argc, char **argv) {
    const int port = argc > 1 ? std::atoi(argv[1]) : 8089;
    const long max_connections = argc > 2 ? std::atol(argv[2]) : -1;
    try {
        ember::Engine engine;
        int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (listener < 0) fail("socket");
        int yes = 1;
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        address.sin_port = htons(static_cast<uint16_t>(port));
        if (bind(listener, reinterpret_cast<sockaddr *>(&address), sizeof address) != 0) fail("bind");
        if (listen(listener, 1024) != 0) fail("listen");
        socklen_t length = sizeof address;
        getsockname(listener, reinterpret_cast<sockaddr *>(&address), &length);
        std::cout << "listening on " << ntohs(address.sin_port) << std::endl;

        int ep = epoll_create1(EPOLL_CLOEXEC);
        if (ep < 0) fail("epoll_create1");
        // Tags: the listener is 0, the engine 1, a connection its id (from 2).
        auto watch = [&](int fd, uint64_t tag, uint32_t events, int op) {
            epoll_event interest{};
            interest.events = events;
            interest.data.u64 = tag;
            if (epoll_ctl(ep, op, fd, &interest) != 0) fail("epoll_ctl");
        };
        watch(listener, 0, EPOLLIN, EPOLL_CTL_ADD);
        watch(engine.events_fd(), 1, EPOLLIN, EPOLL_CTL_ADD);

        std::map<uint64_t, Connection> connections;
        uint64_t next_id = 2;
        long served = 0;
        auto close_connection = [&](uint64_t id) {
            close(connections.at(id).fd);  // also leaves the epoll set
            connections.erase(id);         // destroys the Request: freed, and cancelled if it still ran
            served++;
        };
        // Writes what the connection has pending; closes it once its request ended and all is written. Whether it
        // is still open.
        auto flush = [&](uint64_t id) {
            Connection &c = connections.at(id);
            while (!c.pending.empty()) {
                ssize_t n = send(c.fd, c.pending.data(), c.pending.size(), MSG_NOSIGNAL);
                if (n < 0 && errno == EAGAIN) {
                    watch(c.fd, id, EPOLLOUT, EPOLL_CTL_MOD);  // resume when the client reads
                    return true;
                }
                if (n <= 0) {
                    close_connection(id);  // the client went away
                    return false;
                }
                c.pending.erase(0, static_cast<size_t>(n));
            }
            if (c.finished) {
                close_connection(id);
                return false;
            }
            return true;
        };

        epoll_event ready[64];
        while (max_connections < 0 || served < max_connections) {
            int n = epoll_wait(ep, ready, 64, -1);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) fail("epoll_wait");
            for (int i = 0; i < n; i++) {
                const uint64_t tag = ready[i].data.u64;
                if (tag == 0) {  // new clients
                    int fd;
                    while ((fd = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                        connections.emplace(next_id, Connection{fd, {}, std::nullopt, {}});
                        watch(fd, next_id++, EPOLLIN, EPOLL_CTL_ADD);
                    }
                } else if (tag == 1) {  // the engine: take every record that waits
                    for (;;) {
                        std::vector<ember::Record> records = engine.wait_events(0);
                        if (records.empty()) break;
                        for (ember::Record &r : records) {
                            auto it = connections.find(r.user_data);
                            if (it == connections.end()) continue;  // its client left
                            if (r.event.kind == EMBER_EVENT_KIND_DELTA) it->second.pending += r.event.text;
                            if (r.event.kind == EMBER_EVENT_KIND_ERROR) it->second.pending += "\n[error] " + r.event.text;
                            if (r.last) {
                                it->second.pending += "\n";
                                it->second.finished = true;
                            }
                            flush(r.user_data);
                        }
                    }
                } else if (connections.count(tag) != 0) {
                    Connection &c = connections.at(tag);
                    if (ready[i].events & EPOLLOUT) {
                        watch(c.fd, tag, EPOLLIN, EPOLL_CTL_MOD);
                        flush(tag);
                        continue;
                    }
                    char buffer[512];
                    ssize_t got = recv(c.fd, buffer, sizeof buffer, 0);
                    if (got <= 0) {
                        if (got < 0 && errno == EAGAIN) continue;
                        close_connection(tag);  // closed before its answer: the request is cancelled
                        continue;
                    }
                    if (c.request) continue;  // one prompt per connection; the rest is ignored
                    c.line.append(buffer, static_cast<size_t>(got));
                    size_t end = c.line.find('\n');
                    if (end == std::string::npos) continue;
                    try {
                        c.request = engine.submit_with_user_data(completion_body(c.line.substr(0, end)), tag);
                    } catch (const ember::Error &e) {  // refused (e.g. OVERLOADED): say why and hang up
                        c.pending = std::string("[refused] ") + e.what() + "\n";
                        c.finished = true;
                        flush(tag);
                    }
                }
            }
        }
        std::cout << "served " << served << " connections" << std::endl;
        close(ep);
        close(listener);
    } catch (const ember::Error &e) {
        std::cerr << e.what() << "\n";
        return 1;
    }
    return 0;
}
