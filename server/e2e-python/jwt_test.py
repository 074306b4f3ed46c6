"""Access tokens checked by an independent library, PyJWT, against the key
set `portcullis serve --access-token-alg eddsa|es256` publishes.

For each algorithm, a fresh server: the MCP Python SDK signs in (discovery,
registration, consent) and lists tools; its access token is then verified
with nothing but the `jwks_uri` of the server's RFC 8414 document
(`jwt.PyJWKClient`), the issuer and the MCP URL as the audience. A token
altered by one byte, or checked for another audience or issuer, is refused.

Run by `run.sh` (and `.ci/run`). Exits non-zero on the first failed check.
"""

from __future__ import annotations

import asyncio
import sys

import httpx2
import jwt
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata

from sdk_test import REDIRECT, Server, Storage, User


async def token_from_the_sdk(server: Server) -> tuple[str, str]:
    """An access token the SDK obtained for alice, and its client id."""
    user, storage = User("alice"), Storage()
    provider = OAuthClientProvider(
        server_url=server.mcp_url,
        client_metadata=OAuthClientMetadata(
            client_name="PyJWT check",
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
        async with Client(streamable_http_client(server.mcp_url, http_client=http)) as client:
            await client.list_tools()
    assert storage.tokens is not None and storage.client is not None
    return storage.tokens.access_token, storage.client.client_id


def refused(token: str, key, alg: str, audience: str, issuer: str) -> bool:
    try:
        jwt.decode(token, key, algorithms=[alg], audience=audience, issuer=issuer)
    except jwt.InvalidTokenError:
        return True
    return False


async def check(flag: str, alg: str) -> None:
    server = Server(["--access-token-alg", flag])
    try:
        token, client_id = await token_from_the_sdk(server)
        async with httpx2.AsyncClient() as http:
            metadata = (await http.get(f"{server.base}/.well-known/oauth-authorization-server")).json()
            published = await http.get(metadata["jwks_uri"])
        assert metadata["jwks_uri"] == f"{server.base}/.well-known/jwks.json", metadata
        assert "max-age=300" in published.headers["cache-control"], published.headers
        for key in published.json()["keys"]:
            assert "d" not in key, "public keys only"

        header = jwt.get_unverified_header(token)
        assert header["alg"] == alg and header["typ"] == "at+jwt", header
        # PyJWT fetches the set itself and picks the key the token names.
        key = jwt.PyJWKClient(metadata["jwks_uri"]).get_signing_key_from_jwt(token)
        claims = jwt.decode(
            token,
            key,
            algorithms=[alg],
            audience=server.mcp_url,
            issuer=metadata["issuer"],
            options={"require": ["exp", "iat", "sub", "aud", "iss"]},
        )
        assert claims["sub"] == "alice", claims
        assert claims["client_id"] == client_id, claims
        assert "skills:read" in claims["scope"].split(), claims

        head, payload, signature = token.split(".")
        flipped = f"{head}.{payload}.{'B' if signature[0] == 'A' else 'A'}{signature[1:]}"
        assert refused(flipped, key, alg, server.mcp_url, metadata["issuer"]), "a changed signature"
        assert refused(token, key, alg, server.mcp_url + "x", metadata["issuer"]), "another audience"
        assert refused(token, key, alg, server.mcp_url, "https://elsewhere.example"), "another issuer"
    except BaseException:
        print(server.logs()[-4000:], file=sys.stderr)
        raise
    finally:
        server.stop()
    print(f"ok: PyJWT verifies {alg} access tokens with the published key set")


async def main() -> None:
    await check("eddsa", "EdDSA")
    await check("es256", "ES256")


if __name__ == "__main__":
    asyncio.run(main())
