"""A downstream MCP server that speaks only protocol 2026-07-28, on the
official MCP Python SDK (`MCPServer`), over stdio (the gateway starts it as
a source: `--source notes=cmd:python downstream_2026.py`) or, with
`http PORT`, over Streamable HTTP on loopback.

The SDK serves both eras on one connection, the client's first request
deciding which; a middleware refuses `initialize` here (the SDK runs every
inbound message through its middleware first, and commits nothing when one
refuses), so only a client that opens with `server/discover` and sends the
2026-07-28 `_meta` on each request can use it. Its tools and its resource
template ask for input the way 2026-07-28 does it, as multi round-trip
requests:

* `file_note` (a typed write): the SDK's own resolver asks, through an
  `InputRequiredResult`, which folder the note goes in (a form); the answer
  rides back in the SDK's sealed `requestState`.
* `linked_account` (read-only, typed): asks the person to open a sign-in
  page (a URL elicitation), by hand: it returns the `InputRequiredResult`
  itself and reads the answer from the retry.
* `vault://{name}` (a resource template): asks for a passphrase (a form)
  before it answers the read.

Each effect and each question is logged on stderr, so the test counts them.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp.shared.exceptions import MCPError
from mcp_types import (
    UNSUPPORTED_PROTOCOL_VERSION,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitRequestURLParams,
    ElicitResult,
    InputRequiredResult,
    ToolAnnotations,
)
from pydantic import BaseModel

SIGN_IN = "https://notes.example/sign-in"


async def only_2026(ctx: Any, call_next: Any) -> Any:
    """Refuses the `initialize` handshake: this server has no older revision."""
    if ctx.method == "initialize":
        print("downstream2026 refused initialize", file=sys.stderr, flush=True)
        raise MCPError(
            code=UNSUPPORTED_PROTOCOL_VERSION,
            message="this server speaks only protocol 2026-07-28: send server/discover",
            data={"supported": ["2026-07-28"]},
        )
    return await call_next(ctx)


server = MCPServer("notes-2026", version="1.0.0", middleware=[only_2026])


class Folder(BaseModel):
    folder: str


def ask_folder(title: str) -> Elicit[Folder]:
    print(f"downstream2026 asks the folder of {title}", file=sys.stderr, flush=True)
    return Elicit(f"Which folder should {title!r} go in?", Folder)


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def file_note(title: str, where: Annotated[Folder, Resolve(ask_folder)]) -> dict[str, str]:
    """Files a note in a folder it asks you for (a write)."""
    print(f"downstream2026 file_note {title} in {where.folder}", file=sys.stderr, flush=True)
    return {"title": title, "folder": where.folder}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def linked_account(ctx: Context) -> dict[str, str] | InputRequiredResult:
    """The account linked to the notes service: asks you to sign in first."""
    answer = (ctx.input_responses or {}).get("sign_in")
    if ctx.request_state != "asked" or not isinstance(answer, ElicitResult):
        print("downstream2026 asks to sign in", file=sys.stderr, flush=True)
        ask = ElicitRequest(params=ElicitRequestURLParams(message="Sign in to the notes service", url=SIGN_IN))
        return InputRequiredResult(input_requests={"sign_in": ask}, request_state="asked")
    return {"account": "gale", "signIn": answer.action}


class Passphrase(BaseModel):
    passphrase: str


@server.resource("vault://{name}", name="vault", mime_type="text/plain")
def vault(name: str, ctx: Context) -> str | InputRequiredResult:
    """A vault entry: asks for the passphrase first."""
    answer = (ctx.input_responses or {}).get("passphrase")
    content = answer.content if isinstance(answer, ElicitResult) else None
    if ctx.request_state != f"vault:{name}" or not isinstance(content, dict):
        print(f"downstream2026 asks the passphrase of {name}", file=sys.stderr, flush=True)
        ask = ElicitRequest(
            params=ElicitRequestFormParams(
                message=f"The passphrase of {name}?",
                requested_schema=Passphrase.model_json_schema(),
            )
        )
        return InputRequiredResult(input_requests={"passphrase": ask}, request_state=f"vault:{name}")
    return f"{name}: opened with {content.get('passphrase')}"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        # Streamable HTTP on loopback, stateless: every POST stands alone.
        port = int(sys.argv[2])
        server.run("streamable-http", host="127.0.0.1", port=port, stateless_http=True, json_response=True)
    else:
        server.run("stdio")
