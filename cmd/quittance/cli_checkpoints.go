package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/audit"
)

// checkpointRecord is a checkpoint as the API returns it.
type checkpointRecord struct {
	ID  int64  `json:"id"`
	JWS string `json:"jws"`
}

// newCheckpointsCommand is `quittance checkpoints`: the signed checkpoints
// over every event stream's head (ledger/AUDIT.md).
func newCheckpointsCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "checkpoints", Short: "Signed checkpoints over the head of every event stream"}
	cmd.AddCommand(&cobra.Command{
		Use:   "create",
		Short: "Sign a checkpoint now (on-call)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/checkpoints", nil)
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "latest",
		Short: "Print the newest checkpoint (finance, on-call)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return getAndPrint(cmd, getenv, stdout, "/v1/checkpoints/latest", nil)
		},
	})
	var dir string
	export := &cobra.Command{
		Use:   "export --dir DIR",
		Short: "Write every checkpoint not yet in DIR there, one compact JWS per file (finance, on-call)",
		Long: "export writes each checkpoint as DIR/checkpoint-<id>.jws (its compact JWS, which carries the signed heads). " +
			"Keep DIR where the database's owner cannot write. A checkpoint already in DIR must be served unchanged: " +
			"one that differs, or one missing from the ledger, is reported and export exits 1. " +
			"verify-chain --checkpoint FILE then checks the log against an exported file.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlag("dir", dir); err != nil {
				return err
			}
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			return exportCheckpoints(cmd.Context(), c, dir, stdout)
		},
	}
	export.Flags().StringVar(&dir, "dir", "", "the directory to write the checkpoints to (created if missing)")
	cmd.AddCommand(export)
	return cmd
}

// checkpointFile is the name an exported checkpoint is kept under.
func checkpointFile(id int64) string { return fmt.Sprintf("checkpoint-%012d.jws", id) }

// exportCheckpoints writes every served checkpoint missing from dir, and
// checks that those already there are served unchanged.
func exportCheckpoints(ctx context.Context, c *apiClient, dir string, stdout io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	kept, err := filepath.Glob(filepath.Join(dir, "checkpoint-*.jws"))
	if err != nil {
		return err
	}
	served := map[string]bool{}
	written, problems := 0, 0
	q := url.Values{"limit": {checkpointPage}}
	for {
		var page struct {
			Checkpoints []checkpointRecord `json:"checkpoints"`
			NextAfter   string             `json:"next_after"`
		}
		if err := c.call(ctx, http.MethodGet, "/v1/checkpoints", q, nil, &page); err != nil {
			return err
		}
		for _, cp := range page.Checkpoints {
			name := checkpointFile(cp.ID)
			served[name] = true
			path := filepath.Join(dir, name)
			old, err := os.ReadFile(path)
			switch {
			case err == nil:
				if strings.TrimSpace(string(old)) != cp.JWS {
					fmt.Fprintf(stdout, "CHANGED\t%s\tthe ledger serves checkpoint %d with another content than the exported file\n", path, cp.ID)
					problems++
				}
				continue
			case !errors.Is(err, os.ErrNotExist):
				return err
			}
			if err := os.WriteFile(path, []byte(cp.JWS+"\n"), 0o644); err != nil {
				return fmt.Errorf("write %s: %w", path, err)
			}
			written++
		}
		if page.NextAfter == "" {
			break
		}
		q.Set("after", page.NextAfter)
	}
	for _, path := range kept {
		if !served[filepath.Base(path)] {
			fmt.Fprintf(stdout, "MISSING\t%s\tthe ledger no longer serves this checkpoint\n", path)
			problems++
		}
	}
	fmt.Fprintf(stdout, "exported %d new checkpoint(s) to %s\n", written, dir)
	if problems > 0 {
		return fmt.Errorf("%d exported checkpoint(s) differ from what the ledger serves (see above)", problems)
	}
	return nil
}

// checkpointOptions say what verify-chain checks the streams against.
type checkpointOptions struct {
	// file is an exported checkpoint to check against instead of the
	// latest the service serves; jwksFile the ledger's public keys instead
	// of those it serves at /.well-known/jwks.json.
	file, jwksFile string
	// maxUnanchored is how old an event may be with no checkpoint covering
	// it before that is a break (0: never). The ledger signs one every
	// QUITTANCE_CHECKPOINT_INTERVAL after a stream moved, so an older
	// uncovered event means it signs none, or its checkpoints were removed.
	maxUnanchored time.Duration
	// now is the time maxUnanchored counts back from.
	now time.Time
}

// defaultMaxUnanchored is verify-chain's --max-unanchored-age: ten times
// the default QUITTANCE_CHECKPOINT_INTERVAL.
const defaultMaxUnanchored = 10 * time.Minute

// verifyStreams checks every stream's chain (delegations' aside, which
// verify has checked with their tokens), and every stream against the
// checkpoint: a tail removed or rewritten up to the checkpoint is a break.
// Only one delegation's stream when delegation is set. Breaks are printed
// and counted; only failures to talk to the API are returned.
func (v *verifier) verifyStreams(ctx context.Context, opts checkpointOptions, delegation string, stderr io.Writer) error {
	// The checkpoints are read first: every head they signed was committed
	// before the streams are read below, so a stream shorter than its head
	// lost events; read after, they could sign events appended meanwhile.
	heads, latest, kid, problems, err := v.signedHeads(ctx, opts)
	if err != nil {
		return err
	}
	for _, p := range problems {
		// Reported; the streams are still checked against what was signed.
		v.broken++
		fmt.Fprintf(v.out, "BROKEN\tcheckpoint\t%s\n", p)
	}
	streams, err := v.readStreams(ctx, delegation)
	if err != nil {
		return err
	}
	if latest == nil { // no checkpoint is served, and none was given
		if n := v.reportUnanchored(opts, nil, heads, streams); n == 0 {
			fmt.Fprintln(stderr, "no checkpoint yet: nothing anchors the streams' last events (quittance checkpoints create signs one)")
		}
		return nil
	}
	if delegation != "" {
		want := ledger.DelegationStream(uuid.MustParse(delegation))
		maps.DeleteFunc(heads, func(s string, _ audit.SignedHead) bool { return s != want })
	}
	if opts.file == "" {
		// Against an exported file, later events are uncovered by design;
		// against the latest the ledger serves, old ones must not be.
		v.reportUnanchored(opts, latest, heads, streams)
	}
	for _, b := range audit.CheckStreams(heads, streams) {
		v.broken++
		fmt.Fprintf(v.out, "BROKEN\t%s\t%s\n", b.Stream, b.Problem)
	}
	// An event dated before a checkpoint that did not include it was
	// appended after that checkpoint with a backdated time.
	for _, s := range slices.Sorted(maps.Keys(streams)) {
		for _, p := range v.timeline.Check(s, streams[s], v.checkpointSlack) {
			v.broken++
			fmt.Fprintf(v.out, "BROKEN\t%s\t%s\n", s, p)
		}
	}
	fmt.Fprintf(stderr, "checked against checkpoints 1..%d (the latest signed %s by key %s; %d stream head(s)); events after it are not covered until the next checkpoint\n",
		latest.ID, latest.At.Format("2006-01-02T15:04:05Z07:00"), kid, len(heads))
	return nil
}

// readStreams reads the one delegation's stream when delegation is set,
// else every stream, checking that the feed holds every delegation event
// and checking the chain of every stream but the delegations'.
func (v *verifier) readStreams(ctx context.Context, delegation string) (map[string][]ledger.Event, error) {
	if delegation != "" {
		events, err := v.delegationEvents(ctx, delegation)
		if err != nil {
			return nil, err
		}
		return map[string][]ledger.Event{ledger.DelegationStream(uuid.MustParse(delegation)): events}, nil
	}
	// Each delegation's stream is read from the stream itself before the
	// feed, so every event in it was committed before the feed is read,
	// and must be in the feed too.
	counts, err := v.delegationEventCounts(ctx)
	if err != nil {
		return nil, err
	}
	streams, err := v.allStreams(ctx)
	if err != nil {
		return nil, err
	}
	v.reportMissingFromFeed(counts, streams)
	for _, s := range slices.Sorted(maps.Keys(streams)) {
		if strings.HasPrefix(s, "delegation:") {
			continue // verify checked it, with its tokens
		}
		if err := v.checkStreamChain(ctx, s, streams[s]); err != nil {
			return nil, err
		}
	}
	return streams, nil
}

// checkStreamChain checks the hash chain of stream s and, for an org's
// stream, the key history it records, printing the outcome.
func (v *verifier) checkStreamChain(ctx context.Context, s string, events []ledger.Event) error {
	v.streams++
	if err := ledger.VerifyChain(events); err != nil {
		v.broken++
		fmt.Fprintf(v.out, "BROKEN\t%s\t%v\n", s, err)
		return nil
	}
	orgID, ok := strings.CutPrefix(s, "org:")
	if !ok {
		fmt.Fprintf(v.out, "ok\t%s\t%d events\n", s, len(events))
		return nil
	}
	return v.checkKeyHistory(ctx, s, orgID, events)
}

// reportUnanchored reports as broken every stream with events older than
// opts.maxUnanchored that no checkpoint up to cp (nil: the ledger serves
// none) covers, that is, after the stream's signed head, and returns how
// many streams it reported.
func (v *verifier) reportUnanchored(opts checkpointOptions, cp *audit.CheckpointPayload, heads audit.SignedHeads, streams map[string][]ledger.Event) int {
	if opts.maxUnanchored <= 0 {
		return 0
	}
	cutoff := opts.now.Add(-opts.maxUnanchored)
	names := slices.Sorted(maps.Keys(streams))
	reported := 0
	for _, s := range names {
		var n int
		var oldest ledger.Event
		for _, e := range streams[s] {
			if e.StreamSeq > heads[s].Seq && e.At.Before(cutoff) {
				if n == 0 {
					oldest = e
				}
				n++
			}
		}
		if n == 0 {
			continue
		}
		reported++
		v.broken++
		by := "no checkpoint: the ledger serves none"
		if cp != nil {
			by = fmt.Sprintf("the latest checkpoint (%d, signed %s)", cp.ID, cp.At.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(v.out, "BROKEN\t%s\t%d event(s) older than %s are covered by %s; the oldest is event %d at %s. "+
			"The ledger signs no checkpoints (QUITTANCE_SIGNING_KEY_FILE, QUITTANCE_CHECKPOINTS) or they were removed\n",
			s, n, opts.maxUnanchored, by, oldest.StreamSeq, oldest.At.UTC().Format(time.RFC3339))
	}
	return reported
}

// checkpointPage is how many checkpoints verify-chain and export read per
// request: a checkpoint signs up to audit.DefaultCheckpointSpan heads, a
// few MB with its JWS.
const checkpointPage = "20"

// signedHeads reads the checkpoints the ledger serves, oldest first,
// verifies each one's signature with the ledger's keys and that it follows
// the one before it, and folds them into every stream's signed head;
// latest is the last one folded (nil: none is served). A checkpoint that
// does not verify, or a chain that skips or changed one, is a problem; the
// heads signed so far are still returned. With an exported file, only the
// checkpoints up to it are folded, and the ledger must still serve the
// file's checkpoint unchanged: its previous hash pins every one before it,
// so the served chain up to the file is the one the file was signed after.
func (v *verifier) signedHeads(ctx context.Context, opts checkpointOptions) (heads audit.SignedHeads, latest *audit.CheckpointPayload, kid string, problems []string, err error) {
	ch := &checkpointChain{v: v, keys: &ledgerKeys{v: v, file: opts.jwksFile}, heads: audit.SignedHeads{}}
	if opts.file != "" {
		if err := ch.readFile(ctx, opts.file); err != nil {
			return nil, nil, "", nil, err
		}
	}
	q := url.Values{"limit": {checkpointPage}}
	for {
		var page struct {
			Checkpoints []checkpointRecord `json:"checkpoints"`
			NextAfter   string             `json:"next_after"`
		}
		if err := v.c.call(ctx, http.MethodGet, "/v1/checkpoints", q, nil, &page); err != nil {
			var ae *apiError
			if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
				break // a ledger that makes no checkpoints serves none
			}
			return nil, nil, "", nil, err
		}
		more, err := ch.fold(ctx, page.Checkpoints)
		if err != nil {
			return nil, nil, "", nil, err
		}
		if !more || page.NextAfter == "" {
			break
		}
		q.Set("after", page.NextAfter)
	}
	ch.checkFileServed()
	return ch.heads, ch.latest, ch.kid, ch.problems, nil
}

// ledgerKeys are the ledger's public keys, read from file when set, else
// from /.well-known/jwks.json, once and only when a checkpoint is to be
// verified: a ledger that signs none serves none.
type ledgerKeys struct {
	v    *verifier
	file string
	jwks []byte
}

// verify verifies a checkpoint's JWS; a signature or payload that does
// not verify is a checkpointInvalidError.
func (k *ledgerKeys) verify(ctx context.Context, token string) (audit.CheckpointPayload, string, error) {
	if k.jwks == nil {
		if k.file != "" {
			b, err := os.ReadFile(k.file)
			if err != nil {
				return audit.CheckpointPayload{}, "", usageError{fmt.Errorf("--ledger-jwks: %w", err)}
			}
			k.jwks = b
		} else {
			var raw json.RawMessage
			if err := k.v.c.call(ctx, http.MethodGet, "/.well-known/jwks.json", nil, nil, &raw); err != nil {
				return audit.CheckpointPayload{}, "", err
			}
			k.jwks = raw
		}
	}
	p, kid, err := compensation.VerifyCheckpoint(token, k.jwks, "")
	if err != nil {
		return p, kid, checkpointInvalidError{err}
	}
	return p, kid, nil
}

// checkpointChain is what signedHeads folded so far: the streams' signed
// heads, the last checkpoint (latest, its JWS and key id) and the problems
// found; file is the exported checkpoint checked against, if any.
type checkpointChain struct {
	v        *verifier
	keys     *ledgerKeys
	heads    audit.SignedHeads
	latest   *audit.CheckpointPayload
	prevJWS  string
	kid      string
	problems []string

	file    *audit.CheckpointPayload
	fileJWS string
	fileKID string
}

// readFile reads and verifies the exported checkpoint at path.
func (ch *checkpointChain) readFile(ctx context.Context, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return usageError{fmt.Errorf("--checkpoint: %w", err)}
	}
	ch.fileJWS = strings.TrimSpace(string(b))
	p, k, err := ch.keys.verify(ctx, ch.fileJWS)
	if err != nil {
		return fmt.Errorf("--checkpoint: %w", err)
	}
	ch.file, ch.fileKID = &p, k
	return nil
}

// fold verifies a page of served checkpoints and folds them into the
// chain; it reports false when nothing after the page is to be folded
// (past the exported file, or after a checkpoint that does not verify).
func (ch *checkpointChain) fold(ctx context.Context, recs []checkpointRecord) (bool, error) {
	for _, rec := range recs {
		if ch.file != nil && rec.ID > ch.file.ID {
			return false, nil
		}
		p, k, err := ch.keys.verify(ctx, rec.JWS)
		var invalid checkpointInvalidError
		switch {
		case errors.As(err, &invalid):
			ch.problems = append(ch.problems, fmt.Sprintf("checkpoint %d %v", rec.ID, err))
			return false, nil // nothing after it can be placed in the chain
		case err != nil:
			return false, err
		}
		switch {
		case ch.latest == nil && (p.ID != 1 || p.Previous != ""):
			ch.problems = append(ch.problems, fmt.Sprintf("the first checkpoint served is %d: checkpoints before it are missing", p.ID))
		case ch.latest != nil:
			if err := audit.CheckpointFollows(*ch.latest, ch.prevJWS, p); err != nil {
				ch.problems = append(ch.problems, err.Error())
			}
		}
		if ch.file != nil && p.ID == ch.file.ID && rec.JWS != ch.fileJWS {
			ch.problems = append(ch.problems, fmt.Sprintf("the ledger serves checkpoint %d with another content than the exported file", p.ID))
		}
		ch.heads.Add(p)
		ch.v.timeline.Add(p)
		ch.latest, ch.prevJWS, ch.kid = &p, rec.JWS, k
	}
	return true, nil
}

// checkFileServed reports an exported checkpoint newer than the latest
// the ledger serves (checkpoints were removed) and folds the file in.
func (ch *checkpointChain) checkFileServed() {
	if ch.file == nil || (ch.latest != nil && ch.latest.ID >= ch.file.ID) {
		return
	}
	served := "none"
	if ch.latest != nil {
		served = strconv.FormatInt(ch.latest.ID, 10)
	}
	ch.problems = append(ch.problems, fmt.Sprintf("the ledger's latest checkpoint is %s, older than the exported checkpoint %d: checkpoints were removed", served, ch.file.ID))
	ch.heads.Add(*ch.file)
	ch.v.timeline.Add(*ch.file)
	ch.latest, ch.kid = ch.file, ch.fileKID
}

// delegationEventCounts reads every delegation's stream from the stream
// itself (GET /v1/delegations/{id}/events, which reads the events, not the
// feed) and returns how many events it has, by stream.
func (v *verifier) delegationEventCounts(ctx context.Context) (map[string]int, error) {
	counts := map[string]int{}
	err := v.eachDelegation(ctx, func(id string) error {
		events, err := v.delegationEvents(ctx, id)
		counts["delegation:"+id] = len(events)
		return err
	})
	return counts, err
}

// eachDelegation calls fn with the id of every delegation the ledger
// lists (GET /v1/delegations), page by page, until fn fails.
func (v *verifier) eachDelegation(ctx context.Context, fn func(id string) error) error {
	q := url.Values{"limit": {"500"}}
	for {
		var page struct {
			Delegations []struct {
				ID string `json:"id"`
			} `json:"delegations"`
			NextCursor string `json:"next_cursor"`
		}
		if err := v.c.call(ctx, http.MethodGet, "/v1/delegations", q, nil, &page); err != nil {
			return err
		}
		for _, d := range page.Delegations {
			if err := fn(d.ID); err != nil {
				return err
			}
		}
		if page.NextCursor == "" {
			return nil
		}
		q.Set("cursor", page.NextCursor)
	}
}

// reportMissingFromFeed reports as broken every delegation stream with
// more events, read from the stream itself (counts, read first), than the
// feed serves of it. Checkpoints sign what is in the feed: an event whose
// feed position was removed is in no checkpoint's span, and no check of
// the feed would see it.
func (v *verifier) reportMissingFromFeed(counts map[string]int, streams map[string][]ledger.Event) {
	for _, s := range slices.Sorted(maps.Keys(counts)) {
		if served := len(streams[s]); counts[s] > served {
			v.broken++
			fmt.Fprintf(v.out, "BROKEN\t%s\tthe stream has %d event(s); the event feed serves %d of them: "+
				"an event missing from the feed is in no checkpoint's span (its feed position was removed)\n", s, counts[s], served)
		}
	}
}

// checkpointInvalidError is a checkpoint whose signature or content does
// not verify, as opposed to a failure to read the keys.
type checkpointInvalidError struct{ err error }

func (e checkpointInvalidError) Error() string { return "does not verify: " + e.err.Error() }

// feedHeldBackTimeout bounds how long allStreams waits for events that are
// committed but held back in the feed by an older transaction.
const feedHeldBackTimeout = 2 * time.Minute

// allStreams reads every event committed so far from the feed (finance,
// on-call), by stream, each in stream order. The feed serves an event only
// once every transaction that was writing when it committed has ended
// (ledger/AUDIT.md); while the page says events are held back, it waits
// and reads on, so that nothing committed before the call is missed.
func (v *verifier) allStreams(ctx context.Context) (map[string][]ledger.Event, error) {
	streams := map[string][]ledger.Event{}
	q := url.Values{"limit": {"500"}}
	deadline := time.Now().Add(feedHeldBackTimeout)
	for {
		var page struct {
			Events    []ledger.EventRecord `json:"events"`
			NextAfter string               `json:"next_after"`
			HeldBack  bool                 `json:"held_back"`
		}
		if err := v.c.call(ctx, http.MethodGet, "/v1/events", q, nil, &page); err != nil {
			return nil, err
		}
		for _, r := range page.Events {
			e, err := r.Event()
			if err != nil {
				return nil, fmt.Errorf("event %d: %w", r.Seq, err)
			}
			streams[e.Stream] = append(streams[e.Stream], e)
		}
		if page.NextAfter != "" {
			q.Set("after", page.NextAfter)
		}
		if len(page.Events) > 0 {
			continue
		}
		if !page.HeldBack {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the event feed has held committed events back for %s: a transaction on the database server stays open (see pg_stat_activity)", feedHeldBackTimeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, events := range streams {
		slices.SortFunc(events, func(a, b ledger.Event) int { return int(a.StreamSeq) - int(b.StreamSeq) })
	}
	return streams, nil
}

// delegationEvents reads one delegation's stream.
func (v *verifier) delegationEvents(ctx context.Context, id string) ([]ledger.Event, error) {
	var page struct {
		Events []ledger.EventRecord `json:"events"`
	}
	if err := v.c.call(ctx, http.MethodGet, "/v1/delegations/"+url.PathEscape(id)+"/events", nil, nil, &page); err != nil {
		return nil, err
	}
	events := make([]ledger.Event, 0, len(page.Events))
	for _, r := range page.Events {
		e, err := r.Event()
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", r.Seq, err)
		}
		events = append(events, e)
	}
	return events, nil
}
