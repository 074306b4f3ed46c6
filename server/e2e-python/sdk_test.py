"""The official MCP Python SDK against `portcullis serve`.

Two scenarios, each a fresh server:

1. dynamic registration: the SDK discovers (RFC 9728 metadata at the
   resource's own well-known URL, then RFC 8414), registers, and is
   consented with `skills:read` (what the 401 challenge names); a write then
   answers `403 insufficient_scope`, the SDK steps up by itself (a second
   consent, driven over HTTP like a user's browser), the open tab serves the
   new grant at once (never `no_live_tab`), the approval reaches the client
   as a multi round-trip request (MCP 2026-07-28) whose URL elicitation
   points at the Agents page, is approved in the scripted connected tab, the
   SDK's own retry gets the result and the write runs once, and after the
   short-lived access token expires the SDK refreshes and gets the stored
   result for the same `requestId`;
2. the same with a client ID metadata document served on loopback by this
   script instead of registration (the server runs with the development
   flag `--dev-loopback-client-documents`).

Run by `run.sh` (and `.ci/run`). Exits non-zero on the first failed check.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
from mcp import Client, types
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

HERE = Path(__file__).resolve().parent
BIN = os.environ.get("PORTCULLIS_BIN") or str(HERE / "../../target/debug/portcullis")
REDIRECT = "http://127.0.0.1:7777/callback"
TTL = 2  # seconds: the access token lifetime the server runs with


class Server:
    """`portcullis serve` on a free loopback port and a fresh database."""

    def __init__(self, extra: list[str]):
        self.dir = tempfile.mkdtemp(prefix="portcullis-py-")
        self.err = open(os.path.join(self.dir, "stderr.log"), "w+")
        self.proc = subprocess.Popen(
            [BIN, "serve", "--db", os.path.join(self.dir, "p.redb"), "--addr", "127.0.0.1:0", *extra],
            stdout=subprocess.PIPE,
            stderr=self.err,
            text=True,
            env={**os.environ, "RUST_LOG": "debug"},
        )
        out = ""
        assert self.proc.stdout is not None
        while "Agents page:" not in out:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"server did not start: {self.logs()}")
            out += line
        self.out = out
        self.mcp_url = re.search(r"MCP URL:\s+(\S+)", out).group(1)
        self.base = re.search(r"Agents page:\s+(\S+)/agents", out).group(1)

    def logs(self) -> str:
        self.err.flush()
        self.err.seek(0)
        return self.out + self.err.read()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)
        shutil.rmtree(self.dir, ignore_errors=True)


async def authorize_as_user(url: str, user: str, cookie: str | None) -> tuple[str, dict[str, list[str]]]:
    """Follows an authorization URL as the user's browser would: the
    development sign-in (first time), then the consent form with its CSRF
    token. Returns the session cookie and the redirect's query (code,
    state, iss)."""
    parts = urlsplit(url)
    path = f"{parts.path}?{parts.query}"
    async with httpx2.AsyncClient(follow_redirects=False) as http:
        if cookie is None:
            page = await http.get(url)
            assert "Development sign-in" in page.text, page.text
            sign_in = f"{parts.scheme}://{parts.netloc}/sign-in?{urlencode({'next': path})}"
            r = await http.post(sign_in, data={"intent": "signin", "username": user})
            assert r.status_code == 303 and r.headers["location"] == path, r.status_code
            cookie = r.headers["set-cookie"].split(";")[0]
        page = await http.get(url, headers={"cookie": cookie})
        assert page.status_code == 200, page.text
        assert "unverified" in page.text, page.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
        r = await http.post(url, data={"intent": "allow", "csrf": csrf}, headers={"cookie": cookie})
        assert r.status_code == 302, (r.status_code, r.text)
        back = parse_qs(urlsplit(r.headers["location"]).query)
    return cookie, back


class Storage:
    """In-memory token storage; keeps every token response."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.saved: list[OAuthToken] = []
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens
        self.saved.append(tokens)

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class User:
    """The user's browser: consents to whatever the SDK asks, remembering
    each authorization URL."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.cookie: str | None = None
        self.urls: list[str] = []
        self.result: AuthorizationCodeResult | None = None

    async def redirect(self, url: str) -> None:
        self.urls.append(url)
        self.cookie, back = await authorize_as_user(url, self.name, self.cookie)
        self.result = AuthorizationCodeResult(
            code=back["code"][0],
            state=back.get("state", [None])[0],
            iss=back.get("iss", [None])[0],
        )

    async def callback(self) -> AuthorizationCodeResult:
        assert self.result is not None
        return self.result


class Tab:
    """A scripted connected tab speaking the tab channel (as /agents/app.js does)."""

    def __init__(self, base: str, cookie: str) -> None:
        self.base, self.cookie = base, cookie
        self.id, self.page, self.since, self.jobs = "py-tab", "py-page", 0, 0
        self.http = httpx2.AsyncClient(base_url=base, headers={"cookie": cookie}, timeout=40)

    async def open(self) -> Tab:
        html = (await self.http.get("/agents")).text
        self.http.headers["x-csrf-token"] = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
        return self

    async def connect(self) -> dict:
        body = {"tabId": self.id, "pageInstance": self.page, "visible": True}
        return (await self.http.post("/agents/tab/connect", json=body)).json()

    async def poll(self) -> dict:
        q = {"tabId": self.id, "pageInstance": self.page, "since": str(self.since)}
        w = (await self.http.get("/agents/tab/work", params=q)).json()
        self.since = w["version"]
        return w

    async def approval(self) -> dict:
        for _ in range(20):
            w = await self.poll()
            if w["approvals"]:
                return w["approvals"][0]
        raise AssertionError("no approval arrived")

    async def decide(self, a: dict, decision: str) -> int:
        body = {k: a[k] for k in ("grant", "requestId", "seq", "fingerprint")}
        body["decision"] = decision
        return (await self.http.post("/agents/tab/decide", json=body)).status_code

    async def notes(self) -> list:
        return (await self.http.get("/app/notes")).json()["notes"]

    async def work(self) -> None:
        """Performs jobs with the notes app's own API until cancelled."""
        while True:
            w = await self.poll()
            for job in w["jobs"]:
                assert job["skill"] == "create_note", job
                r = await self.http.post("/app/notes", json=job["args"])
                report = {"job": job["job"], "ok": r.status_code == 201, "summary": r.text}
                await self.http.post("/agents/tab/report", json=report)
                self.jobs += 1


def structured(result) -> dict:
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def scenario(name: str, extra: list[str], document_url: str | None = None) -> None:
    server = Server(["--access-token-ttl-secs", str(TTL), "--jwt-leeway-secs", "0", *extra])
    try:
        await run(server, name, document_url)
    except BaseException:
        print(server.logs()[-4000:], file=sys.stderr)
        raise
    finally:
        server.stop()
    print(f"ok: {name}")


async def run(server: Server, name: str, document_url: str | None) -> None:
    user, storage = User("alice"), Storage()
    provider = OAuthClientProvider(
        server_url=server.mcp_url,
        client_metadata=OAuthClientMetadata(
            client_name="Python SDK Agent",
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=user.redirect,
        callback_handler=user.callback,
        client_metadata_url=document_url,
    )
    prompts: list[str] = []

    async def elicitation(_context, params: types.ElicitRequestParams):
        # The person sees the URL (here: noted); they approve in the tab.
        assert params.mode == "url", params
        prompts.append(params.url)
        return types.ElicitResult(action="accept")

    async with httpx2.AsyncClient(auth=provider, timeout=60) as http:
        async with Client(
            streamable_http_client(server.mcp_url, http_client=http), elicitation_callback=elicitation
        ) as client:
            # Discovery, registration (or the document) and a read-only consent.
            tools = await client.list_tools()
            assert [t.name for t in tools.tools] == ["search_skills", "describe_skill", "execute"], tools
            assert len(user.urls) == 1, user.urls
            first = parse_qs(urlsplit(user.urls[0]).query)
            assert first["scope"] == ["skills:read"], first
            assert first["resource"] == [server.mcp_url], first
            assert first["code_challenge_method"] == ["S256"], first
            if document_url is None:
                assert storage.client is not None and not first["client_id"][0].startswith("http")
            else:
                assert first["client_id"] == [document_url], first
            assert storage.saved[0].scope == "skills:read", storage.saved[0]

            tab = await Tab(server.base, user.cookie).open()
            connected = await tab.connect()
            assert [g["state"] for g in connected["grants"]] == ["connected"], connected

            # A write: 403 insufficient_scope, the SDK steps up by itself,
            # and the retried call is already served by the open tab. The
            # client negotiated 2026-07-28 and declared URL elicitation: the
            # approval reaches it as a multi round-trip request whose URL
            # elicitation (shown once) points at the Agents page; the person
            # approves in the tab, and the SDK's own retry (with the sealed
            # requestState) returns the result.
            assert client.protocol_version == "2026-07-28", client.protocol_version
            request_id = str(uuid.uuid4())
            code = json.dumps([{"skill": "create_note", "args": {"title": f"From Python ({name})", "body": "sdk"}}])
            call = {"requestId": request_id, "code": code}

            async def person() -> dict:
                approval = await tab.approval()
                assert await tab.decide(approval, "once") == 200
                return approval

            approver = asyncio.create_task(person())
            worker = asyncio.create_task(tab.work())
            try:
                done = structured(await client.call_tool("execute", call))
                approval = await approver
                assert approval["args"]["title"] == f"From Python ({name})", approval
                assert approval["client"]["name"] == "Python SDK Agent", approval
                assert done.get("status") == "done", done
                assert done["requestId"] == request_id, done
                assert done["result"][0]["result"]["title"] == f"From Python ({name})", done
                assert len(user.urls) == 2, "one step-up consent"
                second = parse_qs(urlsplit(user.urls[1]).query)
                assert set(second["scope"][0].split()) == {"skills:read", "skills:write"}, second
                assert set(storage.saved[-1].scope.split()) == {"skills:read", "skills:write"}
                assert len(prompts) == 1, prompts
                assert prompts[0] == f"{server.base}/agents#approval-{request_id}", prompts

                # Past the access token's lifetime the SDK refreshes, and the
                # same requestId answers the stored result, never a second run.
                tokens_before = len(storage.saved)
                await asyncio.sleep(TTL + 1.2)
                again = structured(await client.call_tool("execute", call))
                assert again == done, (again, done)
                assert len(storage.saved) == tokens_before + 1, "one refresh"
                assert storage.saved[-1].refresh_token != storage.saved[-2].refresh_token
                assert len(user.urls) == 2, "a refresh, not a new consent"
            finally:
                worker.cancel()
                approver.cancel()
            assert tab.jobs == 1, tab.jobs
            assert len(await tab.notes()) == 1
    logs = server.logs()
    for secret in [storage.saved[0].access_token, storage.saved[-1].refresh_token, user.cookie.split("=", 1)[1]]:
        assert secret not in logs, "a secret reached the logs"


def serve_document() -> tuple[ThreadingHTTPServer, str]:
    """Serves this client's metadata document on loopback; returns the server
    and the document's URL (which is the client id)."""
    holder: dict[str, str] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path != "/client.json":
                self.send_error(404)
                return
            body = json.dumps(
                {
                    "client_id": holder["url"],
                    "client_name": "Python SDK Agent",
                    "redirect_uris": [REDIRECT],
                    "grant_types": ["authorization_code", "refresh_token"],
                    "response_types": ["code"],
                    "token_endpoint_auth_method": "none",
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Cache-Control", "max-age=60")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    holder["url"] = f"http://127.0.0.1:{httpd.server_address[1]}/client.json"
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, holder["url"]


def allow_loopback_documents() -> None:
    """The SDK accepts only https document URLs (right for real clients);
    the test serves its document over plain http on loopback, which the
    server allows only under its development flag. Relax the SDK's own check
    for this URL shape and nothing else."""
    import mcp.client.auth.oauth2 as oauth2

    strict = oauth2.is_valid_client_metadata_url

    def loopback_or_strict(url: str | None) -> bool:
        return strict(url) or bool(url and re.fullmatch(r"http://127\.0\.0\.1:\d+/client\.json", url))

    oauth2.is_valid_client_metadata_url = loopback_or_strict
    if hasattr(oauth2, "should_use_client_metadata_url"):
        original = oauth2.should_use_client_metadata_url

        def should_use(metadata, url):
            if url and loopback_or_strict(url) and not strict(url):
                return bool(metadata and metadata.client_id_metadata_document_supported)
            return original(metadata, url)

        oauth2.should_use_client_metadata_url = should_use


async def main() -> None:
    await scenario("dynamic registration", [])
    httpd, url = serve_document()
    try:
        allow_loopback_documents()
        await scenario("client ID metadata document", ["--dev-loopback-client-documents"], url)
    finally:
        httpd.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
