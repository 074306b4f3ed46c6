"""A downstream MCP server for the gateway scenarios, on the official MCP
Python SDK (`MCPServer`, the SDK's FastMCP), speaking MCP over stdio: the
gateway starts it as a source (`--source py=cmd:python downstream.py`).

It has a typed read-only tool (`lookup`, with an output schema), a typed
write (`stamp`: it needs the user's approval), an
unannotated tool named like the notes app's own skill (`create_note`), an
MCP Apps HTML page that names itself, and a resource template.
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

PAGE = "ui://board/main.html"
HTML = (
    f'<!doctype html><html><head><meta name="app" content="{PAGE}"></head>'
    f'<body><a href="{PAGE}">reload</a> <span>{PAGE}.map</span></body></html>\n'
)

server = MCPServer("py-downstream", version="1.0.0")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup(word: str) -> dict[str, int | str]:
    """Looks a word up (read only): its length, typed."""
    return {"word": word, "length": len(word)}


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def stamp(word: str) -> dict[str, bool | str]:
    """Stamps a word (a write, typed): it asks the user first."""
    print(f"downstream stamp {word}", file=sys.stderr, flush=True)
    return {"word": word, "stamped": True}


@server.tool(structured_output=False)
def create_note(title: str) -> str:
    """Creates a note in this downstream (its own, not the app's)."""
    print(f"downstream create_note {title}", file=sys.stderr, flush=True)
    return f"created {title}"


@server.resource(PAGE, name="board", mime_type="text/html;profile=mcp-app")
def board() -> str:
    """The board's MCP Apps page."""
    return HTML


@server.resource("ui://board/{name}.html", name="boards", mime_type="text/html;profile=mcp-app")
def named_board(name: str) -> str:
    """Another board's page."""
    return f"<p>{name}</p>"


if __name__ == "__main__":
    server.run("stdio")
