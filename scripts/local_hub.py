#!/usr/bin/env python3
"""A stand-in for the Hugging Face hub on 127.0.0.1: the two endpoints ember's hub client asks (src/hub/api.rs).

    python3 scripts/local_hub.py --repo ORG/NAME=DIR [--repo ...] [--port 0]

serves each DIR's regular files as the repository ORG/NAME at one commit:
  GET /api/models/ORG/NAME/revision/REV?blobs=true   the listing: the commit (`sha`) and each file with its size and
                                                     `lfs.sha256`, as the hub lists files stored with LFS
  GET|HEAD /ORG/NAME/resolve/REV/PATH                the file's bytes, with Range requests (206) as the hub serves
                                                     them
and prints `http://127.0.0.1:PORT` (the HF_ENDPOINT to give ember) on its first line. For trying `ember-cli pull`
or `ember.Engine(model="ORG/NAME:QUANT")` without the network, and for bindings/python/tests/test_hub.py. Not a
test of the client's hostile-server handling: tests/hub.rs's stand-in does that (redirects, broken connections,
wrong hashes).
"""
import argparse
import hashlib
import http.server
import json
import os
import re
import sys
import threading
from urllib.parse import unquote, urlsplit

COMMIT = "0e1c2d3b4a5f60718293a4b5c6d7e8f901234567"


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Repository:
    """A directory's regular files, hashed once."""

    def __init__(self, directory):
        self.files = {}
        for name in sorted(os.listdir(directory)):
            path = os.path.realpath(os.path.join(directory, name))
            if os.path.isfile(path):
                self.files[name] = (path, os.path.getsize(path), sha256_of(path))

    def listing(self):
        siblings = [{"rfilename": name, "size": size, "lfs": {"sha256": sha, "size": size}}
                    for name, (_, size, sha) in self.files.items()]
        return {"sha": COMMIT, "siblings": siblings}


def handler_for(repositories):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_HEAD(self):
            self.answer(send_body=False)

        def do_GET(self):
            self.answer(send_body=True)

        def answer(self, send_body):
            path = unquote(urlsplit(self.path).path)
            listing = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/.+", path)
            if listing and listing.group(1) in repositories:
                body = json.dumps(repositories[listing.group(1)].listing()).encode()
                return self.send(200, body, "application/json", send_body)
            resolve = re.fullmatch(r"/([^/]+/[^/]+)/resolve/[^/]+/(.+)", path)
            repository = repositories.get(resolve.group(1)) if resolve else None
            if repository is None or resolve.group(2) not in repository.files:
                return self.send(404, b'{"error":"Repository or file not found"}', "application/json", send_body)
            file_path, size, sha = repository.files[resolve.group(2)]
            start, end, status = 0, size, 200
            ranged = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
            if ranged:
                start = int(ranged.group(1))
                end = min(size, int(ranged.group(2)) + 1) if ranged.group(2) else size
                if start >= size:
                    return self.send(416, b"", "text/plain", send_body)
                status = 206
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(end - start))
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("ETag", f'"{sha}"')
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("X-Linked-Etag", f'"{sha}"')
            self.send_header("X-Linked-Size", str(size))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            self.end_headers()
            if send_body:
                with open(file_path, "rb") as f:
                    f.seek(start)
                    left = end - start
                    while left > 0:
                        block = f.read(min(left, 1 << 20))
                        if not block:
                            break
                        self.wfile.write(block)
                        left -= len(block)

        def send(self, status, body, content_type, send_body):
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if send_body:
                self.wfile.write(body)

    return Handler


def serve(repositories, port=0):
    """Starts the stand-in on a thread; returns the server (its endpoint: `endpoint(server)`)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler_for(repositories))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def endpoint(server):
    return f"http://127.0.0.1:{server.server_address[1]}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", action="append", required=True, metavar="ORG/NAME=DIR")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    repositories = {}
    for spec in args.repo:
        name, _, directory = spec.partition("=")
        if name.count("/") != 1 or not os.path.isdir(directory):
            parser.error(f"--repo {spec}: expected ORG/NAME=DIR with DIR a directory")
        repositories[name] = Repository(directory)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(repositories))
    print(endpoint(server), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
