// An A2A remote agent built on the official JS SDK (@a2a-js/sdk), used by
// Quittance's interop tests as a peer we did not write the server side of.
// The Go harness (../jspeer.go) starts it; it is configured by environment:
//
//   JSPEER_SIGNING_JWK    private Ed25519 JWK (with kid) that signs receipts
//   JSPEER_ORG_ID         "iss" of the receipts' tokens
//   JSPEER_LEDGER_ID      "aud" of the receipts' tokens
//   JSPEER_OUTCOME        compensation outcome: compensated | no_effects
//   JSPEER_WORK_MS        how long the "work" scenario works before it
//                         completes (0: until canceled)
//   JSPEER_ATOMIC_CANCEL  "1": declare atomicCancel and put a receipt in
//                         the cancel response
//   JSPEER_PENDING_MS     how long a compensation_pending reversal works
//                         before its final receipt (default 1000)
//
// It listens on 127.0.0.1 on a free port and prints
// "JSPEER_LISTENING <port>" on stdout once it serves; it also prints
// "JSPEER_COMPENSATION_REQUEST <taskId> <messageId>" for each compensation
// request and "JSPEER_PURGED <taskId>" for each purge, which the harness
// reads back (Peer.CompensationRequests, Peer.Purged). It exits when its
// stdin closes, so it never outlives the test process.
//
// The first user message picks the scenario by its text: work (default),
// complete, fail, input_required, auth_required, not_cancelable, and three
// that work like "work" until the end of the task and then differ:
// compensation_pending and compensation_not_supported (how a compensation
// request for the task is answered) and purge_on_cancel (the cancel purges
// the task). A message with a {"compensationRequest": {...}} data part is a
// compensation request (https://quittance.dev/a2a/compensation/v1).

import crypto from 'node:crypto';
import http from 'node:http';
import express from 'express';
import { Role, TaskState } from '@a2a-js/sdk';
import { TaskNotCancelableError, TaskNotFoundError } from '@a2a-js/sdk/errors';
import {
  AgentEvent,
  DefaultExecutionEventBusManager,
  DefaultRequestHandler,
  InMemoryPushNotificationStore,
  InMemoryTaskStore,
} from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';
import { createLegacyAwarePushNotificationSender } from '@a2a-js/sdk/compat/v0_3/server';

const EXTENSION_URI = 'https://quittance.dev/a2a/compensation/v1';
const RPC_PATH = '/a2a/jsonrpc';
const TOKEN_LIFETIME_S = 300;

const env = process.env;
const signingJwk = JSON.parse(env.JSPEER_SIGNING_JWK ?? 'null');
if (!signingJwk?.kid || !signingJwk?.d) {
  console.error('jspeer: JSPEER_SIGNING_JWK must hold a private JWK with a kid');
  process.exit(2);
}
const signingKey = crypto.createPrivateKey({ key: signingJwk, format: 'jwk' });
const orgId = env.JSPEER_ORG_ID || 'js-peer';
const ledgerId = env.JSPEER_LEDGER_ID || 'quittance';
const outcome = env.JSPEER_OUTCOME || 'compensated';
const workMs = Number(env.JSPEER_WORK_MS || '0');
const atomicCancel = env.JSPEER_ATOMIC_CANCEL === '1';
const pendingMs = Number(env.JSPEER_PENDING_MS || '1000');

// ---- wire helpers (the SDK's internal, ts-proto shaped objects) ----

const textPart = (value) => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: 'text/plain' });
const dataPart = (value) => ({ content: { $case: 'data', value }, metadata: undefined, filename: '', mediaType: 'application/json' });

function agentMessage(taskId, contextId, text) {
  return {
    messageId: crypto.randomUUID(), contextId, taskId, role: Role.ROLE_AGENT,
    parts: [textPart(text)], metadata: undefined, extensions: [], referenceTaskIds: [],
  };
}

function status(state, taskId, contextId, text) {
  return {
    state,
    message: text ? agentMessage(taskId, contextId, text) : undefined,
    timestamp: new Date().toISOString(),
  };
}

function statusUpdate(taskId, contextId, state, text) {
  return AgentEvent.statusUpdate({ taskId, contextId, status: status(state, taskId, contextId, text), metadata: undefined });
}

function artifactUpdate(taskId, contextId, artifact) {
  return AgentEvent.artifactUpdate({ taskId, contextId, artifact, append: false, lastChunk: true, metadata: undefined });
}

function textOf(message) {
  return (message?.parts ?? [])
    .filter((p) => p.content?.$case === 'text')
    .map((p) => p.content.value)
    .join('\n')
    .trim();
}

function compensationRequestOf(message) {
  for (const p of message?.parts ?? []) {
    if (p.content?.$case === 'data' && p.content.value && typeof p.content.value === 'object' && p.content.value.compensationRequest) {
      const req = { ...p.content.value.compensationRequest };
      if (!req.taskId && message.referenceTaskIds?.length) req.taskId = message.referenceTaskIds[0];
      return req;
    }
  }
  return undefined;
}

// ---- receipts ----

const b64url = (buf) => Buffer.from(buf).toString('base64url');

function signToken(typ, claims) {
  const header = { alg: 'EdDSA', kid: signingJwk.kid, typ };
  const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(claims))}`;
  return `${input}.${b64url(crypto.sign(null, Buffer.from(input), signingKey))}`;
}

const receipts = new Map(); // idempotency key -> receipt

function receiptFor(taskId, idempotencyKey) {
  const existing = receipts.get(idempotencyKey);
  if (existing) {
    return existing.taskId === taskId ? existing : undefined;
  }
  const now = Math.floor(Date.now() / 1000);
  const receiptId = `rcpt-${crypto.randomUUID()}`;
  const claims = { iss: orgId, aud: ledgerId, sub: taskId, jti: crypto.randomUUID(), iat: now, exp: now + TOKEN_LIFETIME_S };
  let typ = 'no-compensation-required+jwt';
  if (outcome === 'compensated') {
    typ = 'compensation-ack+jwt';
    claims.idempotency_key = idempotencyKey;
    claims.receipt_id = receiptId;
  }
  const receipt = { outcome, receiptId, taskId, idempotencyKey, jws: signToken(typ, claims) };
  receipts.set(idempotencyKey, receipt);
  return receipt;
}

// A receipt that is not evidence: pending (the reversal is under way; the
// final receipt follows on the same compensation task) or not_supported.
// Not kept: the final answer for the key is still to come, or never.
function interimReceipt(outcome, taskId, idempotencyKey, reason) {
  return { outcome, receiptId: `rcpt-${crypto.randomUUID()}`, taskId, idempotencyKey, reason };
}

function receiptArtifact(receipt) {
  return {
    artifactId: `receipt-${receipt.receiptId}`, name: 'compensation-receipt',
    description: `Compensation receipt for task ${receipt.taskId}.`,
    parts: [dataPart(receipt)], metadata: undefined, extensions: [EXTENSION_URI],
  };
}

// ---- the executor ----

const SCENARIOS = new Set([
  'work', 'complete', 'fail', 'input_required', 'auth_required', 'not_cancelable',
  'compensation_pending', 'compensation_not_supported', 'purge_on_cancel',
]);

// A task store that can purge a task, as an agent with a short retention
// does: a purged task is never loaded, saved or listed again, so every call
// naming it answers TaskNotFoundError.
class PurgingTaskStore extends InMemoryTaskStore {
  purged = new Set();

  purge(taskId) {
    this.purged.add(taskId);
  }

  async load(taskId, context) {
    return this.purged.has(taskId) ? undefined : super.load(taskId, context);
  }

  async save(task, context) {
    if (!this.purged.has(task.id)) await super.save(task, context);
  }

  async list(params, context) {
    const page = await super.list(params, context);
    const kept = page.tasks.filter((t) => !this.purged.has(t.id));
    return { ...page, tasks: kept, totalSize: Math.max(0, (page.totalSize ?? kept.length) - (page.tasks.length - kept.length)) };
  }
}

class PeerExecutor {
  // taskId -> { scenario, contextId, resolve, timer } for working tasks
  running = new Map();
  // taskId -> contextId of every task this executor started
  contexts = new Map();
  // taskId -> scenario of every task this executor started
  scenarios = new Map();

  constructor(store) {
    this.store = store;
  }

  async execute(ctx, bus) {
    const { taskId, contextId } = ctx;
    const message = ctx.userMessage;
    this.contexts.set(taskId, contextId);

    if (ctx.task) {
      // A follow-up turn (input_required answered, auth granted): finish.
      bus.publish(AgentEvent.task(ctx.task));
      bus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_WORKING, 'Resuming with your answer.'));
      bus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_COMPLETED, 'Done.'));
      return;
    }

    const task = {
      id: taskId, contextId, status: status(TaskState.TASK_STATE_SUBMITTED, taskId, contextId),
      artifacts: [], history: [message], metadata: undefined,
    };
    bus.publish(AgentEvent.task(task));

    const req = compensationRequestOf(message);
    if (req) {
      console.log(`JSPEER_COMPENSATION_REQUEST ${req.taskId ?? ''} ${message.messageId}`);
      await this.compensate(req, taskId, contextId, bus);
      return;
    }

    const word = textOf(message).toLowerCase();
    const scenario = SCENARIOS.has(word) ? word : 'work';
    this.scenarios.set(taskId, scenario);
    switch (scenario) {
      case 'complete':
        bus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_WORKING, 'Working.'));
        bus.publish(artifactUpdate(taskId, contextId, {
          artifactId: crypto.randomUUID(), name: 'result', description: '', parts: [dataPart({ done: true })],
          metadata: undefined, extensions: [],
        }));
        bus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_COMPLETED, 'Completed.'));
        return;
      case 'fail':
        bus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_WORKING, 'Working.'));
        bus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_FAILED, 'The supplier system rejected the order.'));
        return;
      case 'input_required':
        bus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_INPUT_REQUIRED, 'Which cost center should be charged?'));
        return;
      case 'auth_required':
        bus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_AUTH_REQUIRED,
          `Consent needed: https://consent.example.test/authorize?task=${encodeURIComponent(taskId)}`));
        return; // the bus stays open (AUTH_REQUIRED) until canceled
      default: { // work, not_cancelable, compensation_*, purge_on_cancel
        bus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_WORKING, 'Working; effects committed.'));
        await new Promise((resolve) => {
          const entry = { scenario, contextId, resolve, timer: undefined };
          if (workMs > 0) {
            entry.timer = setTimeout(() => {
              this.running.delete(taskId);
              bus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_COMPLETED, 'Completed.'));
              resolve();
            }, workMs);
          }
          this.running.set(taskId, entry);
        });
      }
    }
  }

  // compensate answers a compensation request on the compensation task
  // taskId. The compensated task's scenario picks the answer: a
  // not_supported receipt (completed), a pending receipt on a working task
  // followed after JSPEER_PENDING_MS by the final receipt (completed), or,
  // by default, the final receipt at once.
  async compensate(req, taskId, contextId, bus) {
    if (!req.taskId || !req.idempotencyKey) {
      bus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_REJECTED, 'compensationRequest needs taskId and idempotencyKey'));
      return;
    }
    const scenario = this.scenarios.get(req.taskId);
    if (scenario === 'compensation_not_supported') {
      const receipt = interimReceipt('not_supported', req.taskId, req.idempotencyKey,
        'orders confirmed in the supplier system cannot be reversed');
      bus.publish(artifactUpdate(taskId, contextId, receiptArtifact(receipt)));
      bus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_COMPLETED, `Compensation not supported: ${receipt.reason}.`));
      return;
    }
    if (scenario === 'compensation_pending' && !receipts.has(req.idempotencyKey)) {
      const pending = interimReceipt('pending', req.taskId, req.idempotencyKey, 'the reversal is under way');
      bus.publish(artifactUpdate(taskId, contextId, receiptArtifact(pending)));
      bus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_WORKING, 'Reversing; the receipt follows.'));
      await new Promise((resolve) => setTimeout(resolve, pendingMs));
    }
    const receipt = receiptFor(req.taskId, req.idempotencyKey);
    if (!receipt) {
      bus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_REJECTED, 'idempotencyKey already used for another task'));
      return;
    }
    bus.publish(artifactUpdate(taskId, contextId, receiptArtifact(receipt)));
    bus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_COMPLETED, `Compensation ${receipt.outcome}.`));
  }

  async cancelTask(taskId, bus) {
    const entry = this.running.get(taskId);
    if (entry?.scenario === 'not_cancelable') {
      throw new TaskNotCancelableError(`Task ${taskId} has committed effects and cannot be canceled.`);
    }
    if (this.scenarios.get(taskId) === 'purge_on_cancel') {
      // The agent stops the work and forgets the task at once; its effects
      // stand. The cancel, and every later call on the task, answer
      // TaskNotFoundError.
      this.store.purge(taskId);
      console.log(`JSPEER_PURGED ${taskId}`);
      if (entry) {
        clearTimeout(entry.timer);
        this.running.delete(taskId);
        entry.resolve();
      }
      throw new TaskNotFoundError(`Task not found: ${taskId}`);
    }
    const contextId = this.contexts.get(taskId) ?? '';
    if (atomicCancel) {
      const receipt = receiptFor(taskId, `cancel:${taskId}`);
      if (receipt) bus.publish(artifactUpdate(taskId, contextId, receiptArtifact(receipt)));
    }
    bus.publish(statusUpdate(taskId, contextId, TaskState.TASK_STATE_CANCELED, 'Canceled.'));
    if (entry) {
      clearTimeout(entry.timer);
      this.running.delete(taskId);
      entry.resolve();
    }
  }
}

// ---- server ----

const taskStore = new PurgingTaskStore();
const app = express();
const server = http.createServer(app);

server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const base = `http://127.0.0.1:${port}`;
  const extension = { uri: EXTENSION_URI, description: 'Quittance compensation receipts', required: false, params: atomicCancel ? { atomicCancel: true } : undefined };
  const card = {
    name: 'Quittance JS SDK peer',
    description: 'An @a2a-js/sdk agent that Quittance interoperates with in tests.',
    supportedInterfaces: [
      { url: base + RPC_PATH, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' },
      { url: base + RPC_PATH, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '0.3' },
    ],
    provider: { organization: orgId, url: base },
    version: '1.0.0',
    capabilities: { streaming: true, pushNotifications: true, extensions: [extension] },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ['text/plain', 'application/json'],
    defaultOutputModes: ['application/json', 'text/plain'],
    skills: [{
      id: 'procurement', name: 'Procurement', description: 'Scenario-driven test skill.',
      tags: ['test'], examples: ['work', 'complete', 'fail', 'compensation_pending'], inputModes: [], outputModes: [], securityRequirements: [],
    }],
    signatures: [],
  };
  const pushStore = new InMemoryPushNotificationStore();
  const requestHandler = new DefaultRequestHandler(
    card, taskStore, new PeerExecutor(taskStore), new DefaultExecutionEventBusManager(),
    pushStore, createLegacyAwarePushNotificationSender(pushStore, { timeout: 5000 }),
  );
  app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: requestHandler }));
  app.use(RPC_PATH, jsonRpcHandler({ requestHandler, userBuilder: UserBuilder.noAuthentication, legacyCompat: { enabled: true } }));
  process.stdout.write(`JSPEER_LISTENING ${port}\n`);
});

process.stdin.on('end', () => process.exit(0));
process.stdin.on('error', () => process.exit(0));
process.stdin.resume();
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(0));
