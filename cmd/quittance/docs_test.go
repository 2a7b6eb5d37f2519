package main

// Tests that keep the documents honest: the marked walk-throughs run as
// written against the real service, every relative link resolves, every
// citation of ledger/DESIGN.md names one of its sections, and the
// configuration table names exactly what the config struct reads.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
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

	// The client and dev variables: read through getenv by the command.
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
	clientDocumented := map[string]bool{}
	for _, row := range markdownTable(t, md, "The client and `dev`") {
		for _, m := range envName.FindAllStringSubmatch(row[0], -1) {
			clientDocumented[m[1]] = true
			if !strings.Contains(source.String(), `getenv("`+m[1]+`")`) {
				t.Errorf("the client table lists %s, which the command does not read", m[1])
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
// service and changes nothing else.
const (
	walkthroughMarker = "<!-- walkthrough:"
	walkthroughURL    = "http://127.0.0.1:8080"
	walkthroughURLSet = "export QUITTANCE_URL=" + walkthroughURL
	walkthroughData   = ".quittance/"
	expectPrefix      = "# → "
)

// walkthroughs returns the shell blocks of a Markdown document that follow
// a walkthrough marker.
func walkthroughs(t *testing.T, file, md string) []string {
	t.Helper()
	var blocks []string
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(strings.TrimSpace(lines[i]), walkthroughMarker) {
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
		blocks = append(blocks, strings.Join(block, "\n")+"\n")
		i = j
	}
	return blocks
}

// devService runs `quittance dev` as make run does, in process: on a
// database of the test harness instead of an embedded cluster, on a free
// port, with its own data directory and without the demo agent (whose port
// is fixed). It returns the API's base URL and the data directory.
func devService(t *testing.T) (baseURL, dataDir string) {
	t.Helper()
	dataDir = filepath.Join(t.TempDir(), ".quittance")
	env := map[string]string{
		"DATABASE_URL": pgtest.URL(t), "QUITTANCE_ADDR": "127.0.0.1:0", "QUITTANCE_DATA_DIR": dataDir,
		"QUITTANCE_DEMO_AGENT": "off", "QUITTANCE_LOG_LEVEL": "warn",
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var stderr lockedBuffer
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
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "Quittance listening on "); ok {
				ready <- strings.Fields(rest)[0]
			}
		}
	}()
	select {
	case baseURL = <-ready:
	case err := <-done:
		t.Fatalf("dev stopped before listening: %v\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatal("dev did not start within 60s")
	}
	if _, err := os.Stat(filepath.Join(dataDir, devTokenFile)); err != nil {
		t.Fatalf("dev wrote no token file: %v", err)
	}
	return baseURL, dataDir
}

// TestDocWalkthroughs runs every marked walk-through of the repository's
// Markdown files (README.md first) with bash, as written, against one
// running service, and checks that each "# → " line appears, in order, as
// a line of what the block prints.
func TestDocWalkthroughs(t *testing.T) {
	t.Parallel()
	var missing []string
	for _, tool := range []string{"bash", "curl", "jq", "openssl", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("the walk-throughs need %s on PATH; install them (Debian: apt-get install bash curl jq openssl) and run again",
			strings.Join(missing, ", "))
	}
	root := repoRoot(t)
	type doc struct {
		file   string
		blocks []string
	}
	var docs []doc
	for _, file := range repoFiles(t, root, ".md") {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		if blocks := walkthroughs(t, file, string(b)); len(blocks) > 0 {
			docs = append(docs, doc{file, blocks})
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
		t.Fatalf("README.md has no walk-through marked %q", walkthroughMarker)
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
		for i, block := range d.blocks {
			t.Run(fmt.Sprintf("%s#%d", d.file, i+1), func(t *testing.T) {
				if strings.Count(block, walkthroughURLSet+"\n") != 1 || strings.Count(block, walkthroughURL) != 1 {
					t.Fatalf("the block must set the base URL exactly once, with the line %q, and name it nowhere else", walkthroughURLSet)
				}
				script := strings.ReplaceAll(block, walkthroughURL, baseURL)
				script = strings.ReplaceAll(script, walkthroughData, dataDir+"/")
				runWalkthrough(t, root, env, script, block)
			})
		}
	}
}

// runWalkthrough runs script with bash in root, stopping at the first
// failing command, and checks its output against the block's "# → " lines.
func runWalkthrough(t *testing.T, root string, env []string, script, block string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = root
	cmd.Env = env
	// Commands the block started may outlive a killed bash; stop waiting
	// for their output then.
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) || ctx.Err() != nil {
			t.Fatalf("the walk-through failed (%v)\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
		t.Fatalf("run bash: %v", err)
	}
	var want []string
	for _, line := range strings.Split(block, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), expectPrefix); ok {
			want = append(want, strings.TrimSpace(rest))
		}
	}
	if len(want) == 0 {
		t.Fatalf("the block has no %q lines to check", expectPrefix)
	}
	got := strings.Split(stdout.String(), "\n")
	next := 0
	for _, line := range got {
		if next < len(want) && strings.TrimSpace(line) == want[next] {
			next++
		}
	}
	if next < len(want) {
		t.Fatalf("the walk-through printed no line %q after the %d expected before it\nstdout:\n%s\nstderr:\n%s",
			want[next], next, stdout.String(), stderr.String())
	}
	t.Logf("%d expected lines seen", len(want))
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
