// What the JS orchestrators share: @a2a-js/sdk (1.3), loaded from
// NODE_MODULES, and a client of the org's gateway (GATEWAY_URL, with a
// trailing slash) over BINDING (JSONRPC or HTTP+JSON), built from the
// gateway's card, which it resolves with the orchestrator's bearer token
// (ORCH_TOKEN). LEDGER_EXT is the ledger extension's URI.
import { pathToFileURL } from 'node:url';

export const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set`);
  return v;
};
export const load = (path) => import(pathToFileURL(`${env('NODE_MODULES')}/@a2a-js/sdk/dist/${path}`).href);
export const { Role, TaskState } = await load('index.js');
const { ClientFactory, ClientFactoryOptions, DefaultAgentCardResolver, JsonRpcTransportFactory, RestTransportFactory,
  createAuthenticatingFetchWithRetry } = await load('client/index.js');

export const uri = env('LEDGER_EXT');
const token = env('ORCH_TOKEN');
const authed = createAuthenticatingFetchWithRetry(fetch, {
  headers: async () => ({ Authorization: `Bearer ${token}` }),
  shouldRetryWithHeaders: async () => undefined,
});
const factory = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
  transports: [new JsonRpcTransportFactory({ fetchImpl: authed }), new RestTransportFactory({ fetchImpl: authed })],
  preferredTransports: [env('BINDING')],
  cardResolver: new DefaultAgentCardResolver({ fetchImpl: authed }),
}));
export const client = await factory.createFromUrl(env('GATEWAY_URL'));

// print prints one step as a JSON line; text is a text part.
export const print = (step, fields) => console.log(JSON.stringify({ step, ...fields }));
export const text = (value) => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: 'text/plain' });
