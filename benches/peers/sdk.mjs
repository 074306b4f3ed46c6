// The MCP TypeScript SDK's authorization server as a peer for
// benches/peers: its `mcpAuthRouter` (metadata, /authorize, /token,
// /register, /revoke) and `requireBearerAuth` in front of a trivial MCP
// handler, over an in-memory provider.
//
//   node sdk.mjs             # listens on 127.0.0.1, a free port
//
// Prints `LISTENING <port>` and `MCP URL: <url>` once it accepts connections.
//
// The provider follows the SDK's own demo (`DemoInMemoryAuthProvider` in
// its examples: clients, codes and tokens in maps, random UUID tokens, the
// user signed in without a page), with one addition the demo lacks:
// refresh tokens, rotated on every use, so that the rotation loads have
// something to measure. The router's rate limits are switched off (by
// default it allows 50 token requests per 15 minutes per address), as a
// benchmark from one address needs.

import { randomUUID } from 'node:crypto';
import express from 'express';
import { mcpAuthRouter } from '@modelcontextprotocol/sdk/server/auth/router.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import { InvalidGrantError, InvalidRequestError, InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js';

const ACCESS_TTL_SECS = 300;

class ClientsStore {
  clients = new Map();

  async getClient(clientId) {
    return this.clients.get(clientId);
  }

  async registerClient(client) {
    this.clients.set(client.client_id, client);
    return client;
  }
}

class InMemoryProvider {
  clientsStore = new ClientsStore();
  codes = new Map();
  tokens = new Map();
  refreshTokens = new Map();

  constructor(resource) {
    this.resource = resource;
  }

  // The demo's: the user is signed in and consents without a page.
  async authorize(client, params, res) {
    if (!client.redirect_uris.includes(params.redirectUri)) {
      throw new InvalidRequestError('Unregistered redirect_uri');
    }
    const code = randomUUID();
    this.codes.set(code, { client, params });
    const target = new URL(params.redirectUri);
    target.searchParams.set('code', code);
    if (params.state !== undefined) target.searchParams.set('state', params.state);
    res.redirect(target.toString());
  }

  async challengeForAuthorizationCode(_client, code) {
    const data = this.codes.get(code);
    if (!data) throw new InvalidGrantError('Invalid authorization code');
    return data.params.codeChallenge;
  }

  async exchangeAuthorizationCode(client, code) {
    const data = this.codes.get(code);
    if (!data || data.client.client_id !== client.client_id) {
      throw new InvalidGrantError('Invalid authorization code');
    }
    if (data.params.resource && data.params.resource.href !== this.resource) {
      throw new InvalidGrantError('Invalid resource');
    }
    this.codes.delete(code);
    return this.#issue(client.client_id, data.params.scopes ?? []);
  }

  // Rotation: the presented token is spent, a new one returned.
  async exchangeRefreshToken(client, refreshToken) {
    const data = this.refreshTokens.get(refreshToken);
    if (!data || data.clientId !== client.client_id) {
      throw new InvalidGrantError('Invalid refresh token');
    }
    this.refreshTokens.delete(refreshToken);
    return this.#issue(client.client_id, data.scopes);
  }

  #issue(clientId, scopes) {
    const access = randomUUID();
    const refresh = randomUUID();
    this.tokens.set(access, {
      clientId,
      scopes,
      expiresAt: Math.floor(Date.now() / 1000) + ACCESS_TTL_SECS,
      resource: new URL(this.resource),
    });
    this.refreshTokens.set(refresh, { clientId, scopes });
    return {
      access_token: access,
      token_type: 'bearer',
      expires_in: ACCESS_TTL_SECS,
      refresh_token: refresh,
      scope: scopes.join(' '),
    };
  }

  async verifyAccessToken(token) {
    const data = this.tokens.get(token);
    if (!data || data.expiresAt < Date.now() / 1000) {
      throw new InvalidTokenError('Invalid or expired token');
    }
    return { token, ...data };
  }
}

const app = express();
const server = await new Promise((resolve) => {
  const s = app.listen(0, '127.0.0.1', () => resolve(s));
});
const { port } = server.address();
const origin = `http://127.0.0.1:${port}`;
const resource = `${origin}/mcp`;
const provider = new InMemoryProvider(resource);

const noLimit = { rateLimit: false };
app.use(
  mcpAuthRouter({
    provider,
    issuerUrl: new URL(origin),
    resourceServerUrl: new URL(resource),
    scopesSupported: ['mcp'],
    authorizationOptions: noLimit,
    tokenOptions: noLimit,
    clientRegistrationOptions: noLimit,
    revocationOptions: noLimit,
  }),
);
app.post(
  '/mcp',
  requireBearerAuth({ verifier: provider, expectedResource: new URL(resource) }),
  express.json(),
  (req, res) => {
    res.json({ jsonrpc: '2.0', id: req.body?.id ?? null, result: {} });
  },
);
// Keep-alive connections stay open between the loads of a run.
server.keepAliveTimeout = 60_000;

console.log(`LISTENING ${port}`);
console.log(`MCP URL: ${resource}`);
