// node-oidc-provider as a peer for benches/peers: an authorization server
// configured as close to `portcullis serve` as it goes, plus a resource
// server route that checks its JWT access tokens with `jose`.
//
//   node oidc.mjs            # listens on 127.0.0.1, a free port
//
// Prints `LISTENING <port>` and `MCP URL: <url>` once it accepts connections.
//
// * In memory: node-oidc-provider's own MemoryAdapter over an unbounded map.
//   Its default store is an LRU of 1 000 entries meant for development,
//   which under load drops the codes, grants and clients a benchmark has
//   yet to use; the adapter code itself is the library's.
// * Dynamic registration on; public clients (`none`) with PKCE (required for
//   them by default).
// * Refresh tokens for every client allowed the grant, rotated on every use
//   (`rotateRefreshToken` always true), as Portcullis rotates.
// * JWT access tokens for the resource indicator `<origin>/mcp`, signed
//   HS256 with a 32-byte secret: the same algorithm as Portcullis's default,
//   so the comparison is not one of signature schemes. 300 s, as Portcullis.
// * Sign-in and consent: a custom interaction that signs the user in and
//   grants the requested scope on the resource at once (no page), so a code
//   costs GET /auth, GET /interaction/<uid>, GET /auth/<uid>.
// * POST /mcp: the bearer check a resource server does with `jose`
//   (signature, issuer, audience, expiry, `at+jwt` type), then a JSON-RPC
//   `ping` answered `{}`.

import { createServer } from 'node:http';
import { randomBytes, createSecretKey, generateKeyPairSync } from 'node:crypto';
import Provider from 'oidc-provider';
import MemoryAdapter from 'oidc-provider/lib/adapters/memory_adapter.js';
import { jwtVerify } from 'jose';

// The store MemoryAdapter expects (get, set with maxAge, delete), unbounded,
// with the same expiry semantics as the library's LRU.
class UnboundedStore {
  #map = new Map();

  get(key) {
    const entry = this.#map.get(key);
    if (entry === undefined) return undefined;
    if (entry.expiry !== undefined && entry.expiry <= Date.now()) {
      this.#map.delete(key);
      return undefined;
    }
    return entry.value;
  }

  set(key, value, { maxAge } = {}) {
    const expiry = typeof maxAge === 'number' && maxAge !== Infinity ? Date.now() + maxAge : undefined;
    this.#map.set(key, { value, expiry });
  }

  delete(key) {
    this.#map.delete(key);
  }
}

const SCOPE = 'mcp';
const secret = createSecretKey(randomBytes(32));

const server = createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const { port } = server.address();
const origin = `http://127.0.0.1:${port}`;
const resource = `${origin}/mcp`;

const store = new UnboundedStore();
const provider = new Provider(origin, {
  adapter: (model) => new MemoryAdapter(model, store),
  clients: [],
  // Its own signing key (ID tokens, never issued here), so that the
  // library does not fall back to its development-only keys.
  jwks: { keys: [generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' })] },
  cookies: { keys: [randomBytes(32).toString('base64url')] },
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    revocation: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => resource,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, indicator) => {
        if (indicator !== resource) throw new Provider.errors.InvalidTarget();
        return {
          scope: SCOPE,
          audience: resource,
          accessTokenTTL: 300,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'HS256', key: secret } },
        };
      },
    },
  },
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  issueRefreshToken: (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  rotateRefreshToken: () => true,
  ttl: { AccessToken: 300 },
  findAccount: (_ctx, sub) => ({ accountId: sub, claims: () => ({ sub }) }),
});
// Requests come straight from loopback; nothing to log per request.
provider.on('server_error', (_ctx, err) => console.error('server_error', err));

// The interaction: sign in as `bench` and grant what was asked.
async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { params } = details;
  const grant = new provider.Grant({ accountId: 'bench', clientId: params.client_id });
  grant.addResourceScope(params.resource ?? resource, params.scope ?? SCOPE);
  const grantId = await grant.save();
  await provider.interactionFinished(req, res, {
    login: { accountId: 'bench' },
    consent: { grantId },
  });
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

function json(res, status, body, headers = {}) {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

// The resource server's bearer check, then a JSON-RPC `ping`.
async function mcp(req, res) {
  const body = await readBody(req);
  const header = req.headers.authorization ?? '';
  const token = header.startsWith('Bearer ') ? header.slice(7) : '';
  try {
    await jwtVerify(token, secret, {
      issuer: origin,
      audience: resource,
      algorithms: ['HS256'],
      typ: 'at+jwt',
    });
  } catch {
    json(res, 401, { error: 'invalid_token' }, { 'www-authenticate': 'Bearer error="invalid_token"' });
    return;
  }
  let id = null;
  try {
    ({ id } = JSON.parse(body));
  } catch {
    json(res, 400, { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'parse error' } });
    return;
  }
  json(res, 200, { jsonrpc: '2.0', id, result: {} });
}

const callback = provider.callback();
server.on('request', (req, res) => {
  const fail = (err) => {
    console.error(err);
    if (!res.headersSent) json(res, 500, { error: 'server_error' });
  };
  if (req.method === 'POST' && req.url === '/mcp') {
    mcp(req, res).catch(fail);
  } else if (req.method === 'GET' && req.url.startsWith('/interaction/')) {
    interaction(req, res).catch(fail);
  } else {
    callback(req, res);
  }
});
// Keep-alive connections stay open between the loads of a run.
server.keepAliveTimeout = 60_000;

console.log(`LISTENING ${port}`);
console.log(`MCP URL: ${resource}`);
