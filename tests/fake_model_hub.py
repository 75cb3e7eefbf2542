"""A hub that answers the Hugging Face Hub's HTTP API for model repositories, reads and writes,
on a free port of this machine (the tests have no network): what ``huggingface_hub``'s
``HfApi`` asks to check a token (``whoami``), make a repository, upload a folder (the card's
metadata checked, preupload, then one commit of base64 files: the "regular" mode the hub gives
small files), tag a commit,
list refs and trees, and what ``snapshot_download`` asks to read a revision back. Every call
needs ``Authorization: Bearer TOKEN``. ``state.cut_at_commit = N`` drops the connection of
the N-th commit and of every one after (a hub gone mid-way; 0: none). Run by
``start(token)``: returns (endpoint URL, server, state); serves until
``server.shutdown()``."""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse


def git_hash(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    private: bool
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha -> files
    messages: list[str] = field(default_factory=list)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    def sha(self, rev: str) -> str | None:
        return self.branches.get(rev) or self.tags.get(rev) or (
            rev if rev in self.commits else None)


@dataclass
class State:
    repos: dict[str, Repo] = field(default_factory=dict)
    commits_seen: int = 0
    cut_at_commit: int = 0


def start(token: str) -> tuple[str, ThreadingHTTPServer, State]:
    state = State()

    class Hub(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, value: Any = None, code: str = "") -> None:
            body = json.dumps(value if value is not None else {"error": code}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            if code:
                self.send_header("X-Error-Code", code)
                self.send_header("X-Error-Message", code)
            self.end_headers()
            self.wfile.write(body)

        def _authorized(self) -> bool:
            if self.headers.get("Authorization") == f"Bearer {token}":
                return True
            self._send(401, {"error": "Invalid credentials in Authorization header"})
            return False

        def _repo(self, path: str, prefix: str = "/api/models/") -> tuple[str, Repo | None,
                                                                       str]:
            parts = path[len(prefix):].split("/")
            name = "/".join(parts[:2])
            return name, state.repos.get(name), "/".join(parts[2:])

        def _url(self, name: str) -> str:
            return f"http://127.0.0.1:{self.server.server_address[1]}/{name}"

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def do_GET(self) -> None:
            url = urlparse(self.path)
            path = unquote(url.path)
            if path.startswith("/api/") and not self._authorized():
                return None
            if path == "/api/whoami-v2":
                return self._send(200, {"type": "user", "name": "tester",
                                        "auth": {"accessToken": {"role": "write"}}})
            if path.startswith("/api/models/"):
                name, repo, rest = self._repo(path)
                if repo is None:
                    return self._send(404, code="RepoNotFound")
                if rest in ("", "revision/main") or rest.startswith("revision/"):
                    rev = rest[len("revision/"):] if rest else "main"
                    sha = repo.sha(rev)
                    if sha is None:
                        return self._send(404, code="RevisionNotFound")
                    return self._send(200, {"id": name, "sha": sha, "private": repo.private,
                                            "siblings": [{"rfilename": p}
                                                         for p in repo.commits[sha]]})
                if rest == "refs":
                    return self._send(200, {
                        "branches": [{"name": b, "ref": f"refs/heads/{b}", "targetCommit": s}
                                     for b, s in repo.branches.items()],
                        "tags": [{"name": t, "ref": f"refs/tags/{t}", "targetCommit": s}
                                 for t, s in repo.tags.items()],
                        "converts": []})
                if rest.startswith("tree/"):
                    rev, _, inside = rest[len("tree/"):].partition("/")
                    sha = repo.sha(rev)
                    if sha is None:
                        return self._send(404, code="RevisionNotFound")
                    files = repo.commits[sha]
                    recursive = parse_qs(url.query).get("recursive", ["false"])[0] == "true"
                    under = [p for p in sorted(files) if p.startswith(inside)]
                    if not recursive:
                        under = [p for p in under if "/" not in p[len(inside):].strip("/")]
                    return self._send(200, [{"type": "file", "path": p,
                                             "size": len(files[p]),
                                             "oid": git_hash(files[p])} for p in under])
                return self._send(404, code="EntryNotFound")
            return self._resolve(path, head=False)

        def do_HEAD(self) -> None:
            self._resolve(unquote(urlparse(self.path).path), head=True)

        def _resolve(self, path: str, head: bool) -> None:
            # /ORG/NAME/resolve/REV/FILE: a file's bytes at a revision
            parts = path.strip("/").split("/")
            if len(parts) < 5 or parts[2] != "resolve":
                return self._send(404, code="EntryNotFound")
            repo = state.repos.get("/".join(parts[:2]))
            sha = repo.sha(unquote(parts[3])) if repo else None
            name = "/".join(parts[4:])
            if sha is None or name not in repo.commits[sha]:  # type: ignore[union-attr]
                return self._send(404, code="EntryNotFound")
            data = repo.commits[sha][name]  # type: ignore[union-attr]
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("ETag", f'"{git_hash(data)}"')
            self.send_header("X-Repo-Commit", sha)
            self.end_headers()
            if not head:
                self.wfile.write(data)

        def do_POST(self) -> None:
            path = unquote(urlparse(self.path).path)
            if not self._authorized():
                return None
            if path == "/api/validate-yaml":  # a card's metadata: taken as it is
                self._body()
                return self._send(200, {"errors": [], "warnings": []})
            if path == "/api/repos/create":
                given = json.loads(self._body())
                name = f"{given['organization']}/{given['name']}"
                if name in state.repos:
                    return self._send(409, {"error": "You already created this model repo",
                                            "url": self._url(name)})
                repo = Repo(private=given.get("visibility") == "private")
                first = hashlib.sha1(name.encode()).hexdigest()
                repo.commits[first] = {".gitattributes": b"*.safetensors filter=lfs\n"}
                repo.messages.append("initial commit")
                repo.branches["main"] = first
                state.repos[name] = repo
                return self._send(200, {"url": self._url(name), "name": name})
            name, repo, rest = self._repo(path)
            if repo is None:
                return self._send(404, code="RepoNotFound")
            if rest.startswith("preupload/"):
                head = repo.commits[repo.sha(rest[len("preupload/"):]) or ""]
                asked = json.loads(self._body())["files"]
                return self._send(200, {"files": [
                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                     "oid": git_hash(head[f["path"]]) if f["path"] in head else None}
                    for f in asked]})
            if rest.startswith("commit/"):
                branch = rest[len("commit/"):]
                lines = [json.loads(x) for x in self._body().splitlines() if x.strip()]
                state.commits_seen += 1
                if state.cut_at_commit and state.commits_seen >= state.cut_at_commit:
                    # the connection drops (and every retry's: the hub is gone)
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return None
                files = dict(repo.commits[repo.branches[branch]])
                for line in lines:
                    if line["key"] == "file":
                        files[line["value"]["path"]] = base64.b64decode(
                            line["value"]["content"])
                sha = hashlib.sha1(json.dumps(
                    [repo.branches[branch], sorted((p, git_hash(d)) for p, d in files.items())]
                ).encode() + str(len(repo.commits)).encode()).hexdigest()
                repo.commits[sha] = files
                repo.messages.append(lines[0]["value"]["summary"])
                repo.branches[branch] = sha
                return self._send(200, {"commitUrl": self._url(f"{name}/commit/{sha}"),
                                        "commitOid": sha})
            if rest.startswith("tag/"):
                given = json.loads(self._body())
                if given["tag"] in repo.tags:
                    return self._send(409, {"error": "tag exists"})
                sha = repo.sha(rest[len("tag/"):])
                if sha is None:
                    return self._send(404, code="RevisionNotFound")
                repo.tags[given["tag"]] = sha
                return self._send(200, {})
            return self._send(404, code="EntryNotFound")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}", server, state
