package main

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestEveryCommandInCLIMd: CLI.md names every command the binary has, so a
// command added without a line there fails here. A command counts as named
// when its path appears as the start of a code span ("`quittance changes
// approve ID`" names "quittance changes approve").
func TestEveryCommandInCLIMd(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("CLI.md")
	if err != nil {
		t.Fatal(err)
	}
	root := newRootCommand(func(string) string { return "" }, io.Discard, io.Discard)
	var (
		missing []string
		checked int
		walk    func(c *cobra.Command)
	)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			if sub.Runnable() {
				checked++
				path := sub.CommandPath()
				if !strings.Contains(string(doc), "`"+path+" ") && !strings.Contains(string(doc), "`"+path+"`") {
					missing = append(missing, path)
				}
			}
			walk(sub)
		}
	}
	walk(root)
	if len(missing) > 0 {
		t.Errorf("CLI.md does not name these commands (as a code span starting with the command):\n  %s", strings.Join(missing, "\n  "))
	}
	if checked < 30 {
		t.Fatalf("only %d commands found: the walk is broken", checked)
	}
}
