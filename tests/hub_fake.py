"""An in-memory Hub that speaks the part of the HTTP API huggingface_hub 2.4 and transformers 5.23 use, on 127.0.0.1.

What it serves (see ``../shared/notes/hub-test-server.md`` for the client side):

- ``GET /api/whoami-v2``; ``POST /api/repos/create``; ``POST /api/validate-yaml``;
- ``GET /api/models/{repo}[/revision/{rev}]`` (id, sha, siblings), ``GET /api/models/{repo}/tree/{rev}[/{path}]``;
- ``POST /api/models/{repo}/branch/{name}``, ``POST /api/models/{repo}/preupload/{rev}`` (``.safetensors`` files are
  answered ``lfs``, everything else ``regular``), ``POST /api/models/{repo}/commit/{rev}[?create_pr=1]`` (ndjson:
  ``file``, ``lfsFile``, ``deletedFile``, ``deletedFolder``; ``parentCommit`` checked);
- ``POST /{repo}.git/info/lfs/objects/batch`` (basic transfer), ``PUT /lfs-objects/{repo}/{oid}`` (sha256 checked);
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}`` with ``X-Repo-Commit``, ``ETag`` and ``Content-Length``.

Every commit gets a random 40-hex sha and keeps a full snapshot, so any earlier revision stays loadable. Writes and
private reads need ``Authorization: Bearer <token>``. ``fail_next_commit`` makes the next commit answer 500 after
the LFS objects were uploaded (an upload interrupted half-way). ``requests`` logs ``(method, path)``.

Example::

    with FakeHub() as hub:
        HfApi(endpoint=hub.url, token=hub.token).create_repo("tester/model")
"""

import base64
import hashlib
import json
import re
import secrets
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

USER = "tester"
GITATTRIBUTES = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"


@dataclass
class Commit:
    sha: str
    parent: str | None
    files: dict[str, bytes]
    lfs: set[str]
    summary: str


@dataclass
class Repo:
    repo_id: str
    private: bool
    commits: dict[str, Commit] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    pulls: int = 0

    def resolve(self, revision: str) -> Commit | None:
        revision = unquote(revision)
        sha = self.refs.get(revision) or (revision if revision in self.commits else None)
        return self.commits.get(sha) if sha else None


def git_blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class FakeHub:
    def __init__(self, token: str = "hf_fake_write_token"):
        self.token = token
        self.repos: dict[str, Repo] = {}
        self.lfs_objects: dict[tuple[str, str], bytes] = {}  # (repo id, sha256) -> content, per repository
        self.fail_next_commit = False
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> "FakeHub":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- state helpers used by the tests ---------------------------------------------------------------------------
    def head(self, repo_id: str, revision: str = "main") -> Commit:
        return self.repos[repo_id].resolve(revision)

    def history(self, repo_id: str, revision: str = "main") -> list[Commit]:
        repo, commits = self.repos[repo_id], []
        commit = repo.resolve(revision)
        while commit is not None:
            commits.append(commit)
            commit = repo.commits.get(commit.parent) if commit.parent else None
        return commits

    def _new_commit(self, repo: Repo, parent: Commit | None, files, lfs, summary) -> Commit:
        commit = Commit(secrets.token_hex(20), parent.sha if parent else None, files, lfs, summary)
        repo.commits[commit.sha] = commit
        return commit


def _handler_for(hub: FakeHub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # keep test output clean
            pass

        # -- plumbing ----------------------------------------------------------------------------------------------
        def _body(self) -> bytes:
            return self.body

        def _send(self, status: int, payload=None, headers=None, body: bytes | None = None, head=False):
            if body is None:
                body = json.dumps(payload if payload is not None else {}).encode()
                headers = {"Content-Type": "application/json", **(headers or {})}
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _error(self, status: int, code: str | None, message: str, head=False, headers=None):
            headers = dict(headers or {})
            if code:
                headers["X-Error-Code"] = code
            headers["X-Error-Message"] = message
            self._send(status, {"error": message}, headers=headers, head=head)

        def _authorized(self) -> bool:
            return self.headers.get("Authorization", "") == f"Bearer {hub.token}"

        def _repo(self, repo_id: str, head=False, write=False) -> Repo | None:
            repo = hub.repos.get(repo_id)
            if write and not self._authorized():
                self._error(401, None, "Invalid credentials in Authorization header", head=head)
                return None
            if repo is None or (repo.private and not self._authorized()):
                self._error(404, "RepoNotFound", f"Repository not found: {repo_id}", head=head)
                return None
            return repo

        def _route(self, method: str):
            url = urlsplit(self.path)
            # Read the whole body first: with keep-alive, an unread body would be parsed as the next request.
            self.body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            hub.requests.append((method, url.path))
            query = {key: values[-1] for key, values in parse_qs(url.query).items()}
            path = url.path
            routes = [
                ("GET", r"/api/whoami-v2", self.whoami),
                ("POST", r"/api/repos/create", self.create_repo),
                ("POST", r"/api/validate-yaml", lambda: self._send(200, {})),
                ("GET", r"/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/]+))?", self.info),
                ("GET", r"/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)(?:/(?P<sub>.*))?", self.tree),
                ("POST", r"/api/models/(?P<repo>[^/]+/[^/]+)/branch/(?P<branch>[^/]+)", self.branch),
                ("POST", r"/api/models/(?P<repo>[^/]+/[^/]+)/preupload/(?P<rev>[^/]+)", self.preupload),
                ("POST", r"/api/models/(?P<repo>[^/]+/[^/]+)/commit/(?P<rev>[^/]+)", self.commit),
                ("POST", r"/(?P<repo>[^/]+/[^/]+)\.git/info/lfs/objects/batch", self.lfs_batch),
                ("PUT", r"/lfs-objects/(?P<repo>[^/]+/[^/]+)/(?P<oid>[0-9a-f]{64})", self.lfs_put),
                ("GET", r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)", self.resolve),
                ("HEAD", r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)", self.resolve),
            ]
            for route_method, pattern, handler in routes:
                match = re.fullmatch(pattern, path)
                if route_method == method and match:
                    kwargs = {key: value for key, value in match.groupdict().items() if value is not None}
                    if "query" in handler.__code__.co_varnames:
                        kwargs["query"] = query
                    if method == "HEAD":
                        kwargs["head"] = True
                    with hub.lock:
                        return handler(**kwargs)
            self._error(404, None, f"no route for {method} {path}", head=method == "HEAD")

        def do_GET(self):
            self._route("GET")

        def do_HEAD(self):
            self._route("HEAD")

        def do_POST(self):
            self._route("POST")

        def do_PUT(self):
            self._route("PUT")

        # -- API ---------------------------------------------------------------------------------------------------
        def whoami(self):
            if not self._authorized():
                return self._error(401, None, "Invalid credentials in Authorization header")
            self._send(200, {"type": "user", "name": USER, "orgs": [], "auth": {"type": "access_token"}})

        def create_repo(self):
            if not self._authorized():
                return self._error(401, None, "Invalid credentials in Authorization header")
            payload = json.loads(self._body())
            repo_id = f"{payload.get('organization') or USER}/{payload['name']}"
            url = f"{hub.url}/{repo_id}"
            if repo_id in hub.repos:
                return self._send(409, {"error": "You already created this model repo", "url": url})
            repo = Repo(repo_id, private=payload.get("visibility") == "private" or bool(payload.get("private")))
            initial = hub._new_commit(repo, None, {".gitattributes": GITATTRIBUTES}, set(), "initial commit")
            repo.refs["main"] = initial.sha
            hub.repos[repo_id] = repo
            self._send(200, {"url": url, "name": repo_id, "id": repo_id})

        def info(self, repo, rev="main"):
            found = self._repo(repo)
            if found is None:
                return
            commit = found.resolve(rev)
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {unquote(rev)}")
            self._send(
                200,
                {
                    "id": repo,
                    "modelId": repo,
                    "sha": commit.sha,
                    "private": found.private,
                    "siblings": [{"rfilename": name} for name in sorted(commit.files)],
                },
            )

        def tree(self, repo, rev, sub="", query=None):
            found = self._repo(repo)
            if found is None:
                return
            commit = found.resolve(rev)
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {unquote(rev)}")
            prefix = sub.strip("/") + "/" if sub else ""
            recursive = (query or {}).get("recursive") in ("true", "True", "1")
            entries, folders = [], set()
            for name, data in sorted(commit.files.items()):
                if not name.startswith(prefix):
                    continue
                rest = name[len(prefix) :]
                parts = rest.split("/")
                for depth in range(1, len(parts)):
                    folder = prefix + "/".join(parts[:depth])
                    if (recursive or depth == 1) and folder not in folders:
                        folders.add(folder)
                        entries.append({"type": "directory", "path": folder, "oid": git_blob_sha(folder.encode())})
                if len(parts) > 1 and not recursive:
                    continue
                entry = {"type": "file", "path": name, "size": len(data), "oid": git_blob_sha(data)}
                if name in commit.lfs:
                    entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                entries.append(entry)
            self._send(200, entries)

        def branch(self, repo, branch):
            found = self._repo(repo, write=True)
            if found is None:
                return
            payload = json.loads(self._body() or b"{}")
            branch = unquote(branch)
            if branch in found.refs:
                return self._error(409, None, f"Reference already exists: refs/heads/{branch}")
            start = found.resolve(payload.get("startingPoint") or "main")
            if start is None:
                return self._error(404, "RevisionNotFound", "Invalid starting point")
            found.refs[branch] = start.sha
            self._send(200, {})

        def preupload(self, repo, rev):
            found = self._repo(repo, write=True)
            if found is None:
                return
            files = json.loads(self._body())["files"]
            answer = [
                {
                    "path": item["path"],
                    "uploadMode": "lfs" if item["path"].endswith(".safetensors") else "regular",
                    "shouldIgnore": False,
                }
                for item in files
            ]
            self._send(200, {"files": answer})

        def lfs_batch(self, repo):
            found = self._repo(repo, write=True)
            if found is None:
                return
            objects = []
            for item in json.loads(self._body())["objects"]:
                entry = {"oid": item["oid"], "size": item["size"], "authenticated": True}
                if (repo, item["oid"]) not in hub.lfs_objects:
                    entry["actions"] = {"upload": {"href": f"{hub.url}/lfs-objects/{repo}/{item['oid']}"}}
                objects.append(entry)
            self._send(200, {"transfer": "basic", "objects": objects}, {"Content-Type": "application/vnd.git-lfs+json"})

        def lfs_put(self, repo, oid):
            data = self._body()
            if hashlib.sha256(data).hexdigest() != oid:
                return self._error(400, None, "sha256 mismatch")
            hub.lfs_objects[(repo, oid)] = data
            self._send(200, {})

        def commit(self, repo, rev, query=None):
            found = self._repo(repo, write=True)
            if found is None:
                return
            body = self._body()
            if hub.fail_next_commit:
                hub.fail_next_commit = False
                return self._error(500, None, "Internal Error: the commit was interrupted (injected by the test)")
            parent = found.resolve(rev)
            if parent is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {unquote(rev)}")
            lines = [json.loads(line) for line in body.splitlines() if line.strip()]
            header = lines[0]["value"]
            if header.get("parentCommit") and header["parentCommit"] != parent.sha:
                return self._error(412, None, "A commit has happened since. Please refresh and try again.")
            files, lfs = dict(parent.files), set(parent.lfs)
            for line in lines[1:]:
                key, value = line["key"], line["value"]
                path = value["path"]
                if key == "file":
                    files[path] = base64.b64decode(value["content"])
                    lfs.discard(path)
                elif key == "lfsFile":
                    if (repo, value["oid"]) not in hub.lfs_objects:
                        return self._error(422, None, f"LFS object {value['oid']} of {path} was never uploaded")
                    files[path] = hub.lfs_objects[(repo, value["oid"])]
                    lfs.add(path)
                elif key == "deletedFile":
                    if path not in files:
                        return self._error(404, "EntryNotFound", f"A file with this name doesn't exist: {path}")
                    del files[path]
                    lfs.discard(path)
                elif key == "deletedFolder":
                    for name in [name for name in files if name.startswith(path.rstrip("/") + "/")]:
                        del files[name]
                        lfs.discard(name)
            commit = hub._new_commit(found, parent, files, lfs, header["summary"])
            answer = {"commitUrl": f"{hub.url}/{repo}/commit/{commit.sha}", "commitOid": commit.sha}
            if (query or {}).get("create_pr") == "1":
                found.pulls += 1
                found.refs[f"refs/pr/{found.pulls}"] = commit.sha
                answer["pullRequestUrl"] = f"{hub.url}/{repo}/discussions/{found.pulls}"
            else:
                found.refs[unquote(rev)] = commit.sha
            self._send(200, answer)

        def resolve(self, repo, rev, file, head=False):
            found = self._repo(repo, head=head)
            if found is None:
                return
            commit = found.resolve(rev)
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {unquote(rev)}", head=head)
            file = unquote(file)
            if file not in commit.files:
                return self._error(
                    404, "EntryNotFound", f"{file} does not exist", head=head, headers={"X-Repo-Commit": commit.sha}
                )
            data = commit.files[file]
            etag = hashlib.sha256(data).hexdigest() if file in commit.lfs else git_blob_sha(data)
            headers = {"X-Repo-Commit": commit.sha, "ETag": f'"{etag}"', "Content-Type": "application/octet-stream"}
            self._send(200, headers=headers, body=data, head=head)

    return Handler
