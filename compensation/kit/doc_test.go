package kit_test

import (
	"os"
	"strings"
	"testing"
)

// TestDocShowsTheIntegration: the integration the extension's document
// shows is, line for line, the one Example runs (example_test.go, between
// doc:begin and doc:end), and it stays under 30 lines.
func TestDocShowsTheIntegration(t *testing.T) {
	doc, err := os.ReadFile("../extension/v1/README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "<!-- kit integration: compensation/kit/example_test.go, between doc:begin and doc:end -->\n```go\n")
	if !ok {
		t.Fatal("the document has no kit integration block")
	}
	shown, _, _ := strings.Cut(after, "```\n")
	code, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, region, _ := strings.Cut(string(code), "\t// doc:begin\n")
	region, _, _ = strings.Cut(region, "\t// doc:end\n")
	var run []string
	for _, line := range strings.SplitAfter(region, "\n") {
		run = append(run, strings.TrimPrefix(line, "\t"))
	}
	if got := strings.Join(run, ""); got != shown {
		t.Errorf("the document shows\n%s\nExample runs\n%s", shown, got)
	}
	if n := strings.Count(shown, "\n"); n == 0 || n >= 30 {
		t.Errorf("the integration is %d lines, want under 30", n)
	}
}
