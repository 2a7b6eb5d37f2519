// Package specschema serves the published specification of one of
// Quittance's A2A extensions (compensation/extension, ledger/extension):
// its document and JSON Schemas, embedded under a version directory, with
// the extension's URI mapped onto them, and validation of JSON against a
// schema. The schemas are compiled once, each resolved by its $id below
// the extension's URI, so they may refer to each other.
package specschema

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"regexp"
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

// CheckDocument reports what is wrong with the specification's files as a
// published document: the document must state its URI, and every schema
// must be draft 2020-12, have its file's URI as its $id and be linked
// from the document. It returns the schema files it checked.
func (s *Spec) CheckDocument() (schemas []string, problems []string) {
	doc, err := fs.ReadFile(s.files, s.Path(s.uri))
	if err != nil {
		return nil, []string{err.Error()}
	}
	if !bytes.Contains(doc, []byte("`"+s.uri+"`")) {
		problems = append(problems, "the document does not state its URI "+s.uri)
	}
	schemas, err = fs.Glob(s.files, path.Join(s.dir, "*.schema.json"))
	if err != nil {
		return nil, append(problems, err.Error())
	}
	for _, name := range schemas {
		b, err := fs.ReadFile(s.files, name)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		var head struct {
			ID     string `json:"$id"`
			Schema string `json:"$schema"`
		}
		if err := json.Unmarshal(b, &head); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		if s.Path(head.ID) != name || head.Schema != "https://json-schema.org/draft/2020-12/schema" {
			problems = append(problems, fmt.Sprintf("%s: $id %s maps to %q, $schema %s", name, head.ID, s.Path(head.ID), head.Schema))
		}
		if !bytes.Contains(doc, []byte("]("+path.Base(name)+")")) {
			problems = append(problems, "the document does not link "+name)
		}
	}
	return schemas, problems
}

// Example is a JSON example of the document: a ```json block, and what the
// "<!-- example: … -->" marker on the last non-blank line before it says
// ("" when there is none).
type Example struct {
	Marker string
	JSON   string
}

var exampleMarker = regexp.MustCompile(`^<!-- example: (.+) -->$`)

// Examples returns the document's JSON examples, in order.
func (s *Spec) Examples() ([]Example, error) {
	doc, err := fs.ReadFile(s.files, s.Path(s.uri))
	if err != nil {
		return nil, err
	}
	var (
		out       []Example
		prev      string
		in        bool
		current   Example
		jsonLines strings.Builder
	)
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case !in && line == "```json":
			in, current = true, Example{}
			jsonLines.Reset()
			if m := exampleMarker.FindStringSubmatch(prev); m != nil {
				current.Marker = m[1]
			}
		case in && line == "```":
			in = false
			current.JSON = jsonLines.String()
			out = append(out, current)
		case in:
			jsonLines.WriteString(line + "\n")
		}
		if strings.TrimSpace(line) != "" {
			prev = line
		}
	}
	return out, sc.Err()
}
