package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/danielgtaylor/huma/v2"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger"
)

// maxBatchItems is the most items one batch carries: a finance run's
// purchase orders or a replay after an outage fit, and one request stays
// a bounded amount of work.
const maxBatchItems = 1000

// batchWorkers bounds how many items of one batch are in flight at once.
// Each item is its own call of the one write path; the store coalesces
// concurrent writes into shared commits, so a few items in flight already
// fill a commit, and more would only take database connections from other
// requests and queue on the same budget rows.
const batchWorkers = 16

// delegationsBatchMaxBytes is the body limit of a delegations batch: a
// thousand creates with sizeable dispatch messages. One item over the
// single create's own body limit is refused alone, as that call would be.
const delegationsBatchMaxBytes = 16 << 20

// evidenceBatchMaxBytes is the body limit of an evidence batch: a thousand
// tokens at the per-token limit, quoted and separated, and the envelope.
const evidenceBatchMaxBytes = maxBatchItems*(jose.MaxTokenSize+4) + 1024

const delegationsBatchDescription = `Creates many delegations in one request: each item is exactly the body of POST /v1/delegations (CreateDelegationInputBody) and is answered exactly as that call would answer it, in request order: {"status": 201, "delegation": ...} when created, {"status": 200, "delegation": ...} for an idempotent repeat, or {"status": 4xx, "problem": ...} with the problem that call would answer (422 validation_failed naming the field, 422 insufficient_funds, 422 budget_not_found, 422 idempotency_mismatch, 409 remote_task_taken, ...). Each item goes through the same service call as the single create, on its own: one refused item never changes another's answer. Items run concurrently, at most 16 at a time; items with the same business_operation_id run one after another in request order, so the first is created and a later one is the idempotent repeat (or 422 idempotency_mismatch), as across calls.

1 to 1000 items (else 422 validation_failed naming body.delegations). The request is authorized as a single create: an orchestrator token, else 401 or 403 for the whole request. Each item is validated against the single create's schema on its own (CreateDelegationInputBody), so the batch body's schema shows items of any shape. The batch body is at most 16 MiB; an item over the single create's own body limit (1 MiB) is its own 413 body_too_large. The answer is 200 whatever the items' answers; the request counts as one request for the rate limit.`

const evidenceBatchDescription = `Posts many signed evidence tokens in one request, as application/json {"tokens": ["<compact JWS>", ...]} with 1 to 1000 tokens (else 422 validation_failed naming body.tokens). Each token is handled exactly as POST /v1/compensation/acks or /v1/compensation/declarations would handle it, chosen by its JOSE typ: compensation-ack+jwt goes to the ack path, no-compensation-required+jwt to the declaration path, and any other token to the ack path, which refuses it with the same uniform 401 token_refused after the same signature verification, so the choice tells nothing. Answers come in request order, each {"status": 200, "id": ..., "evidence": {"outcome": ...}} as the single answer's body, or {"status": 4xx, "problem": ...} with the problem the single endpoint would answer: the uniform 401 token_refused for every refusal decided before the token verified and matched a delegation, per token, and the told refusals (409, 422) otherwise. A token over 16 KiB is its own 413 token_too_large. Tokens run concurrently, at most 16 at a time; tokens naming the same org and task run one after another in request order. No bearer token. The answer is 200 whatever the tokens' answers; the batch is rate limited per client address as one request (the limiter takes one token per request, not one per item). The body is at most about 16 MiB.`

// registerBatch is the route table of the batch endpoints: many creates,
// or many evidence tokens, in one request, each item answered as its
// single call would answer it. It runs after registerDelegations and
// registerCompensation, whose operations the items go through.
func (s *Server) registerBatch() {
	single := s.api.OpenAPI().Paths["/v1/delegations"].Post
	create := createSchema{schema: single.RequestBody.Content["application/json"].Schema, maxBytes: single.MaxBodyBytes}
	huma.Register(s.api, huma.Operation{
		OperationID: "create-delegations-batch", Method: http.MethodPost, Path: "/v1/delegations/batch",
		Tags: []string{"delegations"}, Summary: "Record many delegations and hold their budgets, each answered on its own",
		Description: delegationsBatchDescription, Security: bearerAuth, MaxBodyBytes: delegationsBatchMaxBytes,
	}, func(ctx context.Context, in *delegationsBatchInput) (*delegationsBatchOutput, error) {
		return s.createDelegationsBatch(ctx, in, create)
	})
	if s.compensation == nil {
		return
	}
	huma.Register(s.api, huma.Operation{
		OperationID: "post-compensation-evidence-batch", Method: http.MethodPost, Path: "/v1/compensation/evidence/batch",
		Tags: []string{"compensation evidence"}, Summary: "Post many signed acks and declarations, each answered on its own",
		Description: evidenceBatchDescription, MaxBodyBytes: evidenceBatchMaxBytes,
		Errors: []int{http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusUnprocessableEntity, http.StatusTooManyRequests},
	}, s.postEvidenceBatch)
}

type delegationsBatchInput struct {
	Body struct {
		Delegations []json.RawMessage `json:"delegations" nullable:"false" minItems:"1" maxItems:"1000" doc:"1 to 1000 bodies of POST /v1/delegations (CreateDelegationInputBody), each validated and answered on its own."`
	}
}

// DelegationsBatchResult is one item's answer in a delegations batch: the
// status the single create would have answered, with its delegation or its
// problem.
type DelegationsBatchResult struct {
	Status     int             `json:"status" doc:"The HTTP status POST /v1/delegations would have answered: 201 created, 200 an idempotent repeat, or the problem's status."`
	Delegation *DelegationBody `json:"delegation,omitempty" doc:"The delegation, as POST /v1/delegations answers it (status 200 or 201)."`
	Problem    *Problem        `json:"problem,omitempty" doc:"The problem POST /v1/delegations would have answered (status 4xx or 5xx)."`
}

type delegationsBatchOutput struct {
	Body struct {
		Results []DelegationsBatchResult `json:"results" doc:"One per item, in request order."`
	}
}

// createSchema is what the single create's operation checks before its
// handler runs: its body's schema and its body limit.
type createSchema struct {
	schema   *huma.Schema
	maxBytes int64
}

// createDelegationsBatch serves POST /v1/delegations/batch: each item
// through the single create's validation and handler (createDelegation).
func (s *Server) createDelegationsBatch(ctx context.Context, in *delegationsBatchInput, create createSchema) (*delegationsBatchOutput, error) {
	if err := ledger.Authorize(principal(ctx), ledger.ActionDelegate); err != nil {
		return nil, s.fail(ctx, err)
	}
	items := in.Body.Delegations
	results := make([]DelegationsBatchResult, len(items))
	inputs := make([]*createDelegationInput, len(items))
	keys := make([]string, len(items))
	for i, raw := range items {
		input, err := s.decodeCreateItem(raw, create)
		if err != nil {
			p := s.asProblem(ctx, err)
			results[i] = DelegationsBatchResult{Status: p.Status, Problem: p}
			keys[i] = "refused:" + strconv.Itoa(i)
			continue
		}
		inputs[i], keys[i] = input, "op:"+input.Body.BusinessOperationID
	}
	s.runBatch(ctx, keys, func(i int) {
		if inputs[i] == nil {
			return
		}
		out, err := s.createDelegation(ctx, inputs[i])
		if err != nil {
			p := s.asProblem(ctx, err)
			results[i] = DelegationsBatchResult{Status: p.Status, Problem: p}
			return
		}
		results[i] = DelegationsBatchResult{Status: out.Status, Delegation: &out.Body}
	}, func(i int, p *Problem) { results[i] = DelegationsBatchResult{Status: p.Status, Problem: p} })
	out := &delegationsBatchOutput{}
	out.Body.Results = results
	return out, nil
}

// decodeCreateItem checks one item as huma checks the single create's
// body before its handler runs (size, then schema, with the same problem)
// and decodes it into that handler's input.
func (s *Server) decodeCreateItem(raw json.RawMessage, create createSchema) (*createDelegationInput, error) {
	if create.maxBytes > 0 && int64(len(raw)) >= create.maxBytes {
		return nil, huma.NewError(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body is too large limit=%d bytes", create.maxBytes))
	}
	var parsed any
	if err := s.api.Unmarshal("application/json", raw, &parsed); err != nil {
		return nil, huma.NewError(http.StatusBadRequest, "validation failed", &huma.ErrorDetail{Location: "body", Message: err.Error(), Value: string(raw)})
	}
	res := &huma.ValidateResult{}
	pb := huma.NewPathBuffer([]byte{}, 0)
	pb.Push("body")
	huma.Validate(s.api.OpenAPI().Components.Schemas, create.schema, pb, huma.ModeWriteToServer, parsed, res)
	if len(res.Errors) > 0 {
		return nil, huma.NewError(http.StatusUnprocessableEntity, "validation failed", res.Errors...)
	}
	in := &createDelegationInput{}
	if err := s.api.Unmarshal("application/json", raw, &in.Body); err != nil {
		return nil, huma.NewError(http.StatusUnprocessableEntity, "validation failed", &huma.ErrorDetail{Location: "body", Message: err.Error(), Value: string(raw)})
	}
	return in, nil
}

type evidenceBatchInput struct {
	Body struct {
		Tokens []string `json:"tokens" nullable:"false" minItems:"1" maxItems:"1000" doc:"1 to 1000 compact JWS tokens, each as the body of POST /v1/compensation/acks or /declarations (at most 16 KiB each)."`
	}
}

// EvidenceBatchResult is one token's answer in an evidence batch: the body
// the single evidence endpoint would have answered, with its status.
type EvidenceBatchResult struct {
	Status   int                  `json:"status" doc:"The HTTP status the single evidence endpoint would have answered: 200 accepted, or the problem's status."`
	ID       string               `json:"id,omitempty" doc:"The delegation the token matched (status 200)."`
	Evidence *EvidenceOutcomeBody `json:"evidence,omitempty" doc:"What became of the accepted evidence (status 200)."`
	Problem  *Problem             `json:"problem,omitempty" doc:"The problem the single evidence endpoint would have answered (status 4xx)."`
}

type evidenceBatchOutput struct {
	Body struct {
		Results []EvidenceBatchResult `json:"results" doc:"One per token, in request order."`
	}
}

// postEvidenceBatch serves POST /v1/compensation/evidence/batch: each token
// through the single ack or declaration handler its typ names.
func (s *Server) postEvidenceBatch(ctx context.Context, in *evidenceBatchInput) (*evidenceBatchOutput, error) {
	tokens := in.Body.Tokens
	results := make([]EvidenceBatchResult, len(tokens))
	keys := make([]string, len(tokens))
	for i, token := range tokens {
		keys[i] = evidenceOrderKey(token)
	}
	s.runBatch(ctx, keys, func(i int) { results[i] = s.evidenceItem(ctx, []byte(tokens[i])) },
		func(i int, p *Problem) { results[i] = EvidenceBatchResult{Status: p.Status, Problem: p} })
	out := &evidenceBatchOutput{}
	out.Body.Results = results
	return out, nil
}

// evidenceItem is one token's answer: the single endpoint's size limit
// (evidenceGate's 413, decided from the size alone), then its handler.
func (s *Server) evidenceItem(ctx context.Context, token []byte) EvidenceBatchResult {
	if len(token) > jose.MaxTokenSize {
		p := newProblem(http.StatusRequestEntityTooLarge, compensation.CodeTokenTooLarge,
			"the token exceeds "+strconv.Itoa(jose.MaxTokenSize)+" bytes")
		return EvidenceBatchResult{Status: p.Status, Problem: p}
	}
	submit := s.postCompensationAck
	if isDeclaration(token) {
		submit = s.postCompensationDeclaration
	}
	out, err := submit(ctx, &evidenceInput{RawBody: token})
	if err != nil {
		p := s.asProblem(ctx, err)
		return EvidenceBatchResult{Status: p.Status, Problem: p}
	}
	evidence := out.Body.Evidence
	return EvidenceBatchResult{Status: http.StatusOK, ID: out.Body.ID, Evidence: &evidence}
}

// isDeclaration reports whether a token's JOSE typ names a declaration,
// matched as the verification matches typ (case-insensitively, with or
// without "application/"). Every other token goes to the ack path, whose
// verification refuses any typ but an ack's with the uniform refusal.
func isDeclaration(token []byte) bool {
	c, err := jose.ParseCompact(token)
	if err != nil {
		return false
	}
	typ, _ := c.Header("typ")
	return strings.TrimPrefix(strings.ToLower(typ), "application/") == string(compensation.KindDeclaration)
}

// evidenceOrderKey groups the tokens of a batch that name the same org and
// task, so that they apply one after another in request order; a token
// that names none is a group of its own text.
func evidenceOrderKey(token string) string {
	peek, err := compensation.PeekToken([]byte(token))
	if err != nil {
		return "token:" + token
	}
	return "task:" + strconv.Quote(peek.Issuer) + " " + strconv.Quote(peek.Subject)
}

// runBatch runs item(i) for every index of keys: the items sharing a key
// one after another in request order, the groups on at most batchWorkers
// goroutines. An item that panics is logged and answered with failed's
// internal problem, so it takes neither the replica nor its neighbours
// down.
func (s *Server) runBatch(ctx context.Context, keys []string, item func(i int), failed func(i int, p *Problem)) {
	var order []string
	groups := map[string][]int{}
	for i, k := range keys {
		if _, seen := groups[k]; !seen {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	work := make(chan []int)
	var wg sync.WaitGroup
	for range min(batchWorkers, len(order)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for group := range work {
				for _, i := range group {
					s.runItem(ctx, i, item, failed)
				}
			}
		}()
	}
	for _, k := range order {
		work <- groups[k]
	}
	close(work)
	wg.Wait()
}

// runItem runs one item, recovering a panic into an internal problem.
func (s *Server) runItem(ctx context.Context, i int, item func(i int), failed func(i int, p *Problem)) {
	defer func() {
		if r := recover(); r != nil {
			s.log.ErrorContext(ctx, "batch item panicked", slog.Int("item", i), slog.Any("panic", r))
			w := problemWording[errkind.Internal]
			failed(i, newProblem(http.StatusInternalServerError, w.code, w.detail))
		}
	}()
	item(i)
}

// asProblem is err as the problem the single call answers.
func (s *Server) asProblem(ctx context.Context, err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	errors.As(s.fail(ctx, err), &p)
	return p
}
