"""The official MCP Python SDK against examples/notes-app.

One scenario on a fresh app and database, as a real client meets it:

1. discovery (the 401 challenge, RFC 9728 metadata at the resource's own
   URL, RFC 8414), dynamic registration, and consent with `notes:read`
   (what the challenge names) through the app's OWN sign-in page;
2. `list_notes` works; `add_note` answers `403 insufficient_scope` and the
   SDK steps up by itself (a second consent, for `notes:write`);
3. the retried write waits for the person: this script, signed in as the
   user, finds it on the approvals page (the exact arguments shown) and
   approves it; the SDK's call returns the real result; the note exists
   once;
4. the same request id again answers the stored result (no second note),
   also after the access token expired and the SDK refreshed it;
5. a denied write ends with PERMISSION_DENIED and no note; the same id
   with other arguments is REPLAY_DETECTED;
6. revocation (RFC 7009) of the refresh token ends the grant: the access
   token is refused and the refresh token is dead;
7. approvals the protocol's own way (MCP 2026-07-28, multi round-trip
   requests): a client with an elicitation callback gets the approval page's
   URL once, as a URL-mode elicitation; the person approves on that page
   over HTTP; the SDK's own retry (with the sealed requestState) returns the
   real result and the note exists once. A denial ends in a tool error with
   no note; the state replayed by another user's grant, or tampered with, is
   refused.

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
import uuid
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx2
from mcp import Client, types
from mcp.shared.exceptions import MCPError
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

HERE = Path(__file__).resolve().parent
BIN = os.environ.get("NOTES_APP_BIN") or str(HERE / "../../../target/debug/notes-app")
REDIRECT = "http://127.0.0.1:7778/callback"
TTL = 2  # seconds: the access token lifetime the app runs with
META = "portcullis/requestId"


class App:
    """notes-app on a free loopback port and a fresh database."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="notes-app-py-")
        self.err = open(os.path.join(self.dir, "stderr.log"), "w+")
        env = {
            **os.environ,
            "NOTES_ADDR": "127.0.0.1:0",
            "NOTES_DB": os.path.join(self.dir, "notes.redb"),
            "NOTES_KEYS": os.path.join(self.dir, "notes.keys"),
            "NOTES_TOKEN_TTL_SECS": str(TTL),
            "RUST_LOG": "debug",
        }
        self.proc = subprocess.Popen([BIN], stdout=subprocess.PIPE, stderr=self.err, text=True, env=env)
        out = ""
        assert self.proc.stdout is not None
        while "MCP URL:" not in out:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"notes-app did not start: {self.logs()}")
            out += line
        self.out = out
        self.mcp_url = re.search(r"MCP URL:\s+(\S+)", out).group(1)
        self.base = re.search(r"(http://[^/]+)/mcp/", self.mcp_url).group(1)

    def logs(self) -> str:
        self.err.flush()
        self.err.seek(0)
        return self.out + self.err.read()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)
        shutil.rmtree(self.dir, ignore_errors=True)


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
    """The user's browser: signs in on the app's own page the first time,
    then consents to whatever the SDK asks."""

    def __init__(self, base: str, name: str) -> None:
        self.base, self.name = base, name
        self.cookie: str | None = None
        self.urls: list[str] = []
        self.result: AuthorizationCodeResult | None = None

    async def redirect(self, url: str) -> None:
        self.urls.append(url)
        parts = urlsplit(url)
        path = f"{parts.path}?{parts.query}"
        async with httpx2.AsyncClient(base_url=self.base, follow_redirects=False) as http:
            if self.cookie is None:
                r = await http.get(path)
                assert r.status_code == 303, (r.status_code, r.text)
                login = r.headers["location"]
                assert login.startswith("/login?next="), login
                assert parse_qs(urlsplit(login).query)["next"] == [path], login
                r = await http.post("/login", data={"username": self.name, "next": path})
                assert r.status_code == 303 and r.headers["location"] == path, (r.status_code, r.headers)
                self.cookie = r.headers["set-cookie"].split(";")[0]
            page = await http.get(path, headers={"cookie": self.cookie})
            assert page.status_code == 200, page.text
            assert page.headers["x-frame-options"] == "DENY"
            assert "unverified" in page.text and "Notes" in page.text, page.text
            csrf = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
            # A form post from another site is refused.
            r = await http.post(path, data={"intent": "allow", "csrf": csrf},
                                headers={"cookie": self.cookie, "origin": "https://evil.example"})
            assert r.status_code == 403, r.status_code
            r = await http.post(path, data={"intent": "allow", "csrf": csrf}, headers={"cookie": self.cookie})
            assert r.status_code == 302, (r.status_code, r.text)
            back = parse_qs(urlsplit(r.headers["location"]).query)
        self.result = AuthorizationCodeResult(
            code=back["code"][0], state=back.get("state", [None])[0], iss=back.get("iss", [None])[0]
        )

    async def callback(self) -> AuthorizationCodeResult:
        assert self.result is not None
        return self.result

    def http(self) -> httpx2.AsyncClient:
        assert self.cookie is not None
        return httpx2.AsyncClient(base_url=self.base, headers={"cookie": self.cookie}, timeout=30)

    async def notes(self) -> list:
        async with self.http() as http:
            return (await http.get("/notes")).json()

    async def decide_on_page(self, url: str, decision: str) -> str:
        """Opens an approval URL as this user's browser and decides the card
        it points at with the page's own form; returns the card's text."""
        parts = urlsplit(url)
        request = parts.fragment.removeprefix("r-")
        async with self.http() as http:
            page = await http.get(parts.path)
            assert page.status_code == 200, page.text
            card = re.search(rf'<div class="approval" id="r-{request}">(.*?)</div>', page.text, re.S)
            assert card, page.text
            fields = dict(re.findall(r'name="([a-zA-Z]+)" value="([^"]*)"', card.group(1)))
            fields["decision"] = decision
            r = await http.post(parts.path, data=fields)
            assert r.status_code == 303, (r.status_code, r.text)
            return card.group(1)

    async def decide_next(self, decision: str) -> dict:
        """Waits for an approval on the approvals page's JSON and decides it."""
        async with self.http() as http:
            for _ in range(100):
                pending = (await http.get("/agent-approvals/pending")).json()
                if pending["approvals"]:
                    a = pending["approvals"][0]
                    body = {k: a[k] for k in ("grant", "requestId", "seq", "fingerprint")}
                    body.update(decision=decision, csrf=pending["csrf"])
                    r = await http.post("/agent-approvals/decide", json=body)
                    assert r.status_code == 200, (r.status_code, r.text)
                    return a
                await asyncio.sleep(0.1)
        raise AssertionError("no approval arrived")


def structured(result) -> dict:
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def run(app: App) -> None:
    user, storage = User(app.base, "alice"), Storage()
    provider = OAuthClientProvider(
        server_url=app.mcp_url,
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
    )
    async with httpx2.AsyncClient(auth=provider, timeout=60) as http:
        async with Client(streamable_http_client(app.mcp_url, http_client=http)) as client:
            # 1. Discovery, registration, read-only consent through the app's sign-in.
            tools = await client.list_tools()
            assert sorted(t.name for t in tools.tools) == ["add_note", "list_notes"], tools
            first = parse_qs(urlsplit(user.urls[0]).query)
            assert first["scope"] == ["notes:read"], first
            assert first["resource"] == [app.mcp_url], first
            assert first["code_challenge_method"] == ["S256"], first
            assert structured(await client.call_tool("list_notes", {})) == {"notes": []}

            # 2-3. A write: step-up, then the person approves on the page.
            rid = str(uuid.uuid4())
            approver = asyncio.create_task(user.decide_next("once"))
            done = structured(await client.call_tool("add_note", {"text": "from Python"}, meta={META: rid}))
            approved = await approver
            assert json.loads(approved["arguments"]) == {"text": "from Python"}, approved
            assert approved["client"]["name"] == "Python SDK Agent", approved
            assert done.get("status") == "done" and done["result"]["text"] == "from Python", done
            assert done["requestId"] == rid, done
            assert len(user.urls) == 2, "one step-up consent"
            second = parse_qs(urlsplit(user.urls[1]).query)
            assert set(second["scope"][0].split()) == {"notes:read", "notes:write"}, second
            assert [n["text"] for n in await user.notes()] == ["from Python"]

            # 4. The same id answers the stored result, also after a refresh.
            again = structured(await client.call_tool("add_note", {"text": "from Python"}, meta={META: rid}))
            assert again == done, (again, done)
            tokens_before = len(storage.saved)
            await asyncio.sleep(TTL + 1.2)
            again = structured(await client.call_tool("add_note", {"text": "from Python"}, meta={META: rid}))
            assert again == done, (again, done)
            assert len(storage.saved) == tokens_before + 1, "one refresh"
            assert storage.saved[-1].refresh_token != storage.saved[-2].refresh_token
            assert len(user.urls) == 2, "a refresh, not a new consent"
            assert len(await user.notes()) == 1, "ran exactly once"

            # 5. A denial ends the request without an effect; the id is spent.
            rid2 = str(uuid.uuid4())
            denier = asyncio.create_task(user.decide_next("deny"))
            denied = structured(await client.call_tool("add_note", {"text": "nope"}, meta={META: rid2}))
            await denier
            assert denied["ok"] is False and denied["error"]["code"] == "PERMISSION_DENIED", denied
            replay = structured(await client.call_tool("add_note", {"text": "other"}, meta={META: rid2}))
            assert replay["error"]["code"] == "REPLAY_DETECTED", replay
            assert len(await user.notes()) == 1

    # 6. Revocation ends the grant: the access token is refused, the refresh token dead.
    last = storage.saved[-1]
    client_id = storage.client.client_id
    async with httpx2.AsyncClient(base_url=app.base) as http:
        r = await http.post("/revoke", data={"token": last.refresh_token, "client_id": client_id})
        assert r.status_code == 200, r.text
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        headers = {"authorization": f"Bearer {last.access_token}", "accept": "application/json, text/event-stream"}
        r = await http.post(urlsplit(app.mcp_url).path, json=ping, headers=headers)
        assert r.status_code == 401, (r.status_code, r.text)
    # A fresh connection: the server refuses an unauthenticated request
    # without reading its body, and closes that connection.
    async with httpx2.AsyncClient(base_url=app.base) as http:
        r = await http.post("/token", data={"grant_type": "refresh_token", "refresh_token": last.refresh_token,
                                             "client_id": client_id})
        assert r.status_code == 400 and r.json()["error"] == "invalid_grant", r.text
    logs = app.logs()
    for secret in [storage.saved[0].access_token, last.refresh_token, user.cookie.split("=", 1)[1]]:
        assert secret not in logs, "a secret reached the logs"


def oauth(app: App, user: User, storage: Storage, name: str) -> OAuthClientProvider:
    return OAuthClientProvider(
        server_url=app.mcp_url,
        client_metadata=OAuthClientMetadata(
            client_name=name,
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=user.redirect,
        callback_handler=user.callback,
    )


async def run_mrtr(app: App) -> None:
    """7. Approvals as multi round-trip requests with URL elicitation."""
    bob, storage = User(app.base, "bob"), Storage()
    shown: list[str] = []
    decision = {"next": "once"}

    async def elicitation(_context, params: types.ElicitRequestParams):
        assert params.mode == "url", params
        shown.append(params.url)
        card = await bob.decide_on_page(params.url, decision["next"])
        assert "add_note" in card and "MRTR Agent" in card, card
        return types.ElicitResult(action="accept")

    async with httpx2.AsyncClient(auth=oauth(app, bob, storage, "MRTR Agent"), timeout=60) as http:
        async with Client(streamable_http_client(app.mcp_url, http_client=http),
                          elicitation_callback=elicitation) as client:
            assert client.protocol_version == "2026-07-28", client.protocol_version
            # An approved write: one prompt, the SDK's own retry gets the result.
            done = structured(await client.call_tool("add_note", {"text": "via MRTR"}))
            assert done.get("status") == "done" and done["result"]["text"] == "via MRTR", done
            assert len(shown) == 1, shown
            assert urlsplit(shown[0]).path == "/agent-approvals", shown
            assert "@" not in shown[0] and "token" not in shown[0].lower(), "no credential in the URL"
            assert [n["text"] for n in await bob.notes()] == ["via MRTR"]

            # A denial: a tool error, no effect.
            decision["next"] = "deny"
            denied = await client.call_tool("add_note", {"text": "denied"})
            assert denied.is_error, denied
            assert structured(denied)["error"]["code"] == "PERMISSION_DENIED", denied
            assert len(shown) == 2
            assert len(await bob.notes()) == 1

            # The state is bound to this user's grant and this call.
            first = await client.session.call_tool("add_note", {"text": "held"}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult), first
            state = first.request_state
            assert state and first.input_requests, first
            tampered = state[:5] + ("A" if state[5] != "A" else "B") + state[6:]
            for bad, args in [(tampered, {"text": "held"}), (state, {"text": "other"})]:
                try:
                    await client.session.call_tool("add_note", args, request_state=bad, allow_input_required=True)
                    raise AssertionError("a tampered or moved requestState was accepted")
                except MCPError as e:
                    assert "requestState" in str(e), e
            bob_state = state

    # Another user's grant replays bob's state: refused, nothing changes.
    carol, carol_storage = User(app.base, "carol"), Storage()
    async with httpx2.AsyncClient(auth=oauth(app, carol, carol_storage, "Other Agent"), timeout=60) as http:
        async with Client(streamable_http_client(app.mcp_url, http_client=http)) as client:
            await client.list_tools()
            try:
                await client.session.call_tool("add_note", {"text": "held"}, request_state=bob_state,
                                               allow_input_required=True)
                raise AssertionError("another grant's requestState was accepted")
            except MCPError as e:
                assert "requestState" in str(e), e
            assert await carol.notes() == []
    assert len(await bob.notes()) == 1


async def main() -> None:
    app = App()
    try:
        await run(app)
        await run_mrtr(app)
    except BaseException:
        print(app.logs()[-6000:], file=sys.stderr)
        raise
    finally:
        app.stop()
    print("ok: notes-app with the Python SDK (approvals as JSON and as multi round-trip requests)")


if __name__ == "__main__":
    asyncio.run(main())
