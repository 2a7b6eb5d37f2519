package main

// Tests that keep the documents honest: the marked walk-throughs run as
// written against the real service, every relative link resolves, every
// citation of ledger/DESIGN.md names one of its sections, and the
// configuration table names exactly what the config struct reads.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode"

	"github.com/quittance/quittance/sql/pgtest"
)

// repoRoot is the repository's root directory: two levels above this
// package, where go.mod declares the module.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !bytes.Contains(mod, []byte("module github.com/quittance/quittance\n")) {
		t.Fatalf("%s is not the repository root (go.mod: %v)", root, err)
	}
	return root
}

// repoFiles lists the repository's files whose names end in one of exts,
// relative to root: the tracked ones and new ones git does not ignore.
// Without git (an exported tree), it walks the tree, skipping hidden and
// node_modules directories.
func repoFiles(t *testing.T, root string, exts ...string) []string {
	t.Helper()
	match := func(name string) bool {
		for _, ext := range exts {
			if strings.HasSuffix(name, ext) {
				return true
			}
		}
		return false
	}
	var files []string
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err == nil {
		for name := range strings.SplitSeq(string(out), "\x00") {
			if name == "" || !match(name) {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, name)); err == nil { // deleted but still in the index
				files = append(files, filepath.ToSlash(name))
			}
		}
		sort.Strings(files)
		return slices.Compact(files)
	}
	t.Logf("git ls-files failed (%v); walking the tree instead", err)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && match(d.Name()) {
			rel, _ := filepath.Rel(root, path)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// proseLines returns a Markdown document's lines outside fenced code
// blocks, with their line numbers; fenced lines come back empty.
func proseLines(md string) []string {
	lines := strings.Split(md, "\n")
	out := make([]string, len(lines))
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
		case fence != "" && strings.HasPrefix(trimmed, fence):
			fence = ""
		case fence == "":
			out[i] = line
		}
	}
	return out
}

var (
	inlineCode = regexp.MustCompile("`[^`]*`")
	// inlineLink matches [text](target) and ![alt](target), with an
	// optional title after the target.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*(<[^>]*>|[^\s)]+)(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*(\S+)`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	heading    = regexp.MustCompile(`^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	urlScheme  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// anchors returns the fragment ids a Markdown document defines, as GitHub
// makes them: each heading's text, lower-cased, without markup, with
// everything but letters, digits, '_', '-' and spaces dropped and spaces
// turned into '-' (repeats get -1, -2, …); and explicit <a id|name>.
func anchors(md string) map[string]bool {
	ids := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(md) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			ids[m[1]] = true
		}
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		text := inlineLink.ReplaceAllStringFunc(m[2], func(link string) string {
			return link[strings.Index(link, "[")+1 : strings.Index(link, "]")]
		})
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_' || r == '-':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			ids[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			ids[slug] = true
		}
		seen[slug]++
	}
	return ids
}

// TestMarkdownLinksResolve checks every relative link of every Markdown file
// in the repository: the file or directory it names exists, and a #fragment
// names a heading (or an explicit anchor) of the Markdown file it points to.
func TestMarkdownLinksResolve(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	files := repoFiles(t, root, ".md")
	if !slices.Contains(files, "README.md") {
		t.Fatalf("README.md is not among the Markdown files found: %v", files)
	}
	anchorCache := map[string]map[string]bool{}
	anchorsOf := func(rel string) (map[string]bool, error) {
		if a, ok := anchorCache[rel]; ok {
			return a, nil
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return nil, err
		}
		anchorCache[rel] = anchors(string(b))
		return anchorCache[rel], nil
	}
	links := 0
	for _, file := range files {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range proseLines(string(b)) {
			line = inlineCode.ReplaceAllString(line, "")
			var targets []string
			for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
				targets = append(targets, strings.Trim(m[1], "<>"))
			}
			if m := refLink.FindStringSubmatch(line); m != nil {
				targets = append(targets, m[1])
			}
			for _, target := range targets {
				if urlScheme.MatchString(target) || strings.HasPrefix(target, "//") {
					continue
				}
				links++
				where := fmt.Sprintf("%s:%d: link %q", file, i+1, target)
				path, frag, _ := strings.Cut(target, "#")
				resolved := file
				if path != "" {
					if strings.HasPrefix(path, "/") {
						t.Errorf("%s: use a path relative to the file, not to the repository", where)
						continue
					}
					resolved = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(file), path)))
					if resolved == ".." || strings.HasPrefix(resolved, "../") {
						t.Errorf("%s: points outside the repository", where)
						continue
					}
					if _, err := os.Stat(filepath.Join(root, resolved)); err != nil {
						t.Errorf("%s: %s does not exist", where, resolved)
						continue
					}
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(resolved, ".md") {
					t.Errorf("%s: a #fragment needs a Markdown target, %s is not one", where, resolved)
					continue
				}
				ids, err := anchorsOf(resolved)
				if err != nil {
					t.Errorf("%s: %v", where, err)
					continue
				}
				if !ids[frag] {
					t.Errorf("%s: %s has no heading or anchor #%s", where, resolved, frag)
				}
			}
		}
	}
	t.Logf("%d relative links in %d Markdown files", links, len(files))
}

// TestAnchorsAreGitHubSlugs checks the fragment ids anchors derives on the
// cases the documents use.
func TestAnchorsAreGitHubSlugs(t *testing.T) {
	t.Parallel()
	md := "# Title\n\n## 2.2 obligation_state\n\n```\n# not a heading\n```\n\n" +
		"## The ledger's identity and `signed` requests\n\n## [Linked](x.md) heading\n\n## Title\n\n<a id=\"custom\"></a>\n"
	got := anchors(md)
	for _, want := range []string{"title", "22-obligation_state", "the-ledgers-identity-and-signed-requests", "linked-heading", "title-1", "custom"} {
		if !got[want] {
			t.Errorf("anchor %q missing from %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Errorf("a line in a code block became an anchor: %v", got)
	}
}

// designCitation matches a citation of the design document by section:
// "ledger/DESIGN.md §2.2", "ledger/DESIGN.md §3, §4", also as the text of
// a Markdown link.
var designCitation = regexp.MustCompile(`ledger/DESIGN\.md\s+((?:§[0-9]+(?:\.[0-9]+)*(?:\s*(?:,|and)\s*)?)+)`)

// designSections returns the section numbers of ledger/DESIGN.md: "2" for
// "## 2. The two lifecycles", "2.2" for "### 2.2 obligation_state".
func designSections(t *testing.T, root string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash("ledger/DESIGN.md")))
	if err != nil {
		t.Fatalf("the repository's design document: %v", err)
	}
	number := regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)*)\.?\s`)
	sections := map[string]bool{}
	for _, line := range proseLines(string(b)) {
		if m := heading.FindStringSubmatch(line); m != nil && len(m[1]) >= 2 {
			if n := number.FindStringSubmatch(m[2]); n != nil {
				sections[n[1]] = true
			}
		}
	}
	return sections
}

// TestDesignCitationsResolve checks that Go and Markdown files cite the
// design as ledger/DESIGN.md, that every section they cite by number
// exists there, and that nothing cites a design document outside the
// repository.
func TestDesignCitationsResolve(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	sections := designSections(t, root)
	if !sections["2.2"] || !sections["8"] {
		t.Fatalf("ledger/DESIGN.md sections %v: §2.2 and §8 are expected", sections)
	}
	// Go comments continue on the next line: join them so a citation split
	// across lines is read whole.
	joinComments := regexp.MustCompile(`\n\s*//\s*`)
	// (Spelt in pieces, so this file does not match itself.)
	bareDesign := regexp.MustCompile(`(?:^|[^/\w])` + "DE" + `SIGN(?:\.md)?\b`)
	sectionRef := regexp.MustCompile(`§([0-9]+(?:\.[0-9]+)*)`)
	cited := 0
	for _, file := range repoFiles(t, root, ".go", ".md") {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, outside := range []string{"../" + "shared", "/work/" + "shared"} {
			if strings.Contains(text, outside) {
				t.Errorf("%s cites %s, which is not part of the repository", file, outside)
			}
		}
		for i, line := range strings.Split(text, "\n") {
			if bareDesign.MatchString(line) {
				t.Errorf("%s:%d: cite the design as ledger/DESIGN.md: %s", file, i+1, strings.TrimSpace(line))
			}
		}
		if strings.HasSuffix(file, ".go") {
			text = joinComments.ReplaceAllString(text, " ")
		}
		for _, m := range designCitation.FindAllStringSubmatch(text, -1) {
			for _, ref := range sectionRef.FindAllStringSubmatch(m[1], -1) {
				cited++
				if !sections[ref[1]] {
					t.Errorf("%s cites ledger/DESIGN.md §%s, which has no such section (it has %v)", file, ref[1], slices.Sorted(maps.Keys(sections)))
				}
			}
		}
		if file == "ledger/DESIGN.md" {
			for _, ref := range sectionRef.FindAllStringSubmatch(text, -1) {
				if !sections[ref[1]] {
					t.Errorf("ledger/DESIGN.md refers to its own §%s, which does not exist", ref[1])
				}
			}
		}
	}
	if cited == 0 {
		t.Fatal("no citation of ledger/DESIGN.md found; the pattern is broken")
	}
}

// markdownTable returns the rows of the first table after the heading
// titled title, each as its cells.
func markdownTable(t *testing.T, md, title string) [][]string {
	t.Helper()
	var rows [][]string
	in := false
	for _, line := range proseLines(md) {
		if m := heading.FindStringSubmatch(line); m != nil {
			if in {
				break
			}
			in = m[2] == title
			continue
		}
		trimmed := strings.TrimSpace(line)
		if !in || !strings.HasPrefix(trimmed, "|") {
			if in && len(rows) > 0 && trimmed != "" {
				break // the table ended
			}
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(trimmed, "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		if strings.Trim(strings.Join(cells, ""), "-: ") == "" {
			continue // the delimiter row
		}
		rows = append(rows, cells)
	}
	if len(rows) < 2 {
		t.Fatalf("no table under the heading %q", title)
	}
	return rows[1:] // without the header row
}

var envName = regexp.MustCompile("`([A-Z][A-Z0-9_]*)`")

// TestConfigurationTableMatchesConfig checks deploy/CONFIGURATION.md's
// service table against the config struct: it names every variable the
// struct reads (its env tags) and no other, each with the struct's default;
// and loadConfig passes exactly those variables to the struct. The client
// table names variables the command reads, and every variable the command
// reads through getenv is in one of the tables.
func TestConfigurationTableMatchesConfig(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "deploy", "CONFIGURATION.md"))
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)

	tags := map[string]string{} // variable → envDefault
	typ := reflect.TypeFor[config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, ok := f.Tag.Lookup("env")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, ",")
		tags[name] = f.Tag.Get("envDefault")
	}
	if len(tags) < 20 {
		t.Fatalf("only %d env tags on config: the reflection is broken", len(tags))
	}
	if got, want := slices.Sorted(slices.Values(variables)), slices.Sorted(maps.Keys(tags)); !slices.Equal(got, want) {
		t.Errorf("loadConfig reads %v, the config struct's tags are %v", got, want)
	}

	documented := map[string]bool{}
	for _, row := range markdownTable(t, md, "The service") {
		names := envName.FindAllStringSubmatch(row[0], -1)
		if len(names) != 1 {
			t.Errorf("service table row %q: the first cell must name one variable", row[0])
			continue
		}
		name := names[0][1]
		if documented[name] {
			t.Errorf("%s is in the service table twice", name)
		}
		documented[name] = true
		def, read := tags[name]
		switch {
		case !read:
			t.Errorf("the service table lists %s, which the config struct does not read", name)
		case def != "" && (len(row) < 2 || !strings.Contains(row[1], "`"+def+"`")):
			t.Errorf("the service table gives %s the default %q; the config struct's is `%s`", name, row[1], def)
		}
	}
	for name := range tags {
		if !documented[name] {
			t.Errorf("the config struct reads %s, which the service table does not list", name)
		}
	}

	// The variables the command reads through getenv.
	var source strings.Builder
	goFiles, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range goFiles {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		source.Write(b)
	}
	// The client and dev variables, and the Go runtime's the binary sets
	// unless they are set (tuneGC).
	clientDocumented := map[string]bool{}
	for _, table := range []string{"The client and `dev`", "The Go runtime"} {
		for _, row := range markdownTable(t, md, table) {
			for _, m := range envName.FindAllStringSubmatch(row[0], -1) {
				clientDocumented[m[1]] = true
				if !strings.Contains(source.String(), `getenv("`+m[1]+`")`) {
					t.Errorf("the table %q lists %s, which the command does not read", table, m[1])
				}
			}
		}
	}
	for _, m := range regexp.MustCompile(`getenv\("([A-Z][A-Z0-9_]*)"\)`).FindAllStringSubmatch(source.String(), -1) {
		if !documented[m[1]] && !clientDocumented[m[1]] {
			t.Errorf("the command reads %s, which deploy/CONFIGURATION.md does not list", m[1])
		}
	}
}

// The walk-throughs set the base URL once, to what make run serves, and
// read the dev token from .quittance/; the test points both at its own
// service. A walk-through that runs an agent of its own in a second
// terminal runs it on walkthroughAgentAddr, which the test points at a free
// port. It changes nothing else.
const (
	walkthroughURL       = "http://127.0.0.1:8080"
	walkthroughURLSet    = "export QUITTANCE_URL=" + walkthroughURL
	walkthroughData      = ".quittance/"
	walkthroughAgentAddr = "127.0.0.1:8091"
	expectPrefix         = "# → "
)

// The markers of a walk-through's blocks. A block after walkthroughStart
// begins a walk-through in a new shell; one after walkthroughContinued is
// pasted next, into the same shell (its variables and functions are
// there); one after walkthroughBackground runs in a second terminal until
// the walk-through ends, and the next block is pasted once it printed its
// "# → " lines.
const (
	walkthroughStart      = "<!-- walkthrough:"
	walkthroughContinued  = "<!-- walkthrough, continued:"
	walkthroughBackground = "<!-- walkthrough, second terminal:"
)

// walkBlock is one shell block of a walk-through.
type walkBlock struct {
	// line is the block's first line in its file (1-based).
	line int
	// background: the block runs in a second terminal.
	background bool
	// text is the block as written.
	text string
}

// expectations returns a block's "# → " lines, without the prefix.
func (b walkBlock) expectations() []string {
	var want []string
	for _, line := range strings.Split(b.text, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), expectPrefix); ok {
			want = append(want, strings.TrimSpace(rest))
		}
	}
	return want
}

// walkthroughs returns the walk-throughs of a Markdown document: each the
// shell blocks that follow a walkthroughStart marker and the continued and
// second-terminal blocks after it.
func walkthroughs(t *testing.T, file, md string) [][]walkBlock {
	t.Helper()
	var chains [][]walkBlock
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		marker := strings.TrimSpace(lines[i])
		start := strings.HasPrefix(marker, walkthroughStart)
		background := strings.HasPrefix(marker, walkthroughBackground)
		if !start && !background && !strings.HasPrefix(marker, walkthroughContinued) {
			continue
		}
		if i+1 >= len(lines) || (strings.TrimSpace(lines[i+1]) != "```sh" && strings.TrimSpace(lines[i+1]) != "```bash") {
			t.Fatalf("%s:%d: a walkthrough marker must be followed by a ```sh block", file, i+1)
		}
		var block []string
		j := i + 2
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			block = append(block, lines[j])
		}
		if j == len(lines) {
			t.Fatalf("%s:%d: the walkthrough block is not closed", file, i+2)
		}
		b := walkBlock{line: i + 3, background: background, text: strings.Join(block, "\n") + "\n"}
		switch {
		case start:
			chains = append(chains, []walkBlock{b})
		case len(chains) == 0:
			t.Fatalf("%s:%d: a continued walk-through block before any %q block", file, i+1, walkthroughStart)
		default:
			chains[len(chains)-1] = append(chains[len(chains)-1], b)
		}
		i = j
	}
	return chains
}

// freeAddr returns a loopback address with a port nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// devService runs `quittance dev` as make run does, in process: on a
// database of the test harness instead of an embedded cluster, with its
// own data directory, and with the service and the demo supplier agent on
// free ports (the service's own, so the agent's pushes reach it). It
// returns the API's base URL and the data directory.
func devService(t *testing.T) (baseURL, dataDir string) {
	t.Helper()
	dev := startDev(t, nil)
	return dev.baseURL, dev.dataDir
}

// devRun is a running `quittance dev` (startDev).
type devRun struct {
	baseURL, dataDir string
	// stdout is everything the command has printed so far.
	stdout *lockedBuffer
}

// startDev runs `quittance dev` as devService does, with the variables of
// extra added to its environment, and returns once it listens.
func startDev(t *testing.T, extra map[string]string) devRun {
	t.Helper()
	dataDir := filepath.Join(t.TempDir(), ".quittance")
	env := map[string]string{
		"DATABASE_URL": pgtest.URL(t), "QUITTANCE_ADDR": freeAddr(t), "QUITTANCE_DATA_DIR": dataDir,
		"QUITTANCE_DEMO_AGENT_ADDR": "127.0.0.1:0", "QUITTANCE_LOG_LEVEL": "warn",
	}
	maps.Copy(env, extra)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr lockedBuffer
	stdout := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"dev"}, func(k string) string { return env[k] }, pw, &stderr)
		pw.Close()
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dev: %v", err)
		}
		if t.Failed() {
			t.Logf("service log:\n%s", stderr.String())
		}
	})
	ready := make(chan string, 1)
	demo := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(stdout, sc.Text())
			if rest, ok := strings.CutPrefix(sc.Text(), "Quittance listening on "); ok {
				ready <- strings.Fields(rest)[0]
			}
			if strings.HasPrefix(sc.Text(), "Demo supplier agent: ") && strings.Contains(sc.Text(), `registered as org "demo-supplier"`) {
				close(demo)
			}
		}
	}()
	var baseURL string
	timeout := time.After(60 * time.Second)
	select {
	case baseURL = <-ready:
	case err := <-done:
		done <- err // for the cleanup, which waits for dev's end
		t.Fatalf("dev stopped before listening: %v\n%s", err, stderr.String())
	case <-timeout:
		t.Fatal("dev did not start within 60s")
	}
	select {
	case <-demo:
	case <-timeout:
		t.Fatalf("dev did not register its demo supplier agent within 60s\n%s", stderr.String())
	}
	for _, name := range []string{devTokenFile, devPostgresURLFile} {
		if _, err := os.Stat(filepath.Join(dataDir, name)); err != nil {
			t.Fatalf("dev wrote no %s: %v", name, err)
		}
	}
	return devRun{baseURL: baseURL, dataDir: dataDir, stdout: stdout}
}

// TestDocWalkthroughs runs every marked walk-through of the repository's
// Markdown files (README.md first) with bash, as written, against one
// running `quittance dev` with its demo supplier agent: the blocks of one
// walk-through in one shell, one after the other, and its second-terminal
// blocks beside it. Each block's "# → " lines must appear, in order, as
// lines of what it prints.
func TestDocWalkthroughs(t *testing.T) {
	t.Parallel()
	var missing []string
	for _, tool := range []string{"bash", "curl", "jq", "openssl", "go", "node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("the walk-throughs need %s on PATH; install them (Debian: apt-get install bash curl jq openssl nodejs npm) and run again",
			strings.Join(missing, ", "))
	}
	root := repoRoot(t)
	type doc struct {
		file   string
		chains [][]walkBlock
	}
	var docs []doc
	for _, file := range repoFiles(t, root, ".md") {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		if chains := walkthroughs(t, file, string(b)); len(chains) > 0 {
			docs = append(docs, doc{file, chains})
		}
	}
	slices.SortStableFunc(docs, func(a, b doc) int {
		switch {
		case a.file == "README.md":
			return -1
		case b.file == "README.md":
			return 1
		}
		return strings.Compare(a.file, b.file)
	})
	if len(docs) == 0 || docs[0].file != "README.md" {
		t.Fatalf("README.md has no walk-through marked %q", walkthroughStart)
	}
	for _, want := range []string{"delegate/A2A.md", "cmd/quittance/internal/httpapi/ORCHESTRATOR.md"} {
		if !slices.ContainsFunc(docs, func(d doc) bool { return d.file == want }) {
			t.Errorf("%s has no walk-through marked %q", want, walkthroughStart)
		}
	}

	baseURL, dataDir := devService(t)
	env := []string{"TMPDIR=" + t.TempDir()}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name == "TMPDIR" || name == "QUITTANCE_URL" || name == "QUITTANCE_TOKEN" || name == "QUITTANCE_TOKEN_FILE" {
			continue
		}
		env = append(env, kv)
	}
	for _, d := range docs {
		for _, chain := range d.chains {
			t.Run(fmt.Sprintf("%s:%d", d.file, chain[0].line), func(t *testing.T) {
				var urls int
				for i, b := range chain {
					if len(b.expectations()) == 0 {
						t.Fatalf("the block at line %d has no %q lines to check", b.line, expectPrefix)
					}
					if i == 0 && b.background {
						t.Fatalf("the block at line %d: a walk-through cannot begin in a second terminal", b.line)
					}
					urls += strings.Count(b.text, walkthroughURL)
				}
				if strings.Count(chain[0].text, walkthroughURLSet+"\n") != 1 || urls != 1 {
					t.Fatalf("the walk-through must set the base URL exactly once, in its first block, with the line %q, and name it nowhere else", walkthroughURLSet)
				}
				rewrite := strings.NewReplacer(walkthroughURL, baseURL, walkthroughData, dataDir+"/",
					walkthroughAgentAddr, freeAddr(t))
				run := slices.Clone(chain)
				for i := range run {
					run[i].text = rewrite.Replace(run[i].text)
				}
				runWalkthrough(t, root, env, run)
			})
		}
	}
}

// walkthroughBound is how long one walk-through may run, second terminals
// included: a hang fails within it.
const walkthroughBound = 5 * time.Minute

// runWalkthrough runs a walk-through's blocks with bash in root, as a
// reader pastes them into one shell (stopping at the first failing
// command), and its second-terminal blocks in shells of their own, each
// stopped when the walk-through ends. It checks each block's output
// against the block's "# → " lines. A failure says which block, how long
// it ran, whether bash had ended by itself (and how) or the test stopped
// it because of the failure, and what the second terminals printed.
func runWalkthrough(t *testing.T, root string, env []string, chain []walkBlock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), walkthroughBound)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", walkthroughDriver(t, dir, chain))
	cmd.Dir, cmd.Env = root, env
	// Commands the block started may outlive a killed bash; stop waiting
	// for their output then.
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("run bash: %v", err)
	}
	lines := scanLines(out, &stdout)
	var (
		terminals  []secondTerminal
		blockStart = time.Now()
		bashEnded  bool // bash closed its output: it exited by itself
	)
	fail := func(format string, args ...any) {
		t.Helper()
		timedOut := ctx.Err() != nil
		cancel()
		for range lines {
		}
		how := bashEnd(cmd.Wait(), timedOut, bashEnded)
		t.Fatalf("%s, after %s in that block (%s)\nstdout:\n%s\nstderr:\n%s%s", fmt.Sprintf(format, args...),
			time.Since(blockStart).Round(time.Millisecond), how, stdout.String(), stderr.String(), secondTerminalsOutput(terminals))
	}
	n := 0 // the foreground block being run
	for i := 0; i < len(chain); i++ {
		b := chain[i]
		blockStart = time.Now()
		var got []string
		for done := false; !done; {
			select {
			case line, ok := <-lines:
				switch {
				case !ok:
					bashEnded = true
					fail("the walk-through stopped in the block at line %d", b.line)
				case line == blockDone(n):
					done = true
				default:
					got = append(got, line)
				}
			case <-ctx.Done():
				fail("the block at line %d did not finish in time: it had printed %d lines, its next expected line %q not among them",
					b.line, len(got), unseen(b.expectations(), got))
			}
		}
		if missing := unseen(b.expectations(), got); missing != "" {
			fail("the block at line %d printed no line %q where expected", b.line, missing)
		}
		// Second terminals opened after this block run before the next one.
		for i+1 < len(chain) && chain[i+1].background {
			i++
			terminals = append(terminals, runSecondTerminal(t, ctx, root, env, chain[i]))
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("go-%d", n)), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		n++
	}
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("bash: %v\nstderr:\n%s", err, stderr.String())
	}
	t.Logf("%d blocks checked", len(chain))
}

// scanLines sends each line r gives on the channel it returns, after
// adding it to all, and closes the channel at the end of r.
func scanLines(r io.Reader, all *lockedBuffer) <-chan string {
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			all.Write([]byte(sc.Text() + "\n"))
			lines <- sc.Text()
		}
	}()
	return lines
}

// bashEnd says how a walk-through's bash ended, err being what Wait
// returned: at the walk-through's bound, by itself (it had closed its
// output), or stopped by the test after a failed check, whose "signal:
// killed" is then the test's doing, not a timeout.
func bashEnd(err error, timedOut, ended bool) string {
	switch {
	case timedOut:
		return fmt.Sprintf("bash stopped at the walk-through's %s bound: %v", walkthroughBound, err)
	case ended:
		return fmt.Sprintf("bash exited by itself: %v", err)
	}
	return fmt.Sprintf("bash was still running; the test stopped it because of this failure: %v", err)
}

// walkthroughDriver writes the foreground blocks of chain to files in dir
// and returns the bash script that runs them: it sources each block in
// turn and, after it, prints blockDone and waits until the test creates
// dir/go-<n>: by then the test checked the block's output and started the
// second terminals that come next.
func walkthroughDriver(t *testing.T, dir string, chain []walkBlock) string {
	t.Helper()
	var driver strings.Builder
	n := 0
	for _, b := range chain {
		if b.background {
			continue
		}
		script := filepath.Join(dir, fmt.Sprintf("block-%d.sh", n))
		if err := os.WriteFile(script, []byte(b.text), 0o600); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&driver, ". %q\nprintf '\\n%s\\n'\nuntil [ -e %q ]; do sleep 0.1; done\n",
			script, blockDone(n), filepath.Join(dir, fmt.Sprintf("go-%d", n)))
		n++
	}
	return driver.String()
}

// blockDone is the line the driver prints after block n.
func blockDone(n int) string { return fmt.Sprintf("@@walkthrough block %d done@@", n) }

// unseen returns the first of want that does not appear, after the ones
// before it, among got; "" when all do.
func unseen(want, got []string) string {
	next := 0
	for _, line := range got {
		if next < len(want) && strings.TrimSpace(line) == want[next] {
			next++
		}
	}
	if next < len(want) {
		return want[next]
	}
	return ""
}

// secondTerminalBound is how long a second terminal may take to print its
// "# → " lines: long enough for go run to build what it runs on a loaded
// machine; shorter than walkthroughBound, so a silent agent fails here.
const secondTerminalBound = 2 * time.Minute

// secondTerminal is a running second-terminal block: its first line and
// everything it printed so far.
type secondTerminal struct {
	line   int
	output *lockedBuffer
}

// secondTerminalsOutput is what the second terminals printed, for a
// failure of the walk-through beside them (an agent's log says what it was
// asked and answered).
func secondTerminalsOutput(terminals []secondTerminal) string {
	var b strings.Builder
	for _, st := range terminals {
		fmt.Fprintf(&b, "\nsecond terminal of line %d:\n%s", st.line, st.output.String())
	}
	return b.String()
}

// runSecondTerminal starts a second-terminal block in a process group of
// its own, waits until it printed its "# → " lines, and stops the group
// (go run and what it runs) when the test ends. It returns the terminal,
// whose output keeps growing while it runs.
func runSecondTerminal(t *testing.T, ctx context.Context, root string, env []string, b walkBlock) secondTerminal {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", b.text)
	cmd.Dir, cmd.Env = root, env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	output := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = output, output
	if err := cmd.Start(); err != nil {
		t.Fatalf("run bash: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
	want := b.expectations()
	ctx, cancel := context.WithTimeout(ctx, secondTerminalBound)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if unseen(want, strings.Split(output.String(), "\n")) == "" {
			return secondTerminal{line: b.line, output: output}
		}
		select {
		case err := <-exited:
			t.Fatalf("the second terminal of line %d ended (%v) before printing %q\n%s", b.line, err,
				unseen(want, strings.Split(output.String(), "\n")), output.String())
		case <-ctx.Done():
			t.Fatalf("the second terminal of line %d did not print %q within %s (go run builds what it runs first)\n%s", b.line,
				unseen(want, strings.Split(output.String(), "\n")), secondTerminalBound, output.String())
		case <-tick.C:
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for the service's logger and the
// test to use at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// readmeMaxLines bounds README.md: it is the front door (what Quittance
// is, the two commands, one walk-through and a map), and everything else
// lives beside what it describes.
const readmeMaxLines = 300

// runbooksDir holds one runbook per alert; the README's map links the
// folder once instead of each runbook.
const runbooksDir = "dashboards/runbooks/"

// TestREADMEIsTheFrontDoor checks that README.md stays at most
// readmeMaxLines lines and that its map links every Markdown document of
// the repository (the runbooks folder once, not each runbook), so a new
// document is reachable from the front door in one click.
func TestREADMEIsTheFrontDoor(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	if n := strings.Count(strings.TrimRight(md, "\n"), "\n") + 1; n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move what is not the front door next to what it describes and link it from the map", n, readmeMaxLines)
	}
	linked := map[string]int{}
	for _, row := range markdownTable(t, md, "Map") {
		for _, m := range inlineLink.FindAllStringSubmatch(row[0], -1) {
			target, _, _ := strings.Cut(strings.Trim(m[1], "<>"), "#")
			target = filepath.ToSlash(filepath.Clean(target))
			if strings.HasSuffix(m[1], "/") {
				target += "/"
			}
			linked[target]++
		}
	}
	for target, n := range linked {
		if n > 1 {
			t.Errorf("the README's map links %s %d times", target, n)
		}
	}
	if linked[runbooksDir] != 1 {
		t.Errorf("the README's map does not link the runbooks folder %s", runbooksDir)
	}
	for _, file := range repoFiles(t, root, ".md") {
		switch {
		case file == "README.md":
		case strings.HasPrefix(file, runbooksDir):
			if linked[file] > 0 {
				t.Errorf("the README's map links the runbook %s; link the folder %s only", file, runbooksDir)
			}
		case linked[file] == 0:
			t.Errorf("the README's map does not link %s: add a row for it", file)
		}
	}
}
