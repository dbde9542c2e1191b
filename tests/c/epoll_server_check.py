#!/usr/bin/env python3
"""Drives examples/cpp/epoll_server: CLIENTS clients connect at once, each sends a prompt line and reads its
completion to the end. Checks that every client gets text and the server closes each connection, that the server
serves them all from one thread (its thread count never exceeds what it had with no client: the engine's threads
and its own), and that it exits cleanly after serving them.

Usage: epoll_server_check.py SERVER [CLIENTS]
"""
import socket
import subprocess
import sys
import threading


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise RuntimeError("no Threads line")


def main():
    server_path = sys.argv[1]
    clients = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    server = subprocess.Popen([server_path, "0", str(clients)], stdout=subprocess.PIPE, text=True)
    first = server.stdout.readline()
    assert first.startswith("listening on "), first
    port = int(first.split()[-1])
    idle_threads = threads_of(server.pid)
    answers = [None] * clients
    most_threads = [idle_threads]

    def client(i):
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(f"{i}, {i + 1}, {i + 2},\n".encode())
            data = b""
            while chunk := s.recv(4096):
                data += chunk
                most_threads[0] = max(most_threads[0], threads_of(server.pid))
            answers[i] = data.decode()

    workers = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    rest, _ = server.communicate(timeout=120)
    assert server.returncode == 0, server.returncode
    assert f"served {clients} connections" in rest, rest
    empty = [i for i, a in enumerate(answers) if not a or not a.strip() or "[error]" in a or "[refused]" in a]
    assert not empty, f"clients without an answer: {empty[:10]} ({answers[empty[0]]!r})"
    assert most_threads[0] <= idle_threads, f"{most_threads[0]} threads while serving, {idle_threads} idle"
    print(f"epoll_server: {clients} concurrent clients answered by one thread "
          f"(server threads: {idle_threads} idle, at most {most_threads[0]} while serving)")


if __name__ == "__main__":
    main()
