package compensation_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/compensation/compensationtest"
	"github.com/quittance/quittance/ledger"
)

func TestRequestShape(t *testing.T) {
	t.Parallel()
	d := ledger.Delegation{ID: uuid.MustParse("0190a1b2-0000-7000-8000-000000000001"), TaskStatus: ledger.StatusCanceled,
		Remote: ledger.RemoteTask{TaskID: "task-1"}}
	var got map[string]map[string]string
	if err := json.Unmarshal(compensation.RequestFor(d).Data(), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"taskId": "task-1", "idempotencyKey": ledger.CompensationKey(d), "reason": "task_canceled"}
	for k, v := range want {
		if got["compensationRequest"][k] != v {
			t.Fatalf("request %v, want %v", got, want)
		}
	}
	if a, b := compensation.RequestMessageID(d.ID, 1), compensation.RequestMessageID(d.ID, 1); a != b {
		t.Fatal("messageId not stable")
	}
	if compensation.RequestMessageID(d.ID, 1) == compensation.RequestMessageID(d.ID, 2) {
		t.Fatal("a new round must have a new messageId")
	}
}

func TestParseRemoteReceipt(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`{"outcome":"compensated","receiptId":"r","taskId":"t","idempotencyKey":"k"}`,
		`{"compensationReceipt":{"outcome":"compensated","receiptId":"r","taskId":"t","idempotencyKey":"k"}}`,
	} {
		r, err := compensation.ParseRemoteReceipt([]byte(raw))
		if err != nil || r.Outcome != compensation.ReceiptCompensated || r.TaskID != "t" || r.IdempotencyKey != "k" {
			t.Fatalf("%s: %+v, %v", raw, r, err)
		}
	}
	for _, raw := range []string{`{"outcome":"maybe","taskId":"t"}`, `{"outcome":"compensated"}`, `[]`, `nope`} {
		if _, err := compensation.ParseRemoteReceipt([]byte(raw)); err == nil {
			t.Fatalf("%s: accepted", raw)
		}
	}
}

func TestJudgeReceipt(t *testing.T) {
	t.Parallel()
	signer := compensationtest.NewEd25519Signer(t, "k1")
	now := time.Now()
	d := ledger.Delegation{ID: uuid.New(), OrgID: "org-b", Remote: ledger.RemoteTask{TaskID: "task-1"}, TaskStatus: ledger.StatusCanceled}
	key := ledger.CompensationKey(d)
	org := ledger.Org{ID: "org-b", JWKS: signer.JWKS()}
	signed := ledger.Org{ID: "org-b", JWKS: signer.JWKS(), RequireSignedReceipts: true}
	ack := signer.Sign(t, string(compensation.KindAck), compensationtest.AckClaims("org-b", "ledger", "task-1", key, now))
	wrongKeyAck := signer.Sign(t, string(compensation.KindAck), compensationtest.AckClaims("org-b", "ledger", "task-1", "other", now))
	decl := signer.Sign(t, string(compensation.KindDeclaration), compensationtest.DeclarationClaims("org-b", "ledger", "task-1", now))
	otherTaskDecl := signer.Sign(t, string(compensation.KindDeclaration), compensationtest.DeclarationClaims("org-b", "ledger", "task-2", now))
	receipt := func(outcome compensation.ReceiptOutcome, jws string) compensation.RemoteReceipt {
		return compensation.RemoteReceipt{Outcome: outcome, TaskID: "task-1", IdempotencyKey: key, JWS: jws}
	}
	revoked := org
	revoked.IdentityRevokedAt = now

	for _, tc := range []struct {
		name    string
		org     ledger.Org
		r       compensation.RemoteReceipt
		atomic  bool
		want    ledger.ObligationEvent
		problem string
	}{
		{"channel ack", org, receipt(compensation.ReceiptCompensated, ""), false, ledger.EventCompensationAck, ""},
		{"signed ack", signed, receipt(compensation.ReceiptCompensated, ack), false, ledger.EventCompensationAck, ""},
		{"unsigned ack, signatures required", signed, receipt(compensation.ReceiptCompensated, ""), false, "", "requires signed receipts"},
		{"ack signed as declaration", signed, receipt(compensation.ReceiptCompensated, decl), false, "", "token_type_mismatch"},
		{"ack jws with another key", org, receipt(compensation.ReceiptCompensated, wrongKeyAck), false, "", "idempotency key"},
		{"wrong idempotency key", org, compensation.RemoteReceipt{Outcome: compensation.ReceiptCompensated, TaskID: "task-1", IdempotencyKey: "x"}, false, "", "idempotency key"},
		{"atomic without key", org, compensation.RemoteReceipt{Outcome: compensation.ReceiptCompensated, TaskID: "task-1"}, true, ledger.EventCompensationAck, ""},
		{"other task", org, compensation.RemoteReceipt{Outcome: compensation.ReceiptCompensated, TaskID: "task-2", IdempotencyKey: key}, false, "", "another task"},
		{"verified declaration", org, receipt(compensation.ReceiptNoEffects, decl), false, ledger.EventDeclarationVerified, ""},
		{"unsigned no_effects", org, receipt(compensation.ReceiptNoEffects, ""), false, "", "proves nothing"},
		{"declaration about another task", org, receipt(compensation.ReceiptNoEffects, otherTaskDecl), false, "", "another task"},
		{"declaration, org without keys", ledger.Org{ID: "org-b"}, receipt(compensation.ReceiptNoEffects, decl), false, "", "no registered keys"},
		{"failed", org, receipt(compensation.ReceiptFailed, ""), false, "", "failed"},
		{"not supported", org, receipt(compensation.ReceiptNotSupported, ""), false, "", "not_supported"},
		{"revoked org", revoked, receipt(compensation.ReceiptCompensated, ""), false, "", "revoked"},
	} {
		v := compensation.JudgeReceipt(compensation.ReceiptInput{Delegation: d, Org: tc.org, Receipt: tc.r, LedgerID: "ledger", Now: now, Atomic: tc.atomic})
		if v.Event != tc.want || (tc.problem != "" && !strings.Contains(v.Problem, tc.problem)) || (tc.want != "" && v.Problem != "") {
			t.Errorf("%s: verdict %+v, want event %q problem containing %q", tc.name, v, tc.want, tc.problem)
		}
		// Every jws above is signed by k1, in force wherever the org has keys.
		if v.UnknownKid != "" && len(tc.org.KeySet()) > 0 {
			t.Errorf("%s: verdict %+v names an unknown kid", tc.name, v)
		}
	}

	// A jws refused because no key in force has its kid names the kid, so
	// that the worker may fetch the org's JWKS URL and judge it again.
	rotated := compensationtest.NewEd25519Signer(t, "k2")
	rotatedAck := rotated.Sign(t, string(compensation.KindAck), compensationtest.AckClaims("org-b", "ledger", "task-1", key, now))
	rotatedDecl := rotated.Sign(t, string(compensation.KindDeclaration), compensationtest.DeclarationClaims("org-b", "ledger", "task-1", now))
	for _, tc := range []struct {
		name string
		org  ledger.Org
		r    compensation.RemoteReceipt
		kid  string
	}{
		{"ack signed by a key not in force", signed, receipt(compensation.ReceiptCompensated, rotatedAck), "k2"},
		{"declaration signed by a key not in force", org, receipt(compensation.ReceiptNoEffects, rotatedDecl), "k2"},
		{"org without keys", ledger.Org{ID: "org-b"}, receipt(compensation.ReceiptNoEffects, decl), "k1"},
	} {
		v := compensation.JudgeReceipt(compensation.ReceiptInput{Delegation: d, Org: tc.org, Receipt: tc.r, LedgerID: "ledger", Now: now})
		if v.Event != "" || v.UnknownKid != tc.kid || v.Problem == "" {
			t.Errorf("%s: verdict %+v, want it refused naming kid %q", tc.name, v, tc.kid)
		}
	}
}
