package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/gateway"
	"github.com/quittance/quittance/ledger/extension"
)

// TestLedgerExtensionURIMapsToThisDirectory: the URI the gateway declares
// and reads is the one the document states, and every schema's $id is its
// file's URI, linked from the document.
func TestLedgerExtensionURIMapsToThisDirectory(t *testing.T) {
	if gateway.ExtensionURI != extension.URI {
		t.Fatalf("gateway.ExtensionURI %q, the document's %q", gateway.ExtensionURI, extension.URI)
	}
	schemas, problems := extension.CheckDocument()
	for _, p := range problems {
		t.Error(p)
	}
	if len(schemas) != 2 {
		t.Errorf("schemas %v, want 2", schemas)
	}
}

// docExamples returns the document's JSON examples marked with the schema
// they follow, by schema.
func docExamples(t *testing.T) map[string][]string {
	t.Helper()
	examples, err := extension.Examples()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, ex := range examples {
		if ex.Marker != "" {
			out[ex.Marker] = append(out[ex.Marker], ex.JSON)
		}
	}
	return out
}

// TestLedgerExtensionDocExamplesValidate: every marked example of the
// document validates against its schema, and both schemas have some.
func TestLedgerExtensionDocExamplesValidate(t *testing.T) {
	examples := docExamples(t)
	for _, schema := range []string{extension.SchemaMessageMetadata, extension.SchemaTaskMetadata} {
		if len(examples[schema]) < 2 {
			t.Errorf("%d examples of %s, want at least 2", len(examples[schema]), schema)
		}
		for _, ex := range examples[schema] {
			if err := extension.Validate(schema, []byte(ex)); err != nil {
				t.Errorf("%s\n%v", ex, err)
			}
		}
	}
}

// TestLedgerExtensionIsWhatTheGatewayAccepts: the gateway accepts every
// message example of the document and answers tasks whose metadata
// validates against the task schema; every entry the message schema
// refuses, the gateway refuses too, holding nothing.
func TestLedgerExtensionIsWhatTheGatewayAccepts(t *testing.T) {
	t.Parallel()
	e := newGatewayEnv(t)
	e.PutBudget(t, "procurement-2026", "EUR", 1_000_000)
	c := e.client(t, e.acme, orgID, a2a.TransportProtocolJSONRPC)
	ctx := context.Background()
	message := func(entry string) *a2a.Message {
		var v any
		if err := json.Unmarshal([]byte(entry), &v); err != nil {
			t.Fatalf("%s: %v", entry, err)
		}
		m := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("Order 3 projectors"))
		m.ID = uuid.NewString()
		m.Metadata = map[string]any{gateway.ExtensionURI: v}
		return m
	}
	for _, ex := range docExamples(t)[extension.SchemaMessageMetadata] {
		task := send(t, c, message(ex))
		if err := extension.ValidateValue(extension.SchemaTaskMetadata, meta(t, task)); err != nil {
			t.Fatalf("the answer to %s: %v", ex, err)
		}
	}
	held := e.Budget(t, "procurement-2026").HeldMinor
	for _, entry := range []string{
		`{}`,
		`null`,
		`"procurement-2026"`,
		`{"task_class": "procurement", "hold": {"amount_minor": 100, "currency": "EUR"}}`,
		`{"budget_id": "", "task_class": "procurement", "hold": {"amount_minor": 100, "currency": "EUR"}}`,
		`{"budget_id": "procurement-2026", "task_class": "procurement"}`,
		`{"budget_id": "procurement-2026", "hold": {"amount_minor": 100, "currency": "EUR"}}`,
		`{"budget_id": "procurement-2026", "task_class": "procurement", "hold": {"amount_minor": 12.5, "currency": "EUR"}}`,
		`{"budget_id": "procurement-2026", "task_class": "procurement", "hold": {"amount_minor": "100", "currency": "EUR"}}`,
		`{"budget_id": "procurement-2026", "task_class": "procurement", "hold": {"amount_minor": 0, "currency": "EUR"}}`,
		`{"budget_id": "procurement-2026", "task_class": "procurement", "hold": {"amount_minor": -5, "currency": "EUR"}}`,
		`{"budget_id": "procurement-2026", "task_class": "procurement", "hold": {"amount_minor": 100}}`,
		`{"budget_id": "procurement-2026", "task_class": "procurement", "hold": {"amount_minor": 100, "currency": "EUR", "note": "x"}}`,
		`{"budget_id": "procurement-2026", "task_class": "Procurement", "hold": {"amount_minor": 100, "currency": "EUR"}}`,
		`{"budget_id": "procurement-2026", "task_class": "procurement", "hold": {"amount_minor": 100, "currency": "EUR"}, "budget": "x"}`,
		`{"budget_id": "procurement-2026", "task_class": "procurement", "hold": {"amount_minor": 100, "currency": "EUR"}, "business_operation_id": ""}`,
		`{"budget_id": "procurement-2026", "task_class": "procurement", "hold": {"amount_minor": 100, "currency": "EUR"}, "business_operation_id": "` + strings.Repeat("x", 201) + `"}`,
	} {
		if err := extension.Validate(extension.SchemaMessageMetadata, []byte(entry)); err == nil {
			t.Fatalf("the schema accepts %s", entry)
		}
		_, err := c.SendMessage(ctx, &a2a.SendMessageRequest{Message: message(entry)})
		if !errors.Is(err, a2a.ErrInvalidParams) && !errors.Is(err, a2a.ErrExtensionSupportRequired) {
			t.Fatalf("the gateway answers %s with %v", entry, err)
		}
	}
	if now := e.Budget(t, "procurement-2026").HeldMinor; now != held {
		t.Fatalf("held %d after the refusals, %d before", now, held)
	}
}
