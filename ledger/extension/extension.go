// Package extension holds the published specification of Quittance's A2A
// ledger extension, https://quittance.dev/a2a/ledger/v1 (v1/README.md):
// what an orchestrator puts in a message's metadata for the A2A gateway
// to hold and dispatch it, and what the gateway answers in a task's
// metadata. It holds the JSON Schemas and validates JSON against them.
// Tests use it to hold what the gateway accepts and answers to the
// document; nothing in the service imports it.
package extension

import (
	"embed"

	"github.com/quittance/quittance/internal/specschema"
)

// URI is the extension's URI. Its path below https://quittance.dev/ maps
// to this directory's parent's: https://quittance.dev/a2a/ledger/v1 is
// v1/README.md, and https://quittance.dev/a2a/ledger/v1/NAME is v1/NAME.
const URI = "https://quittance.dev/a2a/ledger/v1"

// The schemas of v1, by file name.
const (
	SchemaMessageMetadata = "message-metadata.schema.json"
	SchemaTaskMetadata    = "task-metadata.schema.json"
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
