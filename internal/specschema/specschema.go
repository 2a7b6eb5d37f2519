// Package specschema serves the published specification of one of
// Quittance's A2A extensions (compensation/extension, ledger/extension):
// its document and JSON Schemas, embedded under a version directory, with
// the extension's URI mapped onto them, and validation of JSON against a
// schema. The schemas are compiled once, each resolved by its $id below
// the extension's URI, so they may refer to each other.
package specschema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Spec is one version of an extension's specification.
type Spec struct {
	uri   string
	files fs.FS
	dir   string

	once     sync.Once
	compiled map[string]*jsonschema.Schema
	err      error
}

// New returns the specification whose URI is uri, with its README.md and
// its *.schema.json files in the directory dir of files.
func New(uri string, files fs.FS, dir string) *Spec {
	return &Spec{uri: uri, files: files, dir: dir}
}

// Path is the file of the specification that a URI at or below its URI
// names: the URI itself is the document (README.md), URI/NAME is the file
// NAME; "" when it names none.
func (s *Spec) Path(uri string) string {
	if uri == s.uri {
		return path.Join(s.dir, "README.md")
	}
	name, ok := strings.CutPrefix(uri, s.uri+"/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return ""
	}
	return path.Join(s.dir, name)
}

// compile compiles every schema of the specification, once.
func (s *Spec) compile() (map[string]*jsonschema.Schema, error) {
	s.once.Do(func() { s.compiled, s.err = s.compileAll() })
	return s.compiled, s.err
}

func (s *Spec) compileAll() (map[string]*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	names, err := fs.Glob(s.files, path.Join(s.dir, "*.schema.json"))
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		b, err := fs.ReadFile(s.files, name)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if err := c.AddResource(s.uri+"/"+path.Base(name), doc); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	compiled := map[string]*jsonschema.Schema{}
	for _, name := range names {
		schema, err := c.Compile(s.uri + "/" + path.Base(name))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		compiled[path.Base(name)] = schema
	}
	return compiled, nil
}

// Validate checks the JSON document doc against the schema file named
// schema.
func (s *Spec) Validate(schema string, doc []byte) error {
	schemas, err := s.compile()
	if err != nil {
		return fmt.Errorf("compile the extension's schemas: %w", err)
	}
	compiled, ok := schemas[schema]
	if !ok {
		return fmt.Errorf("no schema %q", schema)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("%s: not JSON: %w", schema, err)
	}
	if err := compiled.Validate(v); err != nil {
		return fmt.Errorf("%s: %w", schema, err)
	}
	return nil
}

// ValidateValue is Validate of v encoded as JSON.
func (s *Spec) ValidateValue(schema string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.Validate(schema, b)
}
