// A real OpenID Provider on loopback for the sign-in tests: panva's oidc-provider (OpenID
// Certified), with its development login pages (any login name signs in as that user).
// Usage: node provider.mjs PORT KEYS.json   (KEYS.json: {"keys": [private JWKs]}; printing "ready")
import { readFileSync } from "node:fs";
import Provider from "oidc-provider";

const [port, keysPath] = process.argv.slice(2);
const issuer = `http://127.0.0.1:${port}`;
const client = (id) => ({
  client_id: id, client_secret: `${id}-secret`, redirect_uris: ["http://127.0.0.1/callback"],
  grant_types: ["authorization_code"], response_types: ["code"], token_endpoint_auth_method: "client_secret_post",
});
const provider = new Provider(issuer, {
  clients: [client("chat-agent"), client("other-app")],
  jwks: JSON.parse(readFileSync(keysPath, "utf8")),
  findAccount: async (ctx, id) => ({ accountId: id, claims: async () => ({ sub: id }) }),
  pkce: { required: () => false },
  features: { devInteractions: { enabled: true } },
  cookies: { keys: ["chat-agent-tests"] },
});
provider.listen(Number(port), "127.0.0.1", () => console.log("ready"));
