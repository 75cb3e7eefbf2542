"""A hub that answers the Hugging Face Hub's HTTP API for one dataset repository, on a free port
of this machine (the tests have no network): what ``huggingface_hub``'s ``HfFileSystem`` asks
to read ``hf://datasets/ORG/NAME/...`` (the repository at a revision, its tree, a path's
info, a file's bytes, ranges included), as the hub answers it. Run by ``start(files)``:
``files`` is path -> bytes; returns (endpoint URL, server) and serves until
``server.shutdown()``."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

SHA = "0123456789abcdef0123456789abcdef01234567"


def start(repo: str, files: dict[str, bytes]) -> tuple[str, ThreadingHTTPServer]:
    def entry(path: str) -> dict[str, Any]:
        if path in files:
            return {"type": "file", "path": path, "size": len(files[path]),
                    "oid": hashlib.sha1(files[path]).hexdigest()}
        return {"type": "directory", "path": path, "oid": hashlib.sha1(path.encode()).hexdigest()}

    def folders() -> set[str]:
        out = set()
        for p in files:
            parts = p.split("/")[:-1]
            out |= {"/".join(parts[:k]) for k in range(1, len(parts) + 1)}
        return out

    class Hub(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _json(self, value: Any, status: int = 200) -> None:
            body = json.dumps(value).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _missing(self) -> None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            url = urlparse(self.path)
            path = unquote(url.path)
            api = f"/api/datasets/{repo}"
            if path in (api, f"{api}/revision/main", f"{api}/revision/{SHA}"):
                return self._json({"id": repo, "sha": SHA, "private": False,
                                   "siblings": [{"rfilename": p} for p in files]})
            for rev in ("main", SHA):
                tree = f"{api}/tree/{rev}"
                if path == tree or path.startswith(tree + "/"):
                    inside = path[len(tree):].strip("/")
                    recursive = parse_qs(url.query).get("recursive", ["false"])[0] == "true"
                    under = [p for p in sorted(set(files) | folders())
                             if p.startswith(inside + "/" if inside else "")]
                    if not recursive:
                        depth = inside.count("/") + 1 if inside else 0
                        under = [p for p in under if p.count("/") == depth]
                    if inside and inside not in folders():
                        return self._missing()
                    return self._json([entry(p) for p in under])
                resolve = f"/datasets/{repo}/resolve/{rev}/"
                if path.startswith(resolve):
                    name = path[len(resolve):]
                    if name not in files:
                        return self._missing()
                    return self._bytes(files[name], head=False)
            return self._missing()

        def do_HEAD(self) -> None:
            path = unquote(urlparse(self.path).path)
            for rev in ("main", SHA):
                resolve = f"/datasets/{repo}/resolve/{rev}/"
                if path.startswith(resolve) and path[len(resolve):] in files:
                    return self._bytes(files[path[len(resolve):]], head=True)
            self._missing()

        def _bytes(self, data: bytes, head: bool) -> None:
            wanted = self.headers.get("Range")
            status, part = 200, data
            if wanted and wanted.startswith("bytes="):
                lo, _, hi = wanted[6:].partition("-")
                start, end = int(lo or 0), int(hi) if hi else len(data) - 1
                part, status = data[start:end + 1], 206
            self.send_response(status)
            self.send_header("Content-Length", str(len(part)))
            self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
            self.send_header("X-Repo-Commit", SHA)
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{start + len(part) - 1}/"
                                                  f"{len(data)}")
            self.end_headers()
            if not head:
                self.wfile.write(part)

        def do_POST(self) -> None:
            path = unquote(urlparse(self.path).path)
            length = int(self.headers.get("Content-Length") or 0)
            form = parse_qs(self.rfile.read(length).decode())
            for rev in ("main", SHA):
                if path == f"/api/datasets/{repo}/paths-info/{rev}":
                    asked = [p.strip("/") for p in form.get("paths", [])]
                    return self._json([entry(p) for p in asked
                                       if p in files or p in folders()])
            self._missing()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server
