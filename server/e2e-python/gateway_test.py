"""The official MCP Python SDK through the gateway.

`portcullis serve --source py=cmd:python downstream.py`: the SDK's own
server (`downstream.py`, over stdio) as a source, and the SDK's client,
authorized against Portcullis, on the gateway's endpoint. The client
negotiates protocol 2026-07-28, whose results must all carry `resultType`
(the schema's `Result`), so this is where a forwarded answer without it is
found: the client lists and reads the source's resources under gateway URIs
and calls its typed read-only tool, whose structured content the SDK checks
against the tool's output schema, and its typed write through the person's
approval to its schema-valid result.

A second scenario puts a source in front of it that speaks only 2026-07-28
(`downstream_2026.py`: it refuses `initialize`) and asks for input the way
that revision does, with multi round-trip requests: the gateway connects to
it with `server/discover`, passes its form and URL elicitations to the SDK's
elicitation callback labelled as the source's (`[notes] …`), its
`requestState` wrapped in the gateway's own, and forwards the SDK's own
retry with the answers; a write is approved once in the tab and runs once,
and a wrapped state that was tampered with, or that another user's agent
sends, is refused.

Run by `run.sh` (and `.ci/run`) after `sdk_test.py`. Exits non-zero on the
first failed check.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2
from mcp import Client, types
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata
from mcp.shared.exceptions import MCPError

from sdk_test import REDIRECT, Server, Storage, Tab, User, structured

HERE = Path(__file__).resolve().parent
PAGE = "ui://portcullis/py/board/main.html"


def source_flag() -> str:
    """`--source` for the Python downstream, run by this interpreter."""
    return f"py=cmd:{sys.executable} {HERE / 'downstream.py'}"


def provider_for(server: Server, user: User, name: str) -> OAuthClientProvider:
    """An OAuth provider for an agent called `name`, consented by `user`."""
    return OAuthClientProvider(
        server_url=server.mcp_url,
        client_metadata=OAuthClientMetadata(
            client_name=name,
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=Storage(),
        redirect_handler=user.redirect,
        callback_handler=user.callback,
    )


async def scenario() -> None:
    server = Server(["--source", source_flag()])
    try:
        await run(server)
    except BaseException:
        print(server.logs()[-6000:], file=sys.stderr)
        raise
    finally:
        server.stop()
    print("ok: the Python SDK at 2026-07-28 through the gateway")


async def run(server: Server) -> None:
    user, storage = User("gale"), Storage()
    provider = OAuthClientProvider(
        server_url=server.mcp_url,
        client_metadata=OAuthClientMetadata(
            client_name="Python SDK Gateway Agent",
            redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=user.redirect,
        callback_handler=user.callback,
    )
    prompts: list[str] = []

    async def elicitation(_context, params: types.ElicitRequestParams):
        assert params.mode == "url", params
        prompts.append(params.url)
        return types.ElicitResult(action="accept")

    async with httpx2.AsyncClient(auth=provider, timeout=60) as http:
        async with Client(
            streamable_http_client(server.mcp_url, http_client=http), elicitation_callback=elicitation
        ) as client:
            assert client.protocol_version == "2026-07-28", client.protocol_version
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert {"lookup", "create_note"} <= set(tools), sorted(tools)
            assert tools["lookup"].output_schema is not None, "the source's output schema is forwarded"

            # Resources under gateway URIs: listed, templated and read.
            resources = (await client.list_resources()).resources
            assert [str(r.uri) for r in resources] == [PAGE], resources
            templates = (await client.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == ["ui://portcullis/py/board/{name}.html"], templates
            read = await client.read_resource(PAGE)
            text = read.contents[0].text
            assert f'href="{PAGE}"' in text and f'content="{PAGE}"' in text, text
            assert "ui://board/main.html.map" in text, "a longer URI is left alone"

            # A typed read through the source: no approval, but a run needs
            # the user's connected tab.
            tab = await Tab(server.base, user.cookie).open()
            await tab.connect()
            result = await client.call_tool("lookup", {"word": "gate"})
            assert not result.is_error, result
            assert result.structured_content == {"word": "gate", "length": 4}, result
            assert result.meta and "portcullis/requestId" in result.meta, result

            # A typed write through the source: its approval reaches the SDK
            # as a multi round-trip request (never as a structured answer its
            # output schema would refuse), the person approves in the tab,
            # and the SDK's own retry ends in the tool's schema-valid result.
            assert tools["stamp"].output_schema is not None

            async def person() -> dict:
                approval = await tab.approval()
                assert approval["source"] == "py" and approval["kind"] == "py/stamp", approval
                assert await tab.decide(approval, "once") == 200
                return approval

            approver = asyncio.create_task(person())
            stamped = await client.call_tool("stamp", {"word": "gate"})
            await approver
            assert not stamped.is_error, stamped
            assert stamped.structured_content == {"word": "gate", "stamped": True}, stamped
            assert len(prompts) == 1 and "/agents#approval-" in prompts[0], prompts
            assert server.logs().count("downstream stamp gate") == 1, "the write ran once"


async def scenario_2026() -> None:
    flag = f"notes=cmd:{sys.executable} {HERE / 'downstream_2026.py'}"
    server = Server(["--source", flag])
    try:
        await run_2026(server, server.logs)
    except BaseException:
        print(server.logs()[-8000:], file=sys.stderr)
        raise
    finally:
        server.stop()
    print("ok: a stdio source that speaks only 2026-07-28 and asks for input, through the gateway")


class HttpDownstream:
    """`downstream_2026.py` over Streamable HTTP on a loopback port."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.err = tempfile.NamedTemporaryFile("w+", prefix="downstream-2026-", suffix=".log")
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        """Starts it (again) on its port."""
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "downstream_2026.py"), "http", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=self.err,
        )
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"the HTTP downstream did not start: {self.logs()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def logs(self) -> str:
        self.err.flush()
        self.err.seek(0)
        return self.err.read()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=20)
            self.proc = None


async def scenario_2026_http() -> None:
    down = HttpDownstream()
    server = Server(["--source", f"notes={down.url}"])
    try:
        await run_2026(server, down.logs)
        await down_and_back(server, down)
    except BaseException:
        print(server.logs()[-8000:], file=sys.stderr)
        raise
    finally:
        server.stop()
        down.stop()
    print("ok: an HTTP source that speaks only 2026-07-28 and asks for input, through the gateway")


async def down_and_back(server: Server, down: HttpDownstream) -> None:
    """The HTTP source goes away: 2026-07-28 has no `ping`, and the gateway's
    `server/discover` finds it gone before any call does (the call is
    refused before the ledger: nothing stored); it comes back on the same
    port and the gateway reconnects. This agent declared no elicitation, so
    the source's question cannot reach it: a clear refusal."""
    user = User("ines")
    async with httpx2.AsyncClient(auth=provider_for(server, user, "Python SDK Agent"), timeout=60) as http:
        async with Client(streamable_http_client(server.mcp_url, http_client=http)) as client:
            tab = await Tab(server.base, user.cookie).open()
            await tab.connect()
            down.stop()
            await asyncio.sleep(7)  # more than the 5 s between two discover probes
            refused = await client.call_tool("linked_account", {})
            assert refused.is_error, refused
            assert structured(refused)["error"]["code"] == "source_unavailable", refused
            down.start()
            for _ in range(80):
                back = structured(await client.call_tool("linked_account", {}))
                if back["error"]["code"] != "source_unavailable":
                    break
                await asyncio.sleep(0.25)
            # Reached again; its question needs an agent that declared
            # elicitation, which this one did not: refused, nothing stored.
            assert back["error"]["code"] == "ACTION_UNAVAILABLE", back
            assert "declared elicitation" in back["error"]["message"], back
            assert "gateway: source (re)connected" in server.logs()


async def run_2026(server: Server, downstream_logs) -> None:
    logs = server.logs()
    assert "gateway: source speaks this revision" in logs and "2026-07-28" in logs, logs[-3000:]
    assert "downstream2026 refused initialize" not in downstream_logs(), "discovered, never initialized"
    gale = User("gale")
    approvals: list[str] = []
    asked: list[types.ElicitRequestParams] = []

    async def elicitation(_context, params: types.ElicitRequestParams):
        if params.mode == "url" and "/agents#approval-" in params.url:
            # Portcullis's own approval page: the person approves in the tab.
            assert not params.message.startswith("["), params
            approvals.append(params.url)
            return types.ElicitResult(action="accept")
        # Everything else is the source's, and says so.
        assert params.message.startswith("[notes] "), params
        asked.append(params)
        if params.mode == "url":
            assert params.url == "https://notes.example/sign-in", params
            return types.ElicitResult(action="accept")
        if "passphrase" in params.message:
            return types.ElicitResult(action="accept", content={"passphrase": "open sesame"})
        return types.ElicitResult(action="accept", content={"folder": "inbox"})

    async with httpx2.AsyncClient(auth=provider_for(server, gale, "Python SDK 2026 Agent"), timeout=90) as http:
        async with Client(
            streamable_http_client(server.mcp_url, http_client=http), elicitation_callback=elicitation
        ) as client:
            assert client.protocol_version == "2026-07-28", client.protocol_version
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert {"file_note", "linked_account"} <= set(tools), sorted(tools)
            tab = await Tab(server.base, gale.cookie).open()
            await tab.connect()

            # A read-only tool whose source asks the person to open its
            # sign-in page: the SDK shows it (labelled) and retries by itself.
            account = await client.call_tool("linked_account", {})
            assert not account.is_error, account
            assert account.structured_content == {"account": "gale", "signIn": "accept"}, account
            assert [p.mode for p in asked] == ["url"], asked
            assert asked[0].message == "[notes] Sign in to the notes service", asked[0]

            # A write: approved once in the tab (Portcullis's page), then the
            # source asks which folder (its form, through the SDK's callback),
            # and the SDK's retry ends in the source's typed result. The
            # person is asked once; the note is filed once.
            async def person() -> dict:
                approval = await tab.approval()
                assert approval["source"] == "notes" and approval["kind"] == "notes/file_note", approval
                assert await tab.decide(approval, "once") == 200
                return approval

            approver = asyncio.create_task(person())
            filed = await client.call_tool("file_note", {"title": "Plan"})
            await approver
            assert not filed.is_error, filed
            assert filed.structured_content == {"title": "Plan", "folder": "inbox"}, filed
            assert len(approvals) == 1, approvals
            assert [p.mode for p in asked] == ["url", "form"], asked
            assert asked[1].message == "[notes] Which folder should 'Plan' go in?", asked[1]
            assert downstream_logs().count("downstream2026 file_note Plan in inbox") == 1, "filed once"
            assert downstream_logs().count("downstream2026 file_note") == 1

            # A resource template whose source asks for a passphrase first.
            templates = (await client.list_resource_templates()).resource_templates
            vault = next(t.uri_template for t in templates if "vault" in t.uri_template)
            read = await client.read_resource(vault.replace("{name}", "diary"))
            assert read.contents[0].text == "diary: opened with open sesame", read
            assert asked[-1].message == "[notes] The passphrase of diary?", asked[-1]

            # The wrapped state, by hand: tampered with, or for another
            # call, it is refused (invalid params) and nothing runs; intact,
            # the retry completes.
            first = await client.session.call_tool("linked_account", {}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult), first
            state = first.request_state
            assert state and state.startswith("~"), state
            assert "asked" not in state, "the source's state is inside ours, not beside it"
            answers = {"sign_in": {"action": "accept"}}
            middle = len(state) // 2
            tampered = state[:middle] + ("A" if state[middle] != "A" else "B") + state[middle + 1 :]
            for bad, name, args in [
                (tampered, "linked_account", {}),
                (state, "file_note", {"title": "Plan"}),
            ]:
                try:
                    await client.session.call_tool(
                        name, args, input_responses=answers, request_state=bad, allow_input_required=True
                    )
                except MCPError as e:
                    assert e.error.code == -32602, e.error
                    assert "requestState" in e.error.message, e.error
                else:
                    raise AssertionError(f"a foreign or tampered state was accepted for {name}")
            done = await client.session.call_tool(
                "linked_account", {}, input_responses=answers, request_state=state, allow_input_required=True
            )
            assert isinstance(done, types.CallToolResult) and not done.is_error, done
            assert done.structured_content == {"account": "gale", "signIn": "accept"}, done
            assert downstream_logs().count("downstream2026 file_note") == 1, "nothing else ran"

    # Another user's agent presenting gale's wrapped state is refused.
    hal = User("hal")
    async with httpx2.AsyncClient(auth=provider_for(server, hal, "Another Agent"), timeout=60) as http:
        async with Client(streamable_http_client(server.mcp_url, http_client=http)) as other:
            try:
                await other.session.call_tool(
                    "linked_account", {}, input_responses=answers, request_state=state, allow_input_required=True
                )
            except MCPError as e:
                assert e.error.code == -32602, e.error
            else:
                raise AssertionError("another user's agent used gale's state")


async def main() -> None:
    await scenario()
    await scenario_2026()
    await scenario_2026_http()


if __name__ == "__main__":
    asyncio.run(main())
