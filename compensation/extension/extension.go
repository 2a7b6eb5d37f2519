// Package extension holds the published specification of Quittance's A2A
// compensation extension, https://quittance.dev/a2a/compensation/v1
// (v1/README.md), and its JSON Schemas, and validates JSON against them.
// Tests use it to hold what Quittance sends and what agents return to the
// document; nothing in the service imports it.
package extension

import (
	"embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/quittance/quittance/internal/specschema"
)

// URI is the extension's URI. Its path below https://quittance.dev/ maps to
// this directory: https://quittance.dev/a2a/compensation/v1 is v1/README.md,
// and https://quittance.dev/a2a/compensation/v1/NAME is v1/NAME.
const URI = "https://quittance.dev/a2a/compensation/v1"

// The schemas of v1, by file name.
const (
	SchemaRequest      = "request.schema.json"
	SchemaMetadata     = "metadata.schema.json"
	SchemaReceipt      = "receipt.schema.json"
	SchemaOutcome      = "outcome.schema.json"
	SchemaReceiptToken = "receipt-token.schema.json"
	SchemaRequestToken = "request-token.schema.json"
	SchemaCard         = "card.schema.json"
)

// Files are the document and the schemas of v1, under "v1/".
//
//go:embed v1/README.md v1/*.schema.json
var Files embed.FS

// spec serves Files under URI.
var spec = specschema.New(URI, Files, "v1")

// Path is the file of Files that a URI at or below URI names ("" when it
// names none).
func Path(uri string) string { return spec.Path(uri) }

// Validate checks the JSON document doc against the v1 schema named schema
// (one of the Schema constants).
func Validate(schema string, doc []byte) error { return spec.Validate(schema, doc) }

// ValidateValue is Validate of v encoded as JSON.
func ValidateValue(schema string, v any) error { return spec.ValidateValue(schema, v) }

// CheckDocument reports what is wrong with v1 as a published document
// (specschema.Spec.CheckDocument), and returns its schema files.
func CheckDocument() (schemas []string, problems []string) { return spec.CheckDocument() }

// Examples returns the document's JSON examples with their markers.
func Examples() ([]specschema.Example, error) { return spec.Examples() }

// ValidateToken checks the protected header and the claims of the compact
// JWS token against the token schema named schema (SchemaReceiptToken or
// SchemaRequestToken), as {"header": …, "claims": …}. The signature is not
// verified: that is compensation.Verify's (or VerifyCompensationRequest's).
func ValidateToken(schema, token string) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return fmt.Errorf("%s: not a compact JWS", schema)
	}
	var doc struct {
		Header json.RawMessage `json:"header"`
		Claims json.RawMessage `json:"claims"`
	}
	for i, dst := range []*json.RawMessage{&doc.Header, &doc.Claims} {
		b, err := base64URL(parts[i])
		if err != nil {
			return fmt.Errorf("%s: %w", schema, err)
		}
		*dst = b
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("%s: %w", schema, err)
	}
	return Validate(schema, b)
}

// base64URL decodes unpadded base64url.
func base64URL(s string) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("not base64url: %w", err)
	}
	return b, nil
}
