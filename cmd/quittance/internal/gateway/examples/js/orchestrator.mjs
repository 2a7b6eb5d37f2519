// An orchestrating agent on @a2a-js/sdk's client (1.3), delegating through
// Quittance's A2A gateway: GATEWAY.md's walk-through and TestGatewayJSClient
// run it with node. It resolves the gateway's card for the org with its
// bearer token, builds its client for BINDING (JSONRPC or HTTP+JSON) from
// the card, and walks one purchase order through: send, resend, follow,
// cancel, wait for the receipt; then the refusals (another tenant's task
// when OTHER_TASK names one). Each step prints one JSON line.
import crypto from 'node:crypto';
import { env, load, uri, client, print, text, Role, TaskState } from './gateway.mjs';

const { TaskNotFoundError, ExtensionSupportRequiredError } = await load('errors/index.js');
const message = (messageId, words, metadata) => ({
  messageId, contextId: '', taskId: '', role: Role.ROLE_USER, parts: [text(words)], metadata, extensions: [], referenceTaskIds: [],
});
const send = (msg) => client.sendMessage({ tenant: '', message: msg, configuration: undefined, metadata: undefined });
const get = (id) => client.getTask({ tenant: '', id, historyLength: undefined });
const ledger = (task) => task.metadata?.[uri] ?? {};
const state = (task) => TaskState[task.status?.state] ?? String(task.status?.state);
const waitFor = async (id, ok) => {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const task = await get(id);
    if (ok(task)) return task;
    if (Date.now() > deadline) throw new Error(`timed out; task ${JSON.stringify({ state: state(task), ledger: ledger(task) })}`);
    await new Promise((r) => setTimeout(r, 50));
  }
};
const refusal = async (what, call) => {
  try {
    await call();
    print(what, { error: 'none' });
  } catch (err) {
    const kind = err instanceof TaskNotFoundError ? 'TaskNotFound'
      : err instanceof ExtensionSupportRequiredError ? 'ExtensionSupportRequired' : err.constructor.name;
    print(what, { error: kind, message: err.message });
  }
};

const order = message(env('MESSAGE_ID'), 'Order 12 monitors for the Lyon office', {
  [uri]: { budget_id: env('BUDGET_ID'), task_class: 'procurement', hold: { amount_minor: 30000, currency: 'EUR' } },
});
const sent = await send(order);
print('sent', { id: sent.id, ledger: ledger(sent) });
const resent = await send(order);
print('resent', { id: resent.id, same: resent.id === sent.id });
const working = await waitFor(sent.id, (t) => state(t) === 'TASK_STATE_WORKING');
print('working', { ledger: ledger(working), status: working.status?.message?.parts?.map((p) => p.content?.value).join(' ') });
const canceled = await client.cancelTask({ tenant: '', id: sent.id, metadata: undefined });
print('cancel', { ledger: ledger(canceled) });
const done = await waitFor(sent.id, (t) => ledger(t).obligation_state === 'compensated');
print('compensated', { state: state(done), ledger: ledger(done) });

await refusal('no_extension', () => send(message(crypto.randomUUID(), 'Order 1 monitor', undefined)));
await refusal('unknown', () => get(crypto.randomUUID()));
if (process.env.OTHER_TASK) await refusal('other_tenant', () => get(process.env.OTHER_TASK));
