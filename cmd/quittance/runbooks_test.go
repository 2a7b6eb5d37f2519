package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// runbookDir holds the on-call runbooks, one per alert.
const runbookDir = "../../dashboards/runbooks"

// inlineCommand is a `quittance …` code span in a runbook's prose.
var inlineCommand = regexp.MustCompile("`(quittance [^`]+)`")

// commandLine is a quittance command line a runbook names.
type commandLine struct {
	line string
	// reference is true for inline code in prose, which may name a
	// command without the arguments it takes (`quittance orgs revoke`).
	reference bool
}

// runbookCommands returns every quittance command line a runbook names: in
// code blocks (indented or fenced) and in inline code, by file.
func runbookCommands(t *testing.T) map[string][]commandLine {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(runbookDir, "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no runbooks in %s: %v", runbookDir, err)
	}
	out := map[string][]commandLine{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fenced := false
		for _, line := range strings.Split(string(b), "\n") {
			trimmed := strings.TrimSpace(line)
			if strings.HasPrefix(trimmed, "```") {
				fenced = !fenced
				continue
			}
			code := fenced || strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t")
			if code && strings.HasPrefix(trimmed, "quittance ") {
				out[filepath.Base(f)] = append(out[filepath.Base(f)], commandLine{line: trimmed})
				continue
			}
			for _, m := range inlineCommand.FindAllStringSubmatch(line, -1) {
				out[filepath.Base(f)] = append(out[filepath.Base(f)], commandLine{line: m[1], reference: true})
			}
		}
	}
	return out
}

// shellWords splits a command line as a POSIX shell would for the simple
// lines runbooks hold: words separated by blanks, single and double quotes.
func shellWords(line string) ([]string, bool) {
	var words []string
	var cur strings.Builder
	inWord, quote := false, byte(0)
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, quote == 0
}

// checkCommandLine reports why args (without the leading "quittance") do
// not name an existing command with existing flags and acceptable
// arguments, or "" when they do. It runs the line with --help, which fails
// on an unknown command or flag, and checks what --help does not: that a
// group is not given an unknown subcommand and, unless the line is only a
// reference to the command, that the positional arguments fit it.
func checkCommandLine(args []string, reference bool) string {
	var stdout, stderr bytes.Buffer
	getenv := func(string) string { return "" }
	if err := run(context.Background(), append(append([]string{}, args...), "--help"), getenv, &stdout, &stderr); err != nil {
		return "--help fails: " + err.Error()
	}
	root := newRootCommand(getenv, &stdout, &stderr)
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err.Error()
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return err.Error()
	}
	positional := cmd.Flags().Args()
	if !cmd.Runnable() {
		if len(positional) > 0 {
			return "unknown subcommand " + positional[0] + " of " + cmd.CommandPath()
		}
		return cmd.CommandPath() + " is a group, not a command"
	}
	if cmd.Args != nil && !(reference && len(positional) == 0) {
		if err := cmd.Args(cmd, positional); err != nil {
			return err.Error()
		}
	}
	return ""
}

// TestRunbookCommandsExist: every `quittance …` command line a runbook
// tells on-call to run names a command, subcommand and flags that exist,
// with arguments the command accepts.
func TestRunbookCommandsExist(t *testing.T) {
	t.Parallel()
	total := 0
	for file, lines := range runbookCommands(t) {
		for _, l := range lines {
			total++
			words, ok := shellWords(l.line)
			if !ok || len(words) < 2 || words[0] != "quittance" {
				t.Errorf("%s: cannot parse %q", file, l.line)
				continue
			}
			if why := checkCommandLine(words[1:], l.reference); why != "" {
				t.Errorf("%s: %q: %s", file, l.line, why)
			}
		}
	}
	if total < 20 {
		t.Errorf("only %d command lines found in the runbooks", total)
	}
}

// argKinds names what the positional arguments of the commands runbooks
// show with a placeholder identify, by command path, so a runbook that uses
// one placeholder for two kinds of id (`write-off ID` then `write-offs
// approve ID`, which takes the write-off's id, not the delegation's) fails.
var argKinds = map[string][]string{
	"quittance delegations show":                  {"delegation"},
	"quittance delegations resolve-dispatch":      {"delegation"},
	"quittance delegations write-off-remote-task": {"delegation", "remote task"},
	"quittance delegations redrive-remote-task":   {"delegation", "remote task"},
	"quittance compensation redrive":              {"delegation"},
	"quittance write-off":                         {"delegation"},
	"quittance evidence-pack":                     {"delegation"},
	"quittance write-offs approve":                {"write-off"},
	"quittance write-offs reject":                 {"write-off"},
	"quittance changes approve":                   {"pending change"},
	"quittance orgs show":                         {"org"},
	"quittance orgs revoke":                       {"org"},
	"quittance orgs register":                     {"org"},
	"quittance orgs update":                       {"org"},
	"quittance orgs keys set":                     {"org"},
	"quittance orgs keys show":                    {"org"},
	"quittance orgs keys refresh":                 {"org"},
	"quittance orgs keys history":                 {"org"},
	"quittance task-classes show":                 {"task class"},
	"quittance task-classes set":                  {"task class"},
}

// placeholder is an argument a reader substitutes: an upper-case word such
// as ID or WRITE_OFF_ID, or a shell variable.
var placeholder = regexp.MustCompile(`^\$?\{?[A-Z][A-Z0-9_]*\}?$`)

// placeholderClashes reports each placeholder that lines (one runbook's)
// use for arguments of two different kinds, and each placeholder argument
// of a command argKinds does not describe.
func placeholderClashes(lines []commandLine) []string {
	var problems []string
	kindOf := map[string]string{} // placeholder → kind
	firstUse := map[string]string{}
	for _, l := range lines {
		words, ok := shellWords(l.line)
		if !ok || len(words) < 2 {
			continue
		}
		var stdout, stderr bytes.Buffer
		cmd, rest, err := newRootCommand(func(string) string { return "" }, &stdout, &stderr).Find(words[1:])
		if err != nil || cmd.ParseFlags(rest) != nil {
			continue // TestRunbookCommandsExist reports it
		}
		for i, arg := range cmd.Flags().Args() {
			if !placeholder.MatchString(arg) {
				continue
			}
			kinds := argKinds[cmd.CommandPath()]
			if i >= len(kinds) {
				problems = append(problems, fmt.Sprintf("%q: say in argKinds what argument %d of %s identifies", l.line, i+1, cmd.CommandPath()))
				continue
			}
			switch k, seen := kindOf[arg]; {
			case !seen:
				kindOf[arg], firstUse[arg] = kinds[i], l.line
			case k != kinds[i]:
				problems = append(problems, fmt.Sprintf("%s names a %s in %q but a %s in %q: give each kind of id its own placeholder", arg, k, firstUse[arg], kinds[i], l.line))
			}
		}
	}
	return problems
}

// TestRunbookPlaceholders: within a runbook, one placeholder stands for one
// kind of id, so following the commands literally never passes a
// delegation's id where a write-off's (or an org's) is expected.
func TestRunbookPlaceholders(t *testing.T) {
	t.Parallel()
	for file, lines := range runbookCommands(t) {
		for _, p := range placeholderClashes(lines) {
			t.Errorf("%s: %s", file, p)
		}
	}
	clash := placeholderClashes([]commandLine{
		{line: `quittance write-off ID --reason "x"`},
		{line: "quittance write-offs approve ID"},
	})
	if len(clash) != 1 || !strings.Contains(clash[0], "write-off") {
		t.Errorf("write-off ID then write-offs approve ID: %q, want one clash", clash)
	}
	if p := placeholderClashes([]commandLine{{line: "quittance orgs show ORG"}, {line: "quittance orgs revoke ORG --reason x"}, {line: "quittance task-classes show procurement"}}); len(p) != 0 {
		t.Errorf("one placeholder for one kind: %q", p)
	}
	if p := placeholderClashes([]commandLine{{line: "quittance revoked-releases acknowledge ID --note x"}}); len(p) != 1 {
		t.Errorf("a command argKinds does not describe: %q, want it reported", p)
	}
}

// TestRunbookCommandCheckFails: the check refuses what does not exist.
func TestRunbookCommandCheckFails(t *testing.T) {
	t.Parallel()
	for _, line := range []string{
		"quittance redrive ID",
		"quittance orgs unregister ORG",
		"quittance orgs keys rotate ORG",
		"quittance write-off ID --reason x --force",
		"quittance obligations list --since 1d",
		"quittance delegations show",
		"quittance sweep now",
		"quittance orgs",
	} {
		words, _ := shellWords(line)
		if checkCommandLine(words[1:], false) == "" {
			t.Errorf("%q passes the check", line)
		}
	}
	for _, line := range []string{
		`quittance write-off ID --reason "a reason with spaces" --reference INC-1`,
		"quittance orgs keys set ORG --jwks keys.json",
		"quittance task-classes set procurement --compensation-timeout 96h",
	} {
		words, _ := shellWords(line)
		if why := checkCommandLine(words[1:], false); why != "" {
			t.Errorf("%q: %s", line, why)
		}
	}
	if why := checkCommandLine([]string{"orgs", "revoke"}, true); why != "" {
		t.Errorf("a reference to a command without its arguments: %s", why)
	}
	if checkCommandLine([]string{"orgs", "forget"}, true) == "" {
		t.Error("a reference to an unknown subcommand passes the check")
	}
}
