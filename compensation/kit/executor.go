package kit

import (
	"context"
	"errors"
	"iter"
	"sync"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
)

// Compensate reverses the effects of req.TaskID (and req.ExtraTaskIDs) and
// says what it did. It is called once per idempotency key until it returns
// a final outcome (Compensated, NoEffects, NotSupported); Wrap answers
// repeats of the key with that result, re-signed. The kit keeps results in
// memory: an agent with several replicas or restarts must make Compensate
// idempotent on req.IdempotencyKey itself. A returned error fails the
// compensation task; Quittance asks again later.
type Compensate func(ctx context.Context, req Request) (Result, error)

// Wrap returns an executor that answers every message carrying a
// compensation request with a compensation task: a submitted task, the
// signed receipt as its compensation-receipt artifact, then completed (or
// failed, for Failed; working, for Pending). Every other message and every
// cancel go to next.
func Wrap(next a2asrv.AgentExecutor, signer *Signer, compensate Compensate) a2asrv.AgentExecutor {
	return &executor{next: next, signer: signer, compensate: compensate, results: map[string]keyed{}}
}

type executor struct {
	next       a2asrv.AgentExecutor
	signer     *Signer
	compensate Compensate

	mu      sync.Mutex
	results map[string]keyed
}

// keyed is the final result given for an idempotency key, and its task.
type keyed struct {
	task   a2a.TaskID
	result Result
}

// ErrKeyReused is returned for a request whose idempotency key was used
// for another task.
var ErrKeyReused = errors.New("the idempotencyKey was used for another task")

func (e *executor) Execute(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	req, ok, err := RequestFrom(ec.Message)
	if !ok {
		return e.next.Execute(ctx, ec)
	}
	return func(yield func(a2a.Event, error) bool) {
		if err != nil {
			yield(nil, a2a.ErrInvalidParams)
			return
		}
		if ec.StoredTask == nil && !yield(a2a.NewSubmittedTask(ec, ec.Message), nil) {
			return
		}
		res, err := e.result(ctx, req)
		if err != nil {
			yield(nil, err)
			return
		}
		receipt, err := e.signer.Receipt(req, res)
		if err != nil {
			yield(nil, err)
			return
		}
		art, err := receipt.Artifact(ec)
		if err != nil {
			yield(nil, err)
			return
		}
		if !yield(art, nil) {
			return
		}
		state := a2a.TaskStateCompleted
		switch res.Outcome {
		case Failed:
			state = a2a.TaskStateFailed
		case Pending:
			state = a2a.TaskStateWorking
		}
		yield(a2a.NewStatusUpdateEvent(ec, state, nil), nil)
	}
}

// result is the result for req: the final one kept for its key, or what
// compensate says now (kept when final). Requests are answered one at a
// time, so a key asked twice at once is compensated once.
func (e *executor) result(ctx context.Context, req Request) (Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if k, done := e.results[req.IdempotencyKey]; done {
		if k.task != req.TaskID {
			return Result{}, ErrKeyReused
		}
		return k.result, nil
	}
	res, err := e.compensate(ctx, req)
	if err != nil {
		return Result{}, err
	}
	if res.ReceiptID == "" {
		res.ReceiptID = "rcpt-" + req.IdempotencyKey
	}
	if res.Outcome.final() {
		e.results[req.IdempotencyKey] = keyed{task: req.TaskID, result: res}
	}
	return res, nil
}

// Cancel cancels through next. A cancel that carries a compensation
// request (to an agent that declares atomicCancel) for the task it cancels
// is compensated first: the receipt goes on the task, before next's events,
// so the cancel's reply — or a later GetTask — carries it. When the
// compensation fails the cancel goes on without a receipt, and Quittance
// asks for compensation with a message instead.
func (e *executor) Cancel(ctx context.Context, ec *a2asrv.ExecutorContext) iter.Seq2[a2a.Event, error] {
	req, ok, err := RequestFromCancel(ec.Metadata)
	if !ok || err != nil || req.TaskID != ec.TaskID {
		return e.next.Cancel(ctx, ec)
	}
	return func(yield func(a2a.Event, error) bool) {
		if art, ok := e.receiptArtifact(ctx, ec, req); ok && !yield(art, nil) {
			return
		}
		for ev, err := range e.next.Cancel(ctx, ec) {
			if !yield(ev, err) {
				return
			}
		}
	}
}

// receiptArtifact is the artifact event of req's receipt on the task of
// ec, when its compensation is final; ok is false otherwise.
func (e *executor) receiptArtifact(ctx context.Context, ec *a2asrv.ExecutorContext, req Request) (*a2a.TaskArtifactUpdateEvent, bool) {
	res, err := e.result(ctx, req)
	if err != nil || !res.Outcome.final() {
		return nil, false
	}
	receipt, err := e.signer.Receipt(req, res)
	if err != nil {
		return nil, false
	}
	art, err := receipt.Artifact(ec)
	return art, err == nil
}
