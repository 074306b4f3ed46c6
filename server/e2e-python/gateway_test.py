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

Run by `run.sh` (and `.ci/run`) after `sdk_test.py`. Exits non-zero on the
first failed check.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx2
from mcp import Client, types
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata

from sdk_test import REDIRECT, Server, Storage, Tab, User

HERE = Path(__file__).resolve().parent
PAGE = "ui://portcullis/py/board/main.html"


def source_flag() -> str:
    """`--source` for the Python downstream, run by this interpreter."""
    return f"py=cmd:{sys.executable} {HERE / 'downstream.py'}"


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


if __name__ == "__main__":
    asyncio.run(scenario())
