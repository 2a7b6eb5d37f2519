// An orchestrating agent on @a2a-js/sdk's client (1.3) following a task
// that asks for input, through Quittance's A2A gateway:
// TestGatewayJSClientStreams runs it with node against an agent that asks
// which cost center to charge. It streams the send until the task stops
// in input_required, registers a push config for the task, answers on the
// task's id with a streamed message followed to the task's end, sends the
// answer again (the same answer), resubscribes to the ended task, then
// refines it (a new task in its context, referring to it) and cancels the
// refinement. Each step prints one JSON line.
import { env, uri, client, print, text, Role, TaskState } from '../examples/js/gateway.mjs';

const words = (parts) => (parts ?? []).map((p) => p.content?.value).join(' ');
const message = (fields) => ({
  contextId: '', taskId: '', role: Role.ROLE_USER, metadata: undefined, extensions: [], referenceTaskIds: [], ...fields,
});
const hold = (amount, taskClass) => ({ [uri]: { budget_id: env('BUDGET_ID'), task_class: taskClass, hold: { amount_minor: amount, currency: 'EUR' } } });
const request = (msg) => ({ tenant: '', message: msg, configuration: undefined, metadata: undefined });
const state = (s) => TaskState[s?.state] ?? String(s?.state);

// follow reads a stream to its end: the states it went through, the
// task's id and context, and the last artifact's words.
const follow = async (stream) => {
  const out = { states: [], id: '', contextId: '', artifact: '' };
  for await (const ev of stream) {
    const { $case: kind, value } = ev.payload ?? {};
    if (kind === 'task') {
      Object.assign(out, { id: value.id, contextId: value.contextId });
      out.states.push(state(value.status));
    } else if (kind === 'statusUpdate') {
      out.states.push(state(value.status));
      out.ledger = value.metadata?.[uri] ?? out.ledger;
    } else if (kind === 'artifactUpdate') {
      out.artifact = words(value.artifact?.parts);
    }
  }
  out.states = out.states.filter((s, i) => s !== out.states[i - 1]);
  return out;
};

const asked = await follow(client.sendMessageStream(request(message({
  messageId: env('MESSAGE_ID'), parts: [text('input_required')], metadata: hold(20000, 'procurement'),
}))));
print('streamed', asked);
// Pushes of the task from here on, to the receiver at PUSH_URL.
const push = await client.createTaskPushNotificationConfig({
  tenant: '', id: 'js-receiver', taskId: asked.id, url: env('PUSH_URL'), token: env('PUSH_TOKEN'), authentication: undefined,
});
print('push', { id: push.id, task: push.taskId });
const task = await client.getTask({ tenant: '', id: asked.id, historyLength: undefined });
print('asked', { state: state(task.status), question: words(task.status?.message?.parts) });

const answer = message({ messageId: `${env('MESSAGE_ID')}-answer`, taskId: asked.id, contextId: asked.contextId, parts: [text('CC-42')] });
const answered = await follow(client.sendMessageStream(request(answer)));
print('answered', { id: answered.id, states: answered.states, artifact: answered.artifact });
const again = await client.sendMessage(request(answer));
print('answered_again', { id: again.id });
const resubscribed = await follow(client.resubscribeTask({ tenant: '', id: asked.id }));
// The answer's reply may carry the completion alone: the artifact comes
// with Quittance's next read of the task.
let ended;
for (const deadline = Date.now() + 30_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 50))) {
  ended = await client.getTask({ tenant: '', id: asked.id, historyLength: undefined });
  if (ended.artifacts?.length) break;
}
print('completed', { states: resubscribed.states, state: state(ended.status), artifact: words(ended.artifacts?.[0]?.parts),
  obligation: ended.metadata?.[uri]?.obligation_state });

const refined = await client.sendMessage(request(message({
  messageId: `${env('MESSAGE_ID')}-more`, contextId: asked.contextId, referenceTaskIds: [asked.id],
  parts: [text('Add 3 gaskets to that order')], metadata: hold(1000, 'read_only'),
})));
print('refined', { same_context: refined.contextId === asked.contextId, id: refined.id });
const canceled = await client.cancelTask({ tenant: '', id: refined.id, metadata: undefined });
print('canceled', { obligation: canceled.metadata?.[uri]?.obligation_state });
