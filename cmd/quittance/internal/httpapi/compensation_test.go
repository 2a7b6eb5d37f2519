package httpapi_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/httpapi"
	"github.com/quittance/quittance/cmd/quittance/internal/httpapi/apitest"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/internal/jose"
	"github.com/quittance/quittance/ledger"
)

const (
	ledgerID  = "ledger-test"
	orgB      = "org-b"
	orgC      = "org-c"
	budgetID  = "ops"
	funded    = 10_000_000
	threshold = 100_000
	ackTyp    = string(compensation.KindAck)
	declTyp   = string(compensation.KindDeclaration)
	acksPath  = "/v1/compensation/acks"
	declsPath = "/v1/compensation/declarations"
)

// compEnv is the API with the compensation service on a fresh database, two
// remote orgs with registered keys, a funded budget and an orchestrator.
type compEnv struct {
	*apitest.Env
	orch string
	b    *compensationtest.Signer // org-b's registered key
	c    *compensationtest.Signer // org-c's registered key
	n    int
}

func newCompEnv(t *testing.T, opts ...apitest.Option) *compEnv {
	t.Helper()
	e := apitest.New(t, append([]apitest.Option{apitest.WithLedgerID(ledgerID), apitest.WithWriteOffThreshold(threshold)}, opts...)...)
	ce := &compEnv{
		Env: e,
		b:   compensationtest.NewEd25519Signer(t, "b-1"),
		c:   compensationtest.NewES256Signer(t, "c-1"),
	}
	ce.orch = e.NewOrchestrator(t, "acme")
	e.PutBudget(t, budgetID, "EUR", funded)
	ce.putOrg(t, orgB, ce.b.JWKS())
	ce.putOrg(t, orgC, ce.c.JWKS())
	return ce
}

func (e *compEnv) putOrg(t *testing.T, id string, jwks []byte) {
	t.Helper()
	r := e.Do(t, http.MethodPut, "/admin/v1/orgs/"+id, e.OncallToken, map[string]any{"name": "Org " + id, "jwks": json.RawMessage(jwks)})
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		t.Fatalf("%s: status %d: %s", r.Request, r.Status, r.Body)
	}
}

// delegation creates a procurement delegation with org and returns it, held.
func (e *compEnv) delegation(t *testing.T, org string, amount int64) httpapi.DelegationBody {
	t.Helper()
	e.n++
	return e.CreateDelegation(t, e.orch, apitest.NewCreateRequest(fmt.Sprintf("op-%d", e.n), org, "procurement", budgetID, amount, "EUR"))
}

// pending creates a delegation whose task was canceled: it waits for
// compensation evidence.
func (e *compEnv) pending(t *testing.T, org string, amount int64) httpapi.DelegationBody {
	t.Helper()
	d := e.delegation(t, org, amount)
	d = e.ReportStatus(t, e.orch, d.ID, "TASK_STATE_CANCELED", time.Time{})
	if d.ObligationState != string(ledger.ObligationRevocationPendingCompensation) || d.Compensation == nil || d.Compensation.IdempotencyKey == "" {
		t.Fatalf("canceled delegation is %s with compensation %+v", d.ObligationState, d.Compensation)
	}
	return d
}

func (e *compEnv) signer(org string) *compensationtest.Signer {
	if org == orgC {
		return e.c
	}
	return e.b
}

func (e *compEnv) ackClaims(d httpapi.DelegationBody) map[string]any {
	return compensationtest.AckClaims(d.OrgID, ledgerID, d.Remote.TaskID, d.Compensation.IdempotencyKey, e.Clock.Now())
}

func (e *compEnv) declClaims(d httpapi.DelegationBody) map[string]any {
	return compensationtest.DeclarationClaims(d.OrgID, ledgerID, d.Remote.TaskID, e.Clock.Now())
}

// ack returns a valid ack for d signed by its org.
func (e *compEnv) ack(t *testing.T, d httpapi.DelegationBody) string {
	t.Helper()
	return e.signer(d.OrgID).Sign(t, ackTyp, e.ackClaims(d))
}

// declaration returns a valid declaration for d signed by its org.
func (e *compEnv) declaration(t *testing.T, d httpapi.DelegationBody) string {
	t.Helper()
	return e.signer(d.OrgID).Sign(t, declTyp, e.declClaims(d))
}

// post sends a token to an evidence endpoint as application/jose, without a
// bearer token.
func (e *compEnv) post(t *testing.T, path, token string) *apitest.Response {
	t.Helper()
	return e.postAs(t, path, "application/jose", []byte(token))
}

func (e *compEnv) postAs(t *testing.T, path, contentType string, body []byte) *apitest.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.URL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	return e.Send(t, req)
}

// evidenceResponse is an accepted token's answer (the delegation's id and
// the outcome) with the delegation as on-call then reads it.
type evidenceResponse struct {
	httpapi.DelegationBody
	Evidence struct {
		Outcome string `json:"outcome"`
	} `json:"evidence"`
}

// signerAnswer checks that an accepted token's answer tells the signer the
// delegation's id and the outcome, and nothing else of the delegation.
func signerAnswer(t *testing.T, r *apitest.Response) (id, outcome string) {
	t.Helper()
	var body map[string]json.RawMessage
	r.JSON(t, &body)
	var evidence map[string]json.RawMessage
	if err := json.Unmarshal(body["evidence"], &evidence); err != nil || len(body) != 2 || body["id"] == nil || len(evidence) != 1 {
		t.Fatalf("%s: the answer to the signer is %s; want only id and evidence.outcome", r.Request, r.Body)
	}
	if err := json.Unmarshal(body["id"], &id); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(evidence["outcome"], &outcome); err != nil {
		t.Fatal(err)
	}
	return id, outcome
}

// accept posts a token, expects 200 and the outcome, and returns the answer
// with the delegation as on-call reads it afterwards.
func (e *compEnv) accept(t *testing.T, path, token, outcome string) evidenceResponse {
	t.Helper()
	id := e.acceptAnswer(t, path, token, outcome)
	out := evidenceResponse{DelegationBody: e.Delegation(t, e.OncallToken, id)}
	out.Evidence.Outcome = outcome
	return out
}

// acceptAnswer posts a token, expects 200, the outcome and the signer's
// answer shape, and returns the delegation id the answer names.
func (e *compEnv) acceptAnswer(t *testing.T, path, token, outcome string) string {
	t.Helper()
	r := e.post(t, path, token).Expect(t, http.StatusOK)
	id, got := signerAnswer(t, r)
	if got != outcome || r.Header.Get(httpapi.EvidenceOutcomeHeader) != outcome {
		t.Fatalf("%s: outcome %q (header %q), want %q; body %s", r.Request, got, r.Header.Get(httpapi.EvidenceOutcomeHeader), outcome, r.Body)
	}
	return id
}

// state is everything a refused token must leave alone, for one delegation.
type state struct {
	Obligation string
	Version    int64
	Budget     httpapi.BudgetBody
	Events     int
	UsedTokens int
	WriteOffs  int
	Entries    int
}

func (e *compEnv) state(t *testing.T, id string) state {
	t.Helper()
	d := e.Delegation(t, e.OncallToken, id)
	s := state{Obligation: d.ObligationState, Version: d.Version, Budget: e.Budget(t, budgetID), Events: len(e.Events(t, e.OncallToken, id))}
	ctx := context.Background()
	for q, dst := range map[string]*int{
		"SELECT count(*) FROM used_token_ids": &s.UsedTokens,
		"SELECT count(*) FROM write_offs":     &s.WriteOffs,
		"SELECT count(*) FROM budget_entries": &s.Entries,
	} {
		if err := e.Pool.QueryRow(ctx, q).Scan(dst); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return s
}

func (e *compEnv) lastEvent(t *testing.T, id string) ledger.EventRecord {
	t.Helper()
	events := e.Events(t, e.OncallToken, id)
	return events[len(events)-1]
}

func eventData(t *testing.T, ev ledger.EventRecord) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(ev.Data, &m); err != nil {
		t.Fatalf("event data %s: %v", ev.Data, err)
	}
	return m
}

func sha(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func with(claims map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range claims {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

// refusalCounts is the refused-token counts /v1/anomalies lists, by
// (org, reason); org "" is a token that named no registered org.
func (e *compEnv) refusalCounts(t *testing.T) map[[2]string]int64 {
	t.Helper()
	var out struct {
		RefusedTokens []httpapi.RefusedTokensBody `json:"refused_tokens"`
	}
	e.Do(t, http.MethodGet, "/v1/anomalies?kind=refused_token", e.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &out)
	m := map[[2]string]int64{}
	for _, r := range out.RefusedTokens {
		m[[2]string{r.OrgID, r.Reason}] = r.Refused
	}
	return m
}

// refusedUniformly checks that r is the one answer every refusal not
// told to the signer gets, and returns its body.
func refusedUniformly(t *testing.T, r *apitest.Response) string {
	t.Helper()
	p := r.Problem(t, http.StatusUnauthorized, compensation.CodeTokenRefused)
	if p.Type != "about:blank" {
		t.Errorf("problem type %q", p.Type)
	}
	return string(r.Body)
}

// TestEvidenceRefusals is the refusal catalogue over HTTP. Every token
// refused before it verified and matched a delegation — whatever the
// reason, whether the org, task or delegation exists — gets the same 401
// token_refused with the same body; only a verified token is told its
// reason. Nothing changes — state, budget, journal, used token ids,
// write-offs, and no event on any chain — and the refusal is counted for
// its (org, reason), org "" when the token named no registered org.
func TestEvidenceRefusals(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	d := e.pending(t, orgB, 5_000)
	dc := e.pending(t, orgC, 5_000)
	now := e.Clock.Now()
	other := compensationtest.NewEd25519Signer(t, "b-1") // not registered, reuses org-b's kid
	edPub := []byte(e.b.PublicJWK().Key.(ed25519.PublicKey))
	ack := e.ackClaims(d)
	hdr := compensationtest.WithHeader

	type tc struct {
		name   string
		path   string
		ct     string // default application/jose
		token  string
		org    string // the org the refusal is counted for; "" none
		reason string // the server-side reason; "": not counted (refused before Submit)
		status int    // 0: the uniform 401 token_refused
		code   string // with status: the told code
	}
	tests := []tc{
		{name: "alg none", token: compensationtest.NoneToken(ack, hdr("typ", ackTyp), hdr("kid", "b-1")), org: orgB, reason: compensation.CodeTokenAlgorithmRefused},
		{name: "alg HS256 keyed with the public key", token: compensationtest.HS256Token(edPub, ack, hdr("typ", ackTyp), hdr("kid", "b-1")), org: orgB, reason: compensation.CodeTokenAlgorithmRefused},
		{name: "embedded jwk header", token: other.Sign(t, ackTyp, ack, hdr("jwk", other.PublicJWK())), org: orgB, reason: compensation.CodeTokenHeaderRefused},
		{name: "jku header", token: e.b.Sign(t, ackTyp, ack, hdr("jku", "https://evil.example/jwks")), org: orgB, reason: compensation.CodeTokenHeaderRefused},
		{name: "x5u header", token: e.b.Sign(t, ackTyp, ack, hdr("x5u", "https://evil.example/cert")), org: orgB, reason: compensation.CodeTokenHeaderRefused},
		{name: "x5c header", token: e.b.Sign(t, ackTyp, ack, hdr("x5c", []string{"MIIB"})), org: orgB, reason: compensation.CodeTokenHeaderRefused},
		{name: "crit header", token: e.b.Sign(t, ackTyp, ack, hdr("crit", []string{"exp"})), org: orgB, reason: compensation.CodeTokenHeaderRefused},
		{name: "b64 header", token: e.b.Sign(t, ackTyp, ack, hdr("b64", false)), org: orgB, reason: compensation.CodeTokenHeaderRefused},
		{name: "forged key with a registered kid", token: other.Sign(t, ackTyp, ack), org: orgB, reason: compensation.CodeTokenSignatureInvalid},
		{name: "key of another org", token: e.b.Sign(t, ackTyp, e.ackClaims(dc)), org: orgC, reason: compensation.CodeTokenKeyUnknown},
		{name: "unknown kid", token: e.b.Sign(t, ackTyp, ack, hdr("kid", "nope")), org: orgB, reason: compensation.CodeTokenKeyUnknown},
		{name: "tampered signature", token: flipLast(e.b.Sign(t, ackTyp, ack)), org: orgB, reason: compensation.CodeTokenSignatureInvalid},
		{name: "unregistered iss", token: e.b.Sign(t, ackTyp, with(ack, "iss", "org-x")), reason: compensation.CodeTokenOrgUnknown},
		{name: "iss with a NUL", token: e.b.Sign(t, ackTyp, with(ack, "iss", "org-b\x00")), reason: compensation.CodeTokenOrgUnknown},
		{name: "long iss split mid-rune", token: e.b.Sign(t, ackTyp, with(ack, "iss", "x"+strings.Repeat("é", 200))), reason: compensation.CodeTokenOrgUnknown},
		{name: "sub with a NUL, validly signed", token: e.b.Sign(t, ackTyp, with(ack, "sub", "task\x00")), org: orgB, reason: compensation.CodeTokenDelegationUnknown},
		{name: "unknown sub, validly signed", token: e.b.Sign(t, ackTyp, with(ack, "sub", "task-nope")), org: orgB, reason: compensation.CodeTokenDelegationUnknown},
		{name: "wrong aud", token: e.b.Sign(t, ackTyp, with(ack, "aud", "another-ledger")), org: orgB, reason: compensation.CodeTokenAudienceMismatch},
		{name: "expired", token: e.b.Sign(t, ackTyp, with(ack, "iat", now.Add(-20*time.Minute).Unix(), "exp", now.Add(-15*time.Minute).Unix())), org: orgB, reason: compensation.CodeTokenExpired},
		{name: "not yet valid", token: e.b.Sign(t, ackTyp, with(ack, "iat", now.Add(10*time.Minute).Unix(), "exp", now.Add(15*time.Minute).Unix())), org: orgB, reason: compensation.CodeTokenNotYetValid},
		{name: "missing exp", token: e.b.Sign(t, ackTyp, with(ack, "exp", nil)), org: orgB, reason: compensation.CodeTokenClaimsMissing},
		{name: "missing iat", token: e.b.Sign(t, ackTyp, with(ack, "iat", nil)), org: orgB, reason: compensation.CodeTokenClaimsMissing},
		{name: "missing jti", token: e.b.Sign(t, ackTyp, with(ack, "jti", nil)), org: orgB, reason: compensation.CodeTokenClaimsMissing},
		{name: "missing receipt_id", token: e.b.Sign(t, ackTyp, with(ack, "receipt_id", nil)), org: orgB, reason: compensation.CodeTokenClaimsMissing},
		{name: "missing sub", token: e.b.Sign(t, ackTyp, with(ack, "sub", nil)), reason: compensation.CodeTokenClaimsMissing},
		{name: "lifetime over ten minutes", token: e.b.Sign(t, ackTyp, with(ack, "exp", now.Add(11*time.Minute).Unix())), org: orgB, reason: compensation.CodeTokenLifetimeTooLong},
		{name: "missing typ", token: e.b.Sign(t, "", ack), org: orgB, reason: compensation.CodeTokenTypeMismatch},
		{name: "declaration at the acks endpoint", token: e.declaration(t, d), org: orgB, reason: compensation.CodeTokenTypeMismatch},
		{name: "ack at the declarations endpoint", path: declsPath, token: e.ack(t, d), org: orgB, reason: compensation.CodeTokenTypeMismatch},
		{name: "malformed", token: "this is not a token", reason: compensation.CodeTokenMalformed},
		{name: "JWS JSON serialization", token: `{"payload":"e30","protected":"e30","signature":""}`, reason: compensation.CodeTokenMalformed},
		// Verified and matched: the org that signed it is told about its own task.
		{name: "wrong idempotency key", token: e.b.Sign(t, ackTyp, with(ack, "idempotency_key", "qc_0000")), org: orgB, reason: compensation.CodeTokenIdempotencyKeyMismatch,
			status: 422, code: compensation.CodeTokenIdempotencyKeyMismatch},
		{name: "amount over the hold", token: e.b.Sign(t, ackTyp, with(ack, "reversed_amount_minor", 5_001)), org: orgB, reason: compensation.CodeTokenAmountInvalid,
			status: 422, code: compensation.CodeTokenAmountInvalid},
		// Decided from the request alone, before the token is read.
		{name: "oversized", token: e.b.Sign(t, ackTyp, with(ack, "pad", strings.Repeat("x", jose.MaxTokenSize))), status: 413, code: compensation.CodeTokenTooLarge},
		{name: "content type json", ct: "application/json", token: e.ack(t, d), status: 415, code: "unsupported_media_type"},
		{name: "no content type", ct: "-", token: e.ack(t, d), status: 415, code: "unsupported_media_type"},
	}
	var uniform string // the body of the first uniform refusal; every other must equal it
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.path
			if path == "" {
				path = acksPath
			}
			watched := []string{d.ID, dc.ID}
			before := map[string]state{}
			for _, id := range watched {
				before[id] = e.state(t, id)
			}
			counts := e.refusalCounts(t)
			var r *apitest.Response
			switch tt.ct {
			case "":
				r = e.post(t, path, tt.token)
			case "-":
				req, _ := http.NewRequest(http.MethodPost, e.URL+path, strings.NewReader(tt.token))
				r = e.Send(t, req)
			default:
				r = e.postAs(t, path, tt.ct, []byte(tt.token))
			}
			if tt.status == 0 {
				body := refusedUniformly(t, r)
				if uniform == "" {
					uniform = body
				} else if body != uniform {
					t.Errorf("refusal body %s, want the same as every other refusal: %s", body, uniform)
				}
			} else {
				r.Problem(t, tt.status, tt.code)
			}
			if len(tt.token) > 20 && strings.Contains(string(r.Body), tt.token) {
				t.Errorf("the problem echoes the token: %s", r.Body)
			}
			for _, id := range watched {
				if after := e.state(t, id); after != before[id] {
					t.Errorf("delegation %s: state after %+v, want %+v", id, after, before[id])
				}
			}
			want := counts
			if tt.reason != "" {
				want[[2]string{tt.org, tt.reason}]++
			}
			if got := e.refusalCounts(t); !maps.Equal(got, want) {
				t.Errorf("refusal counts %v, want %v", got, want)
			}
		})
	}
	e.CheckInvariants(t)
}

func flipLast(token string) string {
	b := []byte(token)
	i := len(b) - 5
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}

// TestAckCompensates: a valid ack moves the obligation to compensated and
// returns the hold, with the token stored verbatim as evidence and the
// receipt on the delegation; the same ack again is answered with the same
// result and moves nothing; another valid ack afterwards is late evidence.
func TestAckCompensates(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	d := e.pending(t, orgB, 7_500)
	budgetBefore := e.Budget(t, budgetID)
	token := e.ack(t, d)

	got := e.accept(t, acksPath, token, "applied")
	if got.ObligationState != "compensated" || got.HoldState != "returned" || got.ObligationReason != ledger.ReasonCompensationAcked {
		t.Fatalf("after ack: %s/%s (%s), want compensated/returned", got.ObligationState, got.HoldState, got.ObligationReason)
	}
	receipt, _ := json.Marshal(got.Compensation.Receipt)
	var rc compensation.Receipt
	if err := json.Unmarshal(receipt, &rc); err != nil || rc.Kind != ackTyp || rc.ReceiptID == "" || rc.JTI == "" || rc.TokenSHA256 != sha(token) {
		t.Fatalf("receipt %s (%v), want the ack's kind, receipt_id, jti and sha256", receipt, err)
	}
	b := e.Budget(t, budgetID)
	if b.HeldMinor != budgetBefore.HeldMinor-7_500 || b.AvailableMinor != budgetBefore.AvailableMinor+7_500 {
		t.Fatalf("budget after ack %+v, before %+v: the hold must return to available", b, budgetBefore)
	}
	ev := e.lastEvent(t, d.ID)
	if ev.Type != ledger.EventTypeCompensationAcked || ev.Evidence != token || ev.ObligationTo != "compensated" || ev.Actor != "org:"+orgB {
		t.Fatalf("last event %s -> %s by %s, evidence stored verbatim: %v", ev.Type, ev.ObligationTo, ev.Actor, ev.Evidence == token)
	}

	// The same token again: the same result, nothing moves.
	before := e.state(t, d.ID)
	again := e.accept(t, acksPath, token, "duplicate")
	if again.ObligationState != "compensated" || again.Version != got.Version {
		t.Fatalf("repeat: %s v%d, want compensated v%d", again.ObligationState, again.Version, got.Version)
	}
	if after := e.state(t, d.ID); after != before {
		t.Fatalf("a repeated ack changed something: %+v -> %+v", before, after)
	}

	// Another ack with a new jti, the same idempotency key and the same
	// receipt: the original result, nothing moves (its jti is used up).
	claims := e.ackClaims(d)
	claims["receipt_id"] = rc.ReceiptID
	same := e.accept(t, acksPath, e.b.Sign(t, ackTyp, claims), "duplicate")
	if same.ObligationState != "compensated" || same.Version != got.Version {
		t.Fatalf("same receipt, new jti: %s v%d, want compensated v%d", same.ObligationState, same.Version, got.Version)
	}
	before.UsedTokens++
	if after := e.state(t, d.ID); after != before {
		t.Fatalf("the same receipt under a new jti changed more than its jti: %+v -> %+v", before, after)
	}
	if b2 := e.Budget(t, budgetID); b2 != b {
		t.Fatalf("the same receipt again moved money: %+v -> %+v", b, b2)
	}
	e.CheckInvariants(t)
}

// TestEvidenceAnswerIsTheIDAndOutcome: the org that signs evidence learns
// which delegation it matched and what became of it, never the delegator's
// own data (tenant, budget, hold, internal errors), whatever the outcome.
func TestEvidenceAnswerIsTheIDAndOutcome(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	d := e.pending(t, orgB, 4_200)
	token := e.ack(t, d)
	for _, outcome := range []string{"applied", "duplicate"} {
		r := e.post(t, acksPath, token).Expect(t, http.StatusOK)
		id, got := signerAnswer(t, r)
		if id != d.ID || got != outcome {
			t.Fatalf("answer %s, want id %s and outcome %s", r.Body, d.ID, outcome)
		}
		for _, secret := range []string{"acme", budgetID, "last_error", "hold", "4200", "tenant"} {
			if strings.Contains(string(r.Body), secret) {
				t.Fatalf("the answer to the signer tells %q: %s", secret, r.Body)
			}
		}
	}
	held := e.delegation(t, orgC, 1_000)
	r := e.post(t, declsPath, e.declaration(t, held)).Expect(t, http.StatusOK)
	if id, got := signerAnswer(t, r); id != held.ID || got != "received" {
		t.Fatalf("early declaration: %s, want id %s and outcome received", r.Body, held.ID)
	}
}

// TestAckConflictOnIdempotencyKey: a second ack with a new jti, the same
// idempotency key and another receipt is refused with 422
// evidence_conflict and recorded as an evidence_conflict event holding the
// verified token (listed as an anomaly); nothing else changes, and the
// first ack again is still the original result.
func TestAckConflictOnIdempotencyKey(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	d := e.pending(t, orgB, 4_200)
	first := e.ack(t, d)
	got := e.accept(t, acksPath, first, "applied")
	before := e.state(t, d.ID)

	other := e.ack(t, d) // a new jti and a new receipt_id, the same key
	e.post(t, acksPath, other).Problem(t, http.StatusUnprocessableEntity, compensation.CodeEvidenceConflict)
	ev := e.lastEvent(t, d.ID)
	if ev.Type != ledger.EventTypeEvidenceConflict || ev.Evidence != other || ev.ObligationTo != "" {
		t.Fatalf("last event %s -> %q (evidence verbatim %v), want evidence_conflict with the token and no transition", ev.Type, ev.ObligationTo, ev.Evidence == other)
	}
	if data := eventData(t, ev); data["code"] != compensation.CodeEvidenceConflict || data["token_sha256"] != sha(other) {
		t.Fatalf("evidence_conflict data %s", ev.Data)
	}
	before.Events++
	if after := e.state(t, d.ID); after != before {
		t.Fatalf("a conflicting ack changed more than one event: %+v -> %+v", before, after)
	}
	var anomalies struct {
		Anomalies []struct {
			Kind         string `json:"kind"`
			DelegationID string `json:"delegation_id"`
		} `json:"anomalies"`
	}
	e.Do(t, http.MethodGet, "/v1/anomalies?kind=evidence_conflict", e.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &anomalies)
	if len(anomalies.Anomalies) != 1 || anomalies.Anomalies[0].DelegationID != d.ID {
		t.Fatalf("anomalies %+v, want the one evidence_conflict", anomalies.Anomalies)
	}
	// A declaration for the same key after the ack is a conflict too.
	e.post(t, declsPath, e.declaration(t, d)).Problem(t, http.StatusUnprocessableEntity, compensation.CodeEvidenceConflict)

	again := e.accept(t, acksPath, first, "duplicate")
	if again.ObligationState != "compensated" || again.Version != got.Version {
		t.Fatalf("the first ack again: %s v%d, want compensated v%d", again.ObligationState, again.Version, got.Version)
	}
	if err := ledger.VerifyChain(apitest.LedgerEvents(t, e.Events(t, e.OncallToken, d.ID))); err != nil {
		t.Fatal(err)
	}
	e.CheckInvariants(t)
}

// TestLateAckAfterSettlement: an ack for an obligation that ended without
// evidence (settled) is recorded as late_evidence and never applied.
func TestLateAckAfterSettlement(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	d := e.delegation(t, orgB, 1_500)
	e.ReportStatus(t, e.orch, d.ID, "TASK_STATE_COMPLETED", time.Time{})
	b := e.Budget(t, budgetID)
	late := e.ack(t, d)
	out := e.accept(t, acksPath, late, "late_evidence")
	if out.ObligationState != "settled" {
		t.Fatalf("late ack: %s", out.ObligationState)
	}
	ev := e.lastEvent(t, d.ID)
	if ev.Type != ledger.EventTypeLateEvidence || ev.Evidence != late || ev.ObligationTo != "" {
		t.Fatalf("last event %s -> %q, want late_evidence with the token and no transition", ev.Type, ev.ObligationTo)
	}
	if b2 := e.Budget(t, budgetID); b2 != b {
		t.Fatalf("late ack moved money: %+v -> %+v", b, b2)
	}
	if err := ledger.VerifyChain(apitest.LedgerEvents(t, e.Events(t, e.OncallToken, d.ID))); err != nil {
		t.Fatal(err)
	}
	e.CheckInvariants(t)
}

// TestDeclarationReleases: a verified declaration releases the hold with
// reason no_compensation_declared.
func TestDeclarationReleases(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	d := e.pending(t, orgC, 3_000)
	token := e.declaration(t, d)
	got := e.accept(t, declsPath, token, "applied")
	if got.ObligationState != "released" || got.ObligationReason != ledger.ReasonNoCompensationDeclared || got.HoldState != "returned" {
		t.Fatalf("after declaration: %s (%s) hold %s", got.ObligationState, got.ObligationReason, got.HoldState)
	}
	ev := e.lastEvent(t, d.ID)
	if ev.Type != ledger.EventTypeNoCompensationDeclared || ev.Evidence != token {
		t.Fatalf("last event %s, evidence verbatim %v", ev.Type, ev.Evidence == token)
	}
	e.CheckInvariants(t)
}

// TestKeyRotation: evidence is verified against the org's JWK Set as
// registered now. After the org rotates its key, a token signed with the
// retired key is refused (the ledger verified with that key before, so a
// remembered parse of the old set must not serve) and the new key's token
// is applied.
func TestKeyRotation(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	d1 := e.pending(t, orgB, 1_000)
	d2 := e.pending(t, orgB, 1_000)
	e.accept(t, acksPath, e.ack(t, d1), "applied")

	rotated := compensationtest.NewEd25519Signer(t, "b-2")
	e.putOrg(t, orgB, rotated.JWKS())
	refusedUniformly(t, e.post(t, acksPath, e.b.Sign(t, ackTyp, e.ackClaims(d2))))
	if n := e.refusalCounts(t)[[2]string{orgB, compensation.CodeTokenKeyUnknown}]; n != 1 {
		t.Fatalf("token_key_unknown refusals of %s: %d, want 1", orgB, n)
	}
	e.accept(t, acksPath, rotated.Sign(t, ackTyp, e.ackClaims(d2)), "applied")
	e.CheckInvariants(t)
}

// TestReplayedJTIRefused: a jti the org already used is refused with
// token_replayed — told, since the token verified and the caller is the
// org that used it — even in a different, validly signed token for
// another delegation, and nothing changes there: no event either.
func TestReplayedJTIRefused(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	d1 := e.pending(t, orgB, 1_000)
	d2 := e.pending(t, orgB, 1_000)
	first := e.ackClaims(d1)
	e.accept(t, acksPath, e.b.Sign(t, ackTyp, first), "applied")

	before := e.state(t, d2.ID)
	replay := e.b.Sign(t, declTyp, with(e.declClaims(d2), "jti", first["jti"]))
	e.post(t, declsPath, replay).Problem(t, http.StatusConflict, compensation.CodeTokenReplayed)
	after := e.state(t, d2.ID)
	if after != before {
		t.Fatalf("a replayed jti changed something: %+v -> %+v", before, after)
	}
	// Same delegation, same jti, different token: also a replay, not a duplicate.
	e.post(t, acksPath, e.b.Sign(t, ackTyp, with(first, "receipt_id", "rcpt-other"))).Problem(t, http.StatusConflict, compensation.CodeTokenReplayed)
	e.CheckInvariants(t)
}

// TestEarlyEvidence: an ack or declaration that arrives while the
// obligation is still held (before the canceled or failed status is
// observed) is verified, kept as received and applied when the gating
// status arrives: held goes straight to compensated or released, with the
// budget conserved. If the task completes instead, the early evidence is
// listed as an unused_early_evidence anomaly and the hold is spent.
func TestEarlyEvidence(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	conserved := func(t *testing.T) {
		t.Helper()
		b := e.Budget(t, budgetID)
		if b.AvailableMinor+b.HeldMinor+b.SpentMinor+b.WrittenOffMinor != b.FundedMinor {
			t.Fatalf("budget %+v: available + held + spent + written_off != funded", b)
		}
	}
	early := func(t *testing.T, path string, d httpapi.DelegationBody, token string) {
		t.Helper()
		before := e.state(t, d.ID)
		out := e.accept(t, path, token, "received")
		if out.ObligationState != "held" || out.HoldState != "active" {
			t.Fatalf("early evidence: %s/%s, want held/active", out.ObligationState, out.HoldState)
		}
		if ev := e.lastEvent(t, d.ID); ev.Type != ledger.EventTypeEvidenceReceived || ev.Evidence != token || ev.ObligationTo != "" {
			t.Fatalf("last event %s -> %q, want evidence_received with the token and no transition", ev.Type, ev.ObligationTo)
		}
		before.Events++
		before.UsedTokens++
		if after := e.state(t, d.ID); after != before {
			t.Fatalf("early evidence changed more than an event and its jti: %+v -> %+v", before, after)
		}
		// The same token again is the original result.
		e.accept(t, path, token, "duplicate")
		conserved(t)
	}

	t.Run("ack then canceled compensates", func(t *testing.T) {
		d := e.delegation(t, orgB, 6_000)
		if d.Compensation == nil || d.Compensation.IdempotencyKey == "" {
			t.Fatalf("a new delegation shows no compensation idempotency key: %+v", d.Compensation)
		}
		e.ReportStatus(t, e.orch, d.ID, "TASK_STATE_WORKING", time.Time{})
		token := e.ack(t, d)
		early(t, acksPath, d, token)
		b := e.Budget(t, budgetID)
		got := e.ReportStatus(t, e.orch, d.ID, "TASK_STATE_CANCELED", time.Time{})
		if got.ObligationState != "compensated" || got.HoldState != "returned" || got.ObligationReason != ledger.ReasonCompensationAcked || got.Compensation.Receipt == nil {
			t.Fatalf("after canceled: %s/%s (%s) receipt %v, want compensated/returned", got.ObligationState, got.HoldState, got.ObligationReason, got.Compensation.Receipt)
		}
		ev := e.lastEvent(t, d.ID)
		if ev.Type != ledger.EventTypeTaskStatusChanged || ev.ObligationFrom != "held" || ev.ObligationTo != "compensated" || ev.Evidence != token {
			t.Fatalf("last event %s %s -> %s (evidence %v), want the canceled status moving held to compensated with the ack", ev.Type, ev.ObligationFrom, ev.ObligationTo, ev.Evidence == token)
		}
		if after := e.Budget(t, budgetID); after.HeldMinor != b.HeldMinor-6_000 || after.AvailableMinor != b.AvailableMinor+6_000 {
			t.Fatalf("budget %+v -> %+v: the hold must return", b, after)
		}
		conserved(t)
		// Evidence again after it was applied: the original result.
		e.accept(t, acksPath, token, "duplicate")
		if err := ledger.VerifyChain(apitest.LedgerEvents(t, e.Events(t, e.OncallToken, d.ID))); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("declaration then failed releases", func(t *testing.T) {
		d := e.delegation(t, orgC, 2_000)
		early(t, declsPath, d, e.declaration(t, d))
		got := e.ReportStatus(t, e.orch, d.ID, "TASK_STATE_FAILED", time.Time{})
		if got.ObligationState != "released" || got.HoldState != "returned" || got.ObligationReason != ledger.ReasonNoCompensationDeclared {
			t.Fatalf("after failed: %s/%s (%s), want released/returned", got.ObligationState, got.HoldState, got.ObligationReason)
		}
		conserved(t)
	})

	t.Run("ack then completed settles and is an anomaly", func(t *testing.T) {
		d := e.delegation(t, orgB, 3_000)
		early(t, acksPath, d, e.ack(t, d))
		got := e.ReportStatus(t, e.orch, d.ID, "TASK_STATE_COMPLETED", time.Time{})
		if got.ObligationState != "settled" || got.HoldState != "consumed" {
			t.Fatalf("after completed: %s/%s, want settled/consumed", got.ObligationState, got.HoldState)
		}
		if ev := e.lastEvent(t, d.ID); ev.Type != ledger.EventTypeEarlyEvidenceUnused {
			t.Fatalf("last event %s, want early_evidence_unused", ev.Type)
		}
		var anomalies struct {
			Anomalies []struct {
				Kind         string `json:"kind"`
				DelegationID string `json:"delegation_id"`
			} `json:"anomalies"`
		}
		e.Do(t, http.MethodGet, "/v1/anomalies?kind=unused_early_evidence", e.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &anomalies)
		if len(anomalies.Anomalies) != 1 || anomalies.Anomalies[0].DelegationID != d.ID {
			t.Fatalf("anomalies %+v, want this delegation's unused early evidence", anomalies.Anomalies)
		}
		conserved(t)
	})

	t.Run("a second early ack with another receipt conflicts", func(t *testing.T) {
		d := e.delegation(t, orgB, 1_000)
		early(t, acksPath, d, e.ack(t, d))
		e.post(t, acksPath, e.ack(t, d)).Problem(t, http.StatusUnprocessableEntity, compensation.CodeEvidenceConflict)
		if got := e.ReportStatus(t, e.orch, d.ID, "TASK_STATE_CANCELED", time.Time{}); got.ObligationState != "compensated" {
			t.Fatalf("after canceled: %s, want compensated by the first ack", got.ObligationState)
		}
	})
	e.CheckInvariants(t)
}

func (e *compEnv) sweep(t *testing.T) int {
	t.Helper()
	var out httpapi.SweepBody
	e.Do(t, http.MethodPost, "/admin/v1/compensation/sweep", e.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &out)
	return out.Moved
}

// TestSweepAndRestart: the sweep moves an obligation past its deadline to
// compensation_unconfirmed with the hold intact, only once; after a restart
// (a new service instance on the same database) a late ack still
// compensates it.
func TestSweepAndRestart(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	d := e.pending(t, orgB, 4_000)
	other := e.pending(t, orgC, 4_000)
	finance := e.NewToken(t, ledger.RoleFinance, "", "finance")
	e.Do(t, http.MethodPost, "/admin/v1/compensation/sweep", finance, nil).Problem(t, http.StatusForbidden, "forbidden")

	if n := e.sweep(t); n != 0 {
		t.Fatalf("sweep before the deadline moved %d", n)
	}
	held := e.Budget(t, budgetID).HeldMinor
	e.Clock.Advance(ledger.DefaultCompensationTimeout + time.Minute)
	if n := e.sweep(t); n != 2 {
		t.Fatalf("sweep after the deadline moved %d, want 2", n)
	}
	if n := e.sweep(t); n != 0 {
		t.Fatalf("second sweep moved %d, want 0", n)
	}
	got := e.Delegation(t, e.OncallToken, d.ID)
	if got.ObligationState != "compensation_unconfirmed" || got.HoldState != "active" {
		t.Fatalf("after the deadline: %s/%s", got.ObligationState, got.HoldState)
	}
	if b := e.Budget(t, budgetID); b.HeldMinor != held {
		t.Fatalf("the sweep moved money: held %d -> %d", held, b.HeldMinor)
	}
	// The sweep was asked for by on-call: its events name that principal.
	asked := e.Actor(t, e.OncallToken)
	if ev := e.lastEvent(t, d.ID); ev.Type != ledger.EventTypeDeadlinePassed || ev.ObligationTo != "compensation_unconfirmed" || ev.Actor != asked {
		t.Fatalf("last event %s -> %s by %s, want by %s, who asked for the sweep", ev.Type, ev.ObligationTo, ev.Actor, asked)
	}

	// Restart: the old instance goes away, a new one serves the same database.
	e.Server.Close()
	e.Clock.Advance(30 * 24 * time.Hour)
	env := apitest.Start(t, e.Pool, apitest.WithClock(e.Clock), apitest.WithOncallToken(e.OncallToken),
		apitest.WithLedgerID(ledgerID), apitest.WithWriteOffThreshold(threshold))
	restarted := &compEnv{Env: env, orch: e.orch, b: e.b, c: e.c, n: e.n}
	if n := restarted.sweep(t); n != 0 {
		t.Fatalf("sweep after restart moved %d", n)
	}
	out := restarted.accept(t, acksPath, restarted.ack(t, got), "applied")
	if out.ObligationState != "compensated" || out.HoldState != "returned" {
		t.Fatalf("late ack after restart: %s/%s", out.ObligationState, out.HoldState)
	}
	out = restarted.accept(t, declsPath, restarted.declaration(t, other), "applied")
	if out.ObligationState != "released" {
		t.Fatalf("late declaration after restart: %s", out.ObligationState)
	}
	restarted.CheckInvariants(t)
}

type revokeResponse struct {
	Org       httpapi.OrgBody `json:"org"`
	Escalated int             `json:"escalated"`
}

// TestRevokeIdentityEscalates: revoking an org's identity escalates every
// open obligation of that org (held, pending, unconfirmed), leaves its
// finished ones and every other org's alone, and its tokens are refused
// from then on.
func TestRevokeIdentityEscalates(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	held := e.delegation(t, orgB, 1_000)
	unconfirmed := e.pending(t, orgB, 2_000)
	e.Clock.Advance(ledger.DefaultCompensationTimeout + time.Second)
	e.sweep(t)
	pending := e.pending(t, orgB, 3_000)
	done := e.pending(t, orgB, 4_000)
	e.accept(t, acksPath, e.ack(t, done), "applied")
	otherOrg := e.pending(t, orgC, 5_000)
	budget := e.Budget(t, budgetID)

	path := "/admin/v1/orgs/" + orgB + "/revoke-identity"
	e.Do(t, http.MethodPost, path, e.OncallToken, map[string]any{"reason": ""}).Problem(t, http.StatusUnprocessableEntity, "")
	e.Do(t, http.MethodPost, path, e.NewToken(t, ledger.RoleFinance, "", "fin"), map[string]any{"reason": "x"}).Problem(t, http.StatusForbidden, "forbidden")
	e.Do(t, http.MethodPost, "/admin/v1/orgs/org-nope/revoke-identity", e.OncallToken, map[string]any{"reason": "x"}).Problem(t, http.StatusNotFound, "not_found")

	var out revokeResponse
	e.Do(t, http.MethodPost, path, e.OncallToken, map[string]any{"reason": "signing key leaked"}).Expect(t, http.StatusOK).JSON(t, &out)
	if out.Escalated != 3 || out.Org.IdentityRevokedAt == nil || out.Org.IdentityRevokedReason != "signing key leaked" {
		t.Fatalf("revoke: %+v", out)
	}
	for _, id := range []string{held.ID, unconfirmed.ID, pending.ID} {
		d := e.Delegation(t, e.OncallToken, id)
		if d.ObligationState != "escalated" || d.HoldState != "active" {
			t.Errorf("%s: %s/%s, want escalated/active", id, d.ObligationState, d.HoldState)
		}
		if ev := e.lastEvent(t, id); ev.Type != ledger.EventTypeIdentityRevoked || ev.ObligationTo != "escalated" || ev.Actor != e.Actor(t, e.OncallToken) {
			t.Errorf("%s: last event %s -> %s by %s", id, ev.Type, ev.ObligationTo, ev.Actor)
		}
	}
	if d := e.Delegation(t, e.OncallToken, done.ID); d.ObligationState != "compensated" {
		t.Errorf("finished delegation is %s", d.ObligationState)
	}
	if d := e.Delegation(t, e.OncallToken, otherOrg.ID); d.ObligationState != "revocation_pending_compensation" {
		t.Errorf("other org's delegation is %s", d.ObligationState)
	}
	if b := e.Budget(t, budgetID); b != budget {
		// updated_at aside, nothing may move: escalation keeps every hold.
		if b.HeldMinor != budget.HeldMinor || b.AvailableMinor != budget.AvailableMinor {
			t.Errorf("escalation moved money: %+v -> %+v", budget, b)
		}
	}
	e.Do(t, http.MethodPost, path, e.OncallToken, map[string]any{"reason": "again"}).Problem(t, http.StatusConflict, "identity_already_revoked")

	// Tokens of the revoked org are refused.
	before := e.state(t, pending.ID)
	refusedUniformly(t, e.post(t, acksPath, e.ack(t, pending)))
	if after := e.state(t, pending.ID); after != before {
		t.Fatalf("a revoked org's ack changed something: %+v -> %+v", before, after)
	}
	e.CheckInvariants(t)
}

func (e *compEnv) writeOff(t *testing.T, token, delegationID, reason string) *apitest.Response {
	t.Helper()
	return e.Do(t, http.MethodPost, "/admin/v1/delegations/"+delegationID+"/write-offs", token, map[string]any{"reason": reason, "reference": "INC-42"})
}

func (e *compEnv) approve(t *testing.T, token, writeOffID string) *apitest.Response {
	t.Helper()
	return e.Do(t, http.MethodPost, "/admin/v1/write-offs/"+writeOffID+"/approve", token, nil)
}

// TestWriteOffFourEyes: at or below the threshold a write-off executes at
// once; above it a different on-call identity must approve; self-approval,
// non-on-call callers and wrong states are refused (a second credential of
// the same principal, under its name in any case, is still self-approval),
// and all of it is recorded with the actor's principal id.
func TestWriteOffFourEyes(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	alice := e.NewToken(t, ledger.RoleOncall, "", "alice")
	bob := e.NewToken(t, ledger.RoleOncall, "", "bob")
	aliceAgain := e.NewToken(t, ledger.RoleOncall, "", "Alice") // another token of the same principal, its name in another case
	finance := e.NewToken(t, ledger.RoleFinance, "", "finance")

	for _, amount := range []int64{threshold - 1, threshold} {
		d := e.pending(t, orgB, amount)
		before := e.Budget(t, budgetID)
		var w httpapi.WriteOffBody
		e.writeOff(t, alice, d.ID, "vendor confirmed no refund").Expect(t, http.StatusCreated).JSON(t, &w)
		if w.Status != "executed" || w.Delegation == nil || w.Delegation.ObligationState != "written_off" || w.Delegation.HoldState != "lost" || w.RequestedBy != "alice" {
			t.Fatalf("write-off of %d: %+v", amount, w)
		}
		after := e.Budget(t, budgetID)
		if after.WrittenOffMinor != before.WrittenOffMinor+amount || after.HeldMinor != before.HeldMinor-amount {
			t.Fatalf("write-off of %d: budget %+v -> %+v", amount, before, after)
		}
		if ev := e.lastEvent(t, d.ID); ev.Type != ledger.EventTypeWriteOffExecuted || ev.Actor != e.Actor(t, alice) || ev.ObligationTo != "written_off" {
			t.Fatalf("last event %s by %s -> %s", ev.Type, ev.Actor, ev.ObligationTo)
		}
	}

	// Above the threshold: pending until a second identity approves.
	d := e.pending(t, orgB, threshold+1)
	e.writeOff(t, alice, d.ID, "  ").Problem(t, http.StatusUnprocessableEntity, "validation_failed")
	e.writeOff(t, finance, d.ID, "x").Problem(t, http.StatusForbidden, "forbidden")
	e.writeOff(t, e.orch, d.ID, "x").Problem(t, http.StatusForbidden, "forbidden")
	var w httpapi.WriteOffBody
	e.writeOff(t, alice, d.ID, "remote org bankrupt").Expect(t, http.StatusCreated).JSON(t, &w)
	if w.Status != "pending_approval" || w.Delegation.ObligationState != "revocation_pending_compensation" {
		t.Fatalf("above threshold: %+v", w)
	}
	if ev := e.lastEvent(t, d.ID); ev.Type != ledger.EventTypeWriteOffRequested || ev.Actor != e.Actor(t, alice) {
		t.Fatalf("last event %s by %s", ev.Type, ev.Actor)
	}
	e.writeOff(t, bob, d.ID, "again").Problem(t, http.StatusConflict, "write_off_pending")
	held := e.Budget(t, budgetID)
	e.approve(t, alice, w.ID).Problem(t, http.StatusForbidden, "self_approval")
	e.approve(t, aliceAgain, w.ID).Problem(t, http.StatusForbidden, "self_approval")
	e.approve(t, finance, w.ID).Problem(t, http.StatusForbidden, "forbidden")
	if ev := e.lastEvent(t, d.ID); ev.Type != ledger.EventTypeWriteOffRefused || eventData(t, ev)["code"] != "self_approval" {
		t.Fatalf("last event %s %s, want write_off_refused self_approval", ev.Type, ev.Data)
	}
	if b := e.Budget(t, budgetID); b != held {
		t.Fatalf("refused approvals moved money: %+v -> %+v", held, b)
	}
	var approved httpapi.WriteOffBody
	e.approve(t, bob, w.ID).Expect(t, http.StatusOK).JSON(t, &approved)
	if approved.Status != "executed" || approved.ApprovedBy != "bob" || approved.Delegation.ObligationState != "written_off" {
		t.Fatalf("approved: %+v", approved)
	}
	if ev := e.lastEvent(t, d.ID); ev.Type != ledger.EventTypeWriteOffExecuted || ev.Actor != e.Actor(t, bob) {
		t.Fatalf("last event %s by %s", ev.Type, ev.Actor)
	}
	e.approve(t, bob, w.ID).Problem(t, http.StatusConflict, "write_off_not_pending")
	var got httpapi.WriteOffBody
	e.Do(t, http.MethodGet, "/admin/v1/write-offs/"+w.ID, finance, nil).Expect(t, http.StatusOK).JSON(t, &got)
	if got.Status != "executed" || got.RequestedBy != "alice" || got.ApprovedBy != "bob" {
		t.Fatalf("GET write-off: %+v", got)
	}

	// Wrong states.
	heldD := e.delegation(t, orgB, 500)
	e.writeOff(t, alice, heldD.ID, "x").Problem(t, http.StatusConflict, "write_off_not_allowed")
	e.writeOff(t, alice, d.ID, "x").Problem(t, http.StatusConflict, "write_off_not_allowed")
	if ev := e.lastEvent(t, heldD.ID); ev.Type != ledger.EventTypeWriteOffRefused || ev.Actor != e.Actor(t, alice) {
		t.Fatalf("last event %s by %s", ev.Type, ev.Actor)
	}
	e.writeOff(t, alice, "00000000-0000-0000-0000-000000000000", "x").Problem(t, http.StatusNotFound, "not_found")
	e.approve(t, bob, "not-a-uuid").Problem(t, http.StatusNotFound, "not_found")

	// An escalated obligation can be written off.
	esc := e.delegation(t, orgC, 800)
	e.Do(t, http.MethodPost, "/admin/v1/orgs/"+orgC+"/revoke-identity", bob, map[string]any{"reason": "compromised"}).Expect(t, http.StatusOK)
	e.writeOff(t, bob, esc.ID, "identity compromised").Expect(t, http.StatusCreated)
	e.CheckInvariants(t)
}

// TestPendingWriteOffVoidedByAck: an ack that arrives while a write-off
// awaits approval discharges the obligation and voids the write-off; the
// approval is then refused.
func TestPendingWriteOffVoidedByAck(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	alice := e.NewToken(t, ledger.RoleOncall, "", "alice")
	bob := e.NewToken(t, ledger.RoleOncall, "", "bob")
	d := e.pending(t, orgB, threshold*3)
	var w httpapi.WriteOffBody
	e.writeOff(t, alice, d.ID, "no answer for weeks").Expect(t, http.StatusCreated).JSON(t, &w)
	e.accept(t, acksPath, e.ack(t, d), "applied")
	var got httpapi.WriteOffBody
	e.Do(t, http.MethodGet, "/admin/v1/write-offs/"+w.ID, bob, nil).Expect(t, http.StatusOK).JSON(t, &got)
	if got.Status != "void" {
		t.Fatalf("write-off after the ack is %s, want void", got.Status)
	}
	e.approve(t, bob, w.ID).Problem(t, http.StatusConflict, "write_off_not_pending")
	if dd := e.Delegation(t, bob, d.ID); dd.ObligationState != "compensated" {
		t.Fatalf("delegation is %s", dd.ObligationState)
	}
	e.CheckInvariants(t)
}

// TestLateAckAfterWriteOff: an ack after a write-off is recorded as
// late_evidence with contradicts_write_off, never applied.
func TestLateAckAfterWriteOff(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	d := e.pending(t, orgB, 2_500)
	e.writeOff(t, e.OncallToken, d.ID, "gave up").Expect(t, http.StatusCreated)
	before := e.state(t, d.ID)
	token := e.ack(t, d)
	out := e.accept(t, acksPath, token, "late_evidence")
	if out.ObligationState != "written_off" {
		t.Fatalf("late ack: %s", out.ObligationState)
	}
	ev := e.lastEvent(t, d.ID)
	if ev.Type != ledger.EventTypeLateEvidence || ev.Evidence != token || eventData(t, ev)["contradicts_write_off"] != true {
		t.Fatalf("last event %s %s", ev.Type, ev.Data)
	}
	after := e.state(t, d.ID)
	before.Events++
	before.UsedTokens++
	if after != before {
		t.Fatalf("late ack changed more than one event and its jti: %+v -> %+v", before, after)
	}
	e.CheckInvariants(t)
}

// TestConcurrentAckWriteOffDeclaration races an ack, a write-off and a
// declaration on one delegation: exactly one moves the obligation, the
// evidence that loses is recorded (as late evidence after a write-off, as
// an evidence_conflict after the other evidence), a losing write-off is
// refused and recorded, and the budget is conserved.
func TestConcurrentAckWriteOffDeclaration(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	winners := map[string]int{}
	for round := range 8 {
		d := e.pending(t, orgB, 1_000+int64(round))
		ack, decl := e.ack(t, d), e.declaration(t, d)
		type result struct {
			what   string
			status int
			body   []byte
		}
		results := make(chan result, 3)
		start := make(chan struct{})
		send := func(what string, req *http.Request) {
			<-start
			resp, err := e.Client.Do(req)
			if err != nil {
				results <- result{what: what}
				return
			}
			defer resp.Body.Close()
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(resp.Body)
			results <- result{what, resp.StatusCode, buf.Bytes()}
		}
		mk := func(path, ct string, body []byte, token string) *http.Request {
			req, _ := http.NewRequest(http.MethodPost, e.URL+path, bytes.NewReader(body))
			req.Header.Set("Content-Type", ct)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			return req
		}
		woBody, _ := json.Marshal(map[string]any{"reason": "race"})
		go send("ack", mk(acksPath, "application/jose", []byte(ack), ""))
		go send("declaration", mk(declsPath, "application/jose", []byte(decl), ""))
		go send("write_off", mk("/admin/v1/delegations/"+d.ID+"/write-offs", "application/json", woBody, e.OncallToken))
		close(start)
		applied := 0
		for range 3 {
			r := <-results
			switch {
			case r.what == "write_off" && r.status == http.StatusCreated:
				applied++
				winners["write_off"]++
			case r.what == "write_off" && r.status == http.StatusConflict:
			case r.status == http.StatusUnprocessableEntity && bytes.Contains(r.body, []byte(compensation.CodeEvidenceConflict)):
				// The other evidence won: the same key, another payload.
			case r.status == http.StatusOK:
				var out evidenceResponse
				if err := json.Unmarshal(r.body, &out); err != nil {
					t.Fatalf("%s: %s", r.what, r.body)
				}
				if out.Evidence.Outcome == "applied" {
					applied++
					winners[r.what]++
				} else if out.Evidence.Outcome != "late_evidence" {
					t.Fatalf("%s: outcome %s", r.what, out.Evidence.Outcome)
				}
			default:
				t.Fatalf("round %d: %s answered %d: %s", round, r.what, r.status, r.body)
			}
		}
		if applied != 1 {
			t.Fatalf("round %d: %d requests moved the obligation, want exactly 1", round, applied)
		}
		transitions, recorded := 0, 0
		for _, ev := range e.Events(t, e.OncallToken, d.ID) {
			if ev.ObligationFrom == "revocation_pending_compensation" {
				transitions++
			}
			switch ev.Type {
			case ledger.EventTypeLateEvidence, ledger.EventTypeWriteOffRefused, ledger.EventTypeEvidenceConflict:
				recorded++
			}
		}
		if transitions != 1 || recorded != 2 {
			t.Fatalf("round %d: %d transitions out of pending and %d recorded losers, want 1 and 2", round, transitions, recorded)
		}
	}
	t.Logf("winners: %v", winners)
	e.CheckInvariants(t)
}

// TestEvidenceBodyLimitWithoutLength: a body sent without a Content-Length
// (chunked) is cut off at the token size limit by the operation's
// MaxBodyBytes, and a token of exactly the limit is still read whole.
func TestEvidenceBodyLimitWithoutLength(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	d := e.pending(t, orgB, 1_000)
	chunked := func(body []byte) *apitest.Response {
		req, err := http.NewRequest(http.MethodPost, e.URL+acksPath, io.MultiReader(bytes.NewReader(body)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/jose")
		return e.Send(t, req)
	}
	before := e.state(t, d.ID)
	chunked(bytes.Repeat([]byte("A"), jose.MaxTokenSize+1)).Problem(t, http.StatusRequestEntityTooLarge, "body_too_large")
	if after := e.state(t, d.ID); after != before {
		t.Fatalf("an oversized body changed something: %+v -> %+v", before, after)
	}
	// Exactly MaxTokenSize bytes: read whole, then judged as a token.
	padded := e.b.Sign(t, ackTyp, with(e.ackClaims(d), "pad", ""))
	padded += strings.Repeat(" ", jose.MaxTokenSize-len(padded)) // surrounding whitespace is ignored
	out := e.accept(t, acksPath, padded, "applied")
	if out.ObligationState != "compensated" {
		t.Fatalf("a token of exactly the limit: %s", out.ObligationState)
	}
}

// TestRevocationRacesCreation revokes an org's identity while delegations
// to it are being created: once the revocation has committed, no delegation
// of that org may be left "held" — each one was either escalated by the
// revocation or refused because it saw it.
func TestRevocationRacesCreation(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	const creators = 16
	var wg sync.WaitGroup
	statuses := make(chan int, creators)
	for i := range creators {
		wg.Go(func() {
			req := apitest.NewCreateRequest(fmt.Sprintf("race-%d", i), orgB, "procurement", budgetID, 10, "EUR")
			statuses <- e.Do(t, http.MethodPost, "/v1/delegations", e.orch, req).Status
		})
	}
	wg.Go(func() {
		e.Do(t, http.MethodPost, "/admin/v1/orgs/"+orgB+"/revoke-identity", e.OncallToken,
			map[string]any{"reason": "key compromised"}).Expect(t, http.StatusOK)
	})
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != http.StatusCreated && s != http.StatusConflict {
			t.Errorf("create during revocation: status %d, want 201 or 409", s)
		}
	}
	var held int
	if err := e.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM delegations WHERE org_id = $1 AND obligation_state = 'held'`, orgB).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Errorf("%d delegations of the revoked org are still held, want all escalated", held)
	}
	e.CheckInvariants(t)
}

// TestRegistrationKeepsRevocation re-registers a revoked org: the
// registration must not restore the identity it revoked.
func TestRegistrationKeepsRevocation(t *testing.T) {
	t.Parallel()
	e := newCompEnv(t)
	e.Do(t, http.MethodPost, "/admin/v1/orgs/"+orgB+"/revoke-identity", e.OncallToken,
		map[string]any{"reason": "key compromised"}).Expect(t, http.StatusOK)
	e.putOrg(t, orgB, e.b.JWKS())
	var org httpapi.OrgBody
	e.Do(t, http.MethodGet, "/admin/v1/orgs/"+orgB, e.OncallToken, nil).Expect(t, http.StatusOK).JSON(t, &org)
	if org.IdentityRevokedAt == nil || org.IdentityRevokedReason != "key compromised" {
		t.Errorf("after re-registration: revoked_at %v, reason %q; want the revocation kept", org.IdentityRevokedAt, org.IdentityRevokedReason)
	}
}
