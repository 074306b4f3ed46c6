// Access tokens checked by an independent library, `jose`, against the key
// set `portcullis serve --access-token-alg eddsa|es256` publishes: the
// token is obtained through the MCP SDK's own OAuth flow, then verified
// with nothing but the `jwks_uri` of the server's RFC 8414 document, its
// issuer and the MCP URL as the audience; a token altered by one byte, or
// checked for another audience or issuer, is refused.
import { test } from "node:test";
import assert from "node:assert/strict";
import { auth } from "@modelcontextprotocol/sdk/client/auth.js";
import { createRemoteJWKSet, decodeProtectedHeader, jwtVerify } from "jose";
import { startServer, Provider } from "./helpers.mjs";

for (const [flag, alg] of [["eddsa", "EdDSA"], ["es256", "ES256"]]) {
  test(`jose verifies ${alg} access tokens with the published key set`, async (t) => {
    const server = await startServer(["--access-token-alg", flag]);
    t.after(() => server.stop());
    const provider = new Provider("alice");
    const serverUrl = new URL(server.mcpUrl);
    assert.equal(await auth(provider, { serverUrl }), "REDIRECT");
    assert.equal(await auth(provider, { serverUrl, authorizationCode: provider.code }), "AUTHORIZED");
    const token = provider.tokens().access_token;

    const metadata = await (await fetch(`${server.base}/.well-known/oauth-authorization-server`)).json();
    assert.equal(metadata.jwks_uri, `${server.base}/.well-known/jwks.json`);
    const published = await fetch(metadata.jwks_uri);
    assert.match(published.headers.get("cache-control"), /max-age=300/);
    const set = await published.json();
    for (const key of set.keys) {
      assert.equal(key.d, undefined, "public keys only");
      assert.equal(key.use, "sig");
    }

    const keys = createRemoteJWKSet(new URL(metadata.jwks_uri));
    const header = decodeProtectedHeader(token);
    assert.equal(header.alg, alg);
    assert.equal(header.typ, "at+jwt");
    assert.ok(set.keys.some((k) => k.kid === header.kid), "the token names a published key");
    const { payload } = await jwtVerify(token, keys, {
      issuer: metadata.issuer,
      audience: server.mcpUrl,
      algorithms: [alg],
      typ: "at+jwt",
    });
    assert.equal(payload.sub, "alice");
    assert.equal(payload.client_id, provider.client.client_id);
    assert.match(payload.scope, /skills:read/);

    // One byte of the signature changed; another audience; another issuer.
    const [h, p, s] = token.split(".");
    const flipped = `${h}.${p}.${s[0] === "A" ? "B" : "A"}${s.slice(1)}`;
    await assert.rejects(jwtVerify(flipped, keys, { issuer: metadata.issuer, audience: server.mcpUrl }));
    await assert.rejects(jwtVerify(token, keys, { issuer: metadata.issuer, audience: `${server.mcpUrl}x` }));
    await assert.rejects(jwtVerify(token, keys, { issuer: "https://elsewhere.example", audience: server.mcpUrl }));
  });
}
