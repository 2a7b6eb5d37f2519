// Package extension holds the published specification of Quittance's A2A
// ledger extension, https://quittance.dev/a2a/ledger/v1 (v1/README.md):
// what an orchestrator puts in a message's metadata for the A2A gateway
// to hold and dispatch it, and what the gateway answers in a task's
// metadata. It holds the JSON Schemas and validates JSON against them.
// Tests use it to hold what the gateway accepts and answers to the
// document; nothing in the service imports it.
package extension

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
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

// Path is the file of Files that a URI at or below URI names ("" when it
// names none).
func Path(uri string) string {
	if uri == URI {
		return "v1/README.md"
	}
	name, ok := strings.CutPrefix(uri, URI+"/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return ""
	}
	return path.Join("v1", name)
}

var (
	compileOnce sync.Once
	compiled    map[string]*jsonschema.Schema
	compileErr  error
)

// compile compiles every schema of v1, each resolved by its $id.
func compile() (map[string]*jsonschema.Schema, error) {
	compileOnce.Do(func() {
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		c.AssertFormat()
		names, err := fs.Glob(Files, "v1/*.schema.json")
		if err != nil {
			compileErr = err
			return
		}
		for _, name := range names {
			b, err := Files.ReadFile(name)
			if err != nil {
				compileErr = err
				return
			}
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
			if err != nil {
				compileErr = fmt.Errorf("%s: %w", name, err)
				return
			}
			if err := c.AddResource(URI+"/"+path.Base(name), doc); err != nil {
				compileErr = fmt.Errorf("%s: %w", name, err)
				return
			}
		}
		compiled = map[string]*jsonschema.Schema{}
		for _, name := range names {
			s, err := c.Compile(URI + "/" + path.Base(name))
			if err != nil {
				compileErr = fmt.Errorf("%s: %w", name, err)
				return
			}
			compiled[path.Base(name)] = s
		}
	})
	return compiled, compileErr
}

// Validate checks the JSON document doc against the v1 schema named schema
// (one of the Schema constants).
func Validate(schema string, doc []byte) error {
	schemas, err := compile()
	if err != nil {
		return fmt.Errorf("compile the extension's schemas: %w", err)
	}
	s, ok := schemas[schema]
	if !ok {
		return fmt.Errorf("no schema %q", schema)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("%s: not JSON: %w", schema, err)
	}
	if err := s.Validate(v); err != nil {
		return fmt.Errorf("%s: %w", schema, err)
	}
	return nil
}

// ValidateValue is Validate of v encoded as JSON.
func ValidateValue(schema string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return Validate(schema, b)
}
