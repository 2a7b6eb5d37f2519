package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
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
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/audit"
)

// maxPackBytes bounds the evidence pack file verify-pack reads.
const maxPackBytes = 64 << 20

// errPackBroken is returned when an evidence pack does not verify.
var errPackBroken = errors.New("verification failed: the evidence pack does not verify (see above)")

func newEvidencePackCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	var outFile string
	cmd := &cobra.Command{
		Use:   "evidence-pack ID [-o FILE]",
		Short: "Download a delegation's evidence pack, one JSON file for auditors (finance, on-call)",
		Long: "evidence-pack fetches GET /v1/delegations/{id}/evidence-pack: the delegation's hash-chained events, " +
			"every stored token, the org's keys in force when each was accepted and the ledger's public keys. " +
			"It is written to FILE (default stdout); quittance verify-pack FILE checks it offline.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := uuid.Parse(args[0]); err != nil {
				return usageError{fmt.Errorf("ID must be a delegation id (a UUID)")}
			}
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			var pack json.RawMessage
			if err := c.call(cmd.Context(), http.MethodGet, "/v1/delegations/"+url.PathEscape(args[0])+"/evidence-pack", nil, nil, &pack); err != nil {
				return err
			}
			if outFile == "" || outFile == "-" {
				return printJSON(stdout, pack)
			}
			var buf bytes.Buffer
			if err := printJSON(&buf, pack); err != nil {
				return err
			}
			return os.WriteFile(outFile, buf.Bytes(), 0o644)
		},
	}
	cmd.Flags().StringVarP(&outFile, "output", "o", "", "file to write the pack to (default stdout)")
	return cmd
}

func newVerifyPackCommand(stdout io.Writer) *cobra.Command {
	var (
		ledgerJWKSFile string
		opts           packOptions
	)
	cmd := &cobra.Command{
		Use:   "verify-pack FILE",
		Short: "Verify an evidence pack offline: no database, no network",
		Long: "verify-pack checks an evidence pack (quittance evidence-pack) on its own: the hash chain and its links up to " +
			"the pack's head, that no event is dated more than --event-time-slack before the one before it, that the " +
			"delegation it describes is the one its events record, that the token list is the events' evidence, every " +
			"token's signature, as the kind it was accepted as, against the org's keys in force when it was accepted (each key's RFC 7638 thumbprint " +
			"recomputed), with its claims correlated with the delegation its events record, and that every discharge resting " +
			"on a token stores it (as verify-chain checks them), and the ledger's signed checkpoints in the pack: their " +
			"signatures, that the delegation's and the org's streams still reach the heads they signed, so a tail cut off " +
			"with its head is a break, and that no event is dated more than --checkpoint-time-slack before a checkpoint that did " +
			"not include it (appended later, backdated). The checkpoints " +
			"prove something only if the key that signed them is the ledger's: pin it with --ledger-key-thumbprint T (the " +
			"RFC 7638 thumbprint quittance ledger-keys prints, obtained apart from the pack) or --ledger-jwks FILE (keys the " +
			"auditor holds); a checkpoint signed by another key is then a break. Unpinned, the pack's own ledger_jwks are used " +
			"and the output says so, with the thumbprint to compare. --checkpoints DIR adds the checkpoints exported there " +
			"(quittance checkpoints export), so that a pack cut back to an earlier head, with that head's checkpoint, is a " +
			"break too. A pack whose stream no checkpoint signs proves nothing about where the stream ended and is a break " +
			"unless --allow-unanchored is given. It prints one line per token, one for the checkpoint, one per ledger key " +
			"that signed one, and a result line, and exits 1 on any break.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pack, err := readPack(args[0])
			if err != nil {
				return err
			}
			opts.ledgerJWKS = []byte(pack.LedgerJWKS)
			if ledgerJWKSFile != "" {
				if opts.ledgerJWKS, err = os.ReadFile(ledgerJWKSFile); err != nil {
					return fmt.Errorf("--ledger-jwks: %w", err)
				}
				opts.jwksPinned = true
			}
			for _, tp := range opts.thumbprints {
				if !isThumbprint(tp) {
					return usageError{fmt.Errorf("--ledger-key-thumbprint %q is not an RFC 7638 thumbprint (43 base64url characters)", tp)}
				}
			}
			if opts.checkpointsDir != "" {
				if opts.exported, err = exportedCheckpoints(opts.checkpointsDir); err != nil {
					return usageError{fmt.Errorf("--checkpoints: %w", err)}
				}
			}
			if opts.slack < 0 || opts.checkpointSlack < 0 {
				return usageError{errors.New("--event-time-slack and --checkpoint-time-slack must not be negative")}
			}
			lines, problems := verifyPack(pack, opts)
			for _, l := range lines {
				fmt.Fprintln(stdout, l)
			}
			if len(problems) > 0 {
				for _, p := range problems {
					fmt.Fprintf(stdout, "BROKEN\t%s\t%s\n", pack.Delegation.ID, p)
				}
				return errPackBroken
			}
			fmt.Fprintf(stdout, "ok\t%s\t%d events\t%d tokens\n", pack.Delegation.ID, len(pack.Events), len(pack.Tokens))
			return nil
		},
	}
	cmd.Flags().StringVar(&ledgerJWKSFile, "ledger-jwks", "", "verify the checkpoints with the ledger's public keys in this file (its /.well-known/jwks.json, kept apart) instead of those in the pack")
	cmd.Flags().StringArrayVar(&opts.thumbprints, "ledger-key-thumbprint", nil, "the RFC 7638 thumbprint of the ledger's signing key (quittance ledger-keys): a checkpoint signed by any other key is a break (repeat for several keys)")
	cmd.Flags().StringVar(&opts.checkpointsDir, "checkpoints", "", "also check against the checkpoints exported to this directory (quittance checkpoints export --dir)")
	cmd.Flags().BoolVar(&opts.allowUnanchored, "allow-unanchored", false, "accept a pack whose stream no checkpoint signs (the chain then proves only a consistent prefix)")
	cmd.Flags().DurationVar(&opts.slack, "event-time-slack", ledger.EventTimeSlack,
		"an event dated more than this before the event before it is a break")
	cmd.Flags().DurationVar(&opts.checkpointSlack, "checkpoint-time-slack", audit.CheckpointTimeSlack,
		"an event dated more than this before a checkpoint that did not include it is a break (a transaction held open longer keeps events out of the checkpoints signed meanwhile)")
	return cmd
}

// maxLedgerJWKSBytes bounds the ledger JWK Set ledger-keys reads.
const maxLedgerJWKSBytes = 1 << 20

func newLedgerKeysCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	var jwksFile string
	cmd := &cobra.Command{
		Use:   "ledger-keys [--jwks FILE]",
		Short: "Print the kid and RFC 7638 thumbprint of each of the ledger's public keys",
		Long: "ledger-keys prints one line per key of the ledger's public JWK Set: its kid and its RFC 7638 thumbprint, " +
			"what verify-pack --ledger-key-thumbprint pins. It reads QUITTANCE_URL's /.well-known/jwks.json (public: no " +
			"token), or FILE (--jwks) offline. Publish the thumbprint where the auditor reads it apart from any evidence " +
			"pack: a pack carries keys of its own, which vouch for nothing.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var raw []byte
			if jwksFile != "" {
				b, err := os.ReadFile(jwksFile)
				if err != nil {
					return fmt.Errorf("--jwks: %w", err)
				}
				raw = b
			} else {
				b, err := fetchLedgerJWKS(cmd.Context(), getenv)
				if err != nil {
					return err
				}
				raw = b
			}
			var set struct {
				Keys []json.RawMessage `json:"keys"`
			}
			if err := json.Unmarshal(raw, &set); err != nil || len(set.Keys) == 0 {
				return errors.New("the ledger's JWKS is not a JWK Set with keys")
			}
			for i, k := range set.Keys {
				var id struct {
					KeyID string `json:"kid"`
				}
				_ = json.Unmarshal(k, &id)
				tp, err := ledger.JWKThumbprint(k)
				if err != nil {
					return fmt.Errorf("the ledger's key %d: %w", i, err)
				}
				fmt.Fprintf(stdout, "kid %s\tthumbprint %s\n", id.KeyID, tp)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&jwksFile, "jwks", "", "read the ledger's JWK Set from this file instead of QUITTANCE_URL")
	return cmd
}

// fetchLedgerJWKS reads the ledger's public JWK Set from QUITTANCE_URL,
// which serves it to anyone: no token is needed.
func fetchLedgerJWKS(ctx context.Context, getenv func(string) string) ([]byte, error) {
	base := strings.TrimRight(getenv("QUITTANCE_URL"), "/")
	if base == "" {
		base = defaultURL
	}
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageError{fmt.Errorf("QUITTANCE_URL %q is not an http(s) URL", base)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/.well-known/jwks.json", nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET /.well-known/jwks.json: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /.well-known/jwks.json: HTTP %d", resp.StatusCode)
	}
	return io.ReadAll(io.LimitReader(resp.Body, maxLedgerJWKSBytes))
}

// packOptions are how verify-pack is told what to trust beyond the pack.
type packOptions struct {
	// ledgerJWKS are the keys the checkpoints are verified with: the
	// pack's own, or the auditor's (jwksPinned).
	ledgerJWKS []byte
	jwksPinned bool
	// thumbprints, when given, are the only ledger keys a checkpoint may
	// be signed by.
	thumbprints []string
	// checkpointsDir and exported are the auditor's exported checkpoints.
	checkpointsDir string
	exported       []string
	// allowUnanchored accepts a pack no checkpoint anchors.
	allowUnanchored bool
	// slack is how much earlier than what it follows an event may be
	// dated (ledger.EventTimeSlack unless --event-time-slack);
	// checkpointSlack how much earlier than a checkpoint that did not
	// include it (audit.CheckpointTimeSlack unless --checkpoint-time-slack).
	slack, checkpointSlack time.Duration
}

// pinned says how the ledger's key was pinned, or "" when it was not.
func (o packOptions) pinned() string {
	switch {
	case len(o.thumbprints) > 0:
		return "--ledger-key-thumbprint"
	case o.jwksPinned:
		return "--ledger-jwks"
	}
	return ""
}

// isThumbprint says whether s looks like an RFC 7638 SHA-256 thumbprint
// in base64url without padding, as JWKThumbprint writes it.
func isThumbprint(s string) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && len(b) == sha256.Size
}

// exportedCheckpoints lists the checkpoint files in dir, as quittance
// checkpoints export writes them.
func exportedCheckpoints(dir string) ([]string, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(dir, "checkpoint-*.jws"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%s holds no exported checkpoint (checkpoint-*.jws)", dir)
	}
	return paths, nil
}

// readPack reads an evidence pack strictly: a member the format does not
// have is refused, so nothing can ride along unchecked.
func readPack(path string) (audit.EvidencePack, error) {
	f, err := os.Open(path)
	if err != nil {
		return audit.EvidencePack{}, err
	}
	defer f.Close()
	dec := json.NewDecoder(io.LimitReader(f, maxPackBytes))
	dec.DisallowUnknownFields()
	var pack audit.EvidencePack
	if err := dec.Decode(&pack); err != nil {
		return audit.EvidencePack{}, fmt.Errorf("%s is not an evidence pack: %v", path, err)
	}
	if dec.More() {
		return audit.EvidencePack{}, fmt.Errorf("%s is not an evidence pack: data after the pack", path)
	}
	return pack, nil
}

// verifyPack checks an evidence pack on its own, trusting only what opts
// pins, and returns one line per verified token, per ledger key and for
// the checkpoint, and every problem found. Unless opts.allowUnanchored, a
// pack whose checkpoint covers none of its events, or that has none, is a
// problem.
func verifyPack(pack audit.EvidencePack, opts packOptions) (lines, problems []string) {
	id, problems, ok := checkPackHeader(pack)
	if !ok {
		return nil, problems
	}
	// The chain: every event of the delegation's stream, linked, up to the head.
	events, broken := packEvents(pack)
	problems = append(problems, broken...)
	if len(problems) > 0 {
		return nil, problems
	}
	problems = append(problems, checkPackChain(pack, events, opts.slack)...)
	problems = append(problems, checkPackDelegation(pack)...)
	problems = append(problems, checkPackTokenList(pack, events)...)
	orgEvents, broken := checkPackOrgKeys(pack, opts.slack)
	problems = append(problems, broken...)
	// Every token, about the delegation its events record.
	if rec, err := recordedDelegation(pack.Events); err == nil {
		tokenLines, broken := checkDelegationTokens(id, rec, pack.LedgerID, pack.Events, pack.OrgKeys, opts.slack)
		lines = append(lines, tokenLines...)
		problems = append(problems, broken...)
	}
	cpLines, broken := checkPackCheckpoints(pack, events, orgEvents, opts)
	lines = append(lines, cpLines...)
	return lines, append(problems, broken...)
}

// checkPackHeader checks the pack's format and the delegation's id,
// stream and compensation key, and returns the delegation's id; ok is
// false when the pack cannot be checked further.
func checkPackHeader(pack audit.EvidencePack) (id uuid.UUID, problems []string, ok bool) {
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	d := pack.Delegation
	switch {
	case pack.Format != audit.EvidencePackFormat && pack.Format != audit.EvidencePackFormatV1:
		fail("format %q is neither %q nor %q", pack.Format, audit.EvidencePackFormat, audit.EvidencePackFormatV1)
		return id, problems, false
	case pack.Format == audit.EvidencePackFormat && pack.Checkpoint != "":
		fail("a pack of format %q has no checkpoint member (its checkpoints are in checkpoints)", pack.Format)
		return id, problems, false
	case pack.Format == audit.EvidencePackFormatV1 && len(pack.Checkpoints) > 0:
		fail("a pack of format %q has no checkpoints member", pack.Format)
		return id, problems, false
	}
	id, err := uuid.Parse(d.ID)
	if err != nil {
		fail("delegation id %q is not a UUID", d.ID)
		return id, problems, false
	}
	if d.Stream != ledger.DelegationStream(id) {
		fail("stream %q is not the delegation's", d.Stream)
	}
	if d.CompensationIdempotencyKey != ledger.CompensationKey(ledger.Delegation{ID: id}) {
		fail("compensation_idempotency_key is not the one derived from the delegation id")
	}
	return id, problems, true
}

// packEvents decodes the pack's events, each of which must belong to the
// delegation's stream; a pack without events is a problem.
func packEvents(pack audit.EvidencePack) (events []ledger.Event, problems []string) {
	d := pack.Delegation
	if len(pack.Events) == 0 {
		return nil, []string{"the pack holds no events"}
	}
	events = make([]ledger.Event, 0, len(pack.Events))
	for _, r := range pack.Events {
		if r.Stream != d.Stream || r.DelegationID != d.ID {
			problems = append(problems, fmt.Sprintf("event %d belongs to %s, not to the delegation", r.StreamSeq, r.Stream))
		}
		e, err := r.Event()
		if err != nil {
			problems = append(problems, fmt.Sprintf("event %d: %v", r.StreamSeq, err))
			continue
		}
		events = append(events, e)
	}
	return events, problems
}

// checkPackChain checks that the events link into one chain (dated
// within slack) that ends at the pack's head.
func checkPackChain(pack audit.EvidencePack, events []ledger.Event, slack time.Duration) (problems []string) {
	if err := ledger.VerifyChainWithin(events, slack); err != nil {
		problems = append(problems, err.Error())
	}
	last := pack.Events[len(pack.Events)-1]
	if pack.Head.StreamSeq != last.StreamSeq || pack.Head.Hash != last.Hash {
		problems = append(problems, fmt.Sprintf("the events end at %d (%s), not at the pack's head %d (%s)", last.StreamSeq, last.Hash, pack.Head.StreamSeq, pack.Head.Hash))
	}
	return problems
}

// checkPackTokenList checks that the token list is exactly the events'
// evidence, each with when it was accepted (a pack made before events
// recorded it gives its event's time).
func checkPackTokenList(pack audit.EvidencePack, events []ledger.Event) []string {
	eventAt := map[int32]time.Time{}
	for _, e := range events {
		eventAt[e.StreamSeq] = e.At
	}
	if !slices.EqualFunc(audit.PackTokens(events), pack.Tokens, func(a, b audit.PackToken) bool {
		return a.StreamSeq == b.StreamSeq && a.EventType == b.EventType && a.Token == b.Token &&
			(a.AcceptedAt.Equal(b.AcceptedAt) || b.AcceptedAt.Equal(eventAt[a.StreamSeq]))
	}) {
		return []string{"the tokens listed are not the tokens stored on the events"}
	}
	return nil
}

// checkPackOrgKeys checks the org keys the tokens are verified against:
// each is the delegation's org's, and the org's stream, a chain of its
// own, adds each key when it came into force and removes it where it
// ends. It returns the org's events.
func checkPackOrgKeys(pack audit.EvidencePack, slack time.Duration) (orgEvents []ledger.Event, problems []string) {
	fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	d := pack.Delegation
	for i, k := range pack.OrgKeys {
		if k.OrgID != d.OrgID {
			fail("org key %d (%s) belongs to org %q, not %q", i, k.KeyID, k.OrgID, d.OrgID)
		}
	}
	orgStream := "org:" + d.OrgID
	orgEvents = make([]ledger.Event, 0, len(pack.OrgEvents))
	for _, r := range pack.OrgEvents {
		e, err := r.Event()
		if err != nil || r.Stream != orgStream {
			fail("org event %d is not an event of %s", r.StreamSeq, orgStream)
			continue
		}
		orgEvents = append(orgEvents, e)
	}
	if len(orgEvents) > 0 {
		if err := ledger.VerifyChainWithin(orgEvents, slack); err != nil {
			fail("the org's stream: %v", err)
		}
	}
	for _, p := range ledger.CheckOrgKeys(pack.OrgKeys, orgEvents, false) {
		fail("org key history: %s", p)
	}
	return orgEvents, problems
}

// checkPackCheckpoints verifies the pack's checkpoints, and those the
// auditor exported (opts.exported: the files of --checkpoints DIR, read one
// at a time), and compares the delegation's and the org's streams
// with the heads they signed: each stream's signed head is the one in the
// latest checkpoint listing it. The chain alone proves only a consistent
// prefix; a signed head says how far the stream reached when it was
// signed. Events after it are not covered (the line says how many). The
// pack alone cannot show that no later checkpoint lists the stream; the
// exported checkpoints can, so a pack cut back to an earlier head and
// shipped with that head's checkpoint is a break against them. A pack
// whose delegation stream no checkpoint signs is anchored by nothing:
// whoever cut its tail, head and all, could also have dropped the
// checkpoint, so that is a problem unless opts.allowUnanchored.
//
// A checkpoint is only as good as the key that signed it: anyone can make
// up a pack and sign its checkpoints with a key of their own. So the lines
// name each signing key by its RFC 7638 thumbprint (a kid is whatever the
// signer chose) and say whether it was pinned; a checkpoint signed by a key
// the auditor did not pin (opts.thumbprints) is a problem.
func checkPackCheckpoints(pack audit.EvidencePack, events, orgEvents []ledger.Event, opts packOptions) (lines, problems []string) {
	d := pack.Delegation
	orgStream := "org:" + d.OrgID
	unanchored := func(line string) ([]string, []string) {
		lines = append(lines, line)
		if opts.allowUnanchored {
			return lines, problems
		}
		return lines, append(problems, "nothing signed says where the stream ended (fetch the pack again after the next checkpoint, "+
			"or give --allow-unanchored to accept the chain as a prefix)")
	}
	tokens := packCheckpointTokens(pack)
	if len(tokens) == 0 && len(opts.exported) == 0 {
		return unanchored(fmt.Sprintf("checkpoint\t%s\tnone in the pack: the chain verifies, but nothing signed says where it ended", d.ID))
	}
	if len(opts.ledgerJWKS) == 0 {
		return nil, []string{"the pack has a checkpoint but no ledger keys to verify it (give --ledger-jwks)"}
	}
	cps := &packCheckpointSet{pack: pack, opts: opts, byID: map[int64]verifiedCheckpoint{}}
	for i, t := range tokens {
		cps.add(fmt.Sprintf("the pack's checkpoint %d", i+1), t)
	}
	for _, path := range opts.exported {
		b, err := os.ReadFile(path)
		if err != nil {
			cps.problems = append(cps.problems, fmt.Sprintf("read %s: %v", path, err))
			continue
		}
		cps.add(path, strings.TrimSpace(string(b)))
	}
	problems = cps.problems
	byID := cps.byID
	heads := audit.SignedHeads{}
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		heads.Add(byID[id].payload)
	}
	lines = append(lines, ledgerKeyLines(d.ID, byID, opts)...)
	// No event may be dated before a checkpoint that did not include it:
	// one appended at the tail with a backdated time links like any other.
	signedPayloads := make([]audit.CheckpointPayload, 0, len(byID))
	for _, cp := range byID {
		signedPayloads = append(signedPayloads, cp.payload)
	}
	problems = append(problems, audit.CheckDatedAfterCheckpoints(d.Stream, events, signedPayloads, opts.checkpointSlack)...)
	for _, p := range audit.CheckDatedAfterCheckpoints(orgStream, orgEvents, signedPayloads, opts.checkpointSlack) {
		problems = append(problems, "the org's stream: "+p)
	}
	// The org's stream must reach its signed head too: its key events
	// cannot have been cut off.
	if h, ok := heads[orgStream]; ok {
		for _, b := range audit.CheckStreams(audit.SignedHeads{orgStream: h}, map[string][]ledger.Event{orgStream: orgEvents}) {
			problems = append(problems, "the org's stream: "+b.Problem)
		}
	}
	h, ok := heads[d.Stream]
	if !ok {
		return unanchored(fmt.Sprintf("checkpoint\t%s\tno checkpoint given signs this stream: none covers any of its %d events", d.ID, len(events)))
	}
	for _, b := range audit.CheckStreams(audit.SignedHeads{d.Stream: h}, map[string][]ledger.Event{d.Stream: events}) {
		problems = append(problems, b.Problem)
	}
	cp := byID[h.Checkpoint]
	lines = append(lines, fmt.Sprintf("checkpoint\t%s\t%d (kid %s, thumbprint %s, %s)\tcovers events 1..%d of %d", d.ID, cp.payload.ID, cp.kid, cp.thumbprint,
		cp.payload.At.UTC().Format("2006-01-02T15:04:05Z"), h.Seq, len(events)))
	return lines, problems
}

// packCheckpointTokens are the checkpoints a pack carries: its
// checkpoints, or a version 1 pack's one checkpoint.
func packCheckpointTokens(pack audit.EvidencePack) []string {
	if pack.Format != audit.EvidencePackFormatV1 {
		return pack.Checkpoints
	}
	if pack.Checkpoint != "" {
		return []string{pack.Checkpoint}
	}
	return nil
}

// verifiedCheckpoint is a checkpoint that verified, with the hash of its
// JWS and the key that signed it.
type verifiedCheckpoint struct {
	payload    audit.CheckpointPayload
	sum        [sha256.Size]byte // of its JWS
	kid        string
	thumbprint string // of the key that signed it
}

// packCheckpointSet is every checkpoint, from the pack and the export, by
// id; the same id twice must be the same checkpoint.
type packCheckpointSet struct {
	pack     audit.EvidencePack
	opts     packOptions
	byID     map[int64]verifiedCheckpoint
	problems []string
}

// add verifies the checkpoint jws (from names where it came from) against
// the ledger's keys, and the pinned thumbprints when there are any, and
// keeps the heads of the delegation's and the org's streams it signs.
func (cps *packCheckpointSet) add(from, jws string) {
	opts, d := cps.opts, cps.pack.Delegation
	p, kid, err := compensation.VerifyCheckpoint(jws, opts.ledgerJWKS, cps.pack.LedgerID)
	if err != nil {
		cps.problems = append(cps.problems, fmt.Sprintf("%s does not verify: %v", from, err))
		return
	}
	tp, err := ledgerKeyThumbprint(opts.ledgerJWKS, kid)
	if err != nil {
		cps.problems = append(cps.problems, fmt.Sprintf("%s: the ledger key %s: %v", from, kid, err))
		return
	}
	if len(opts.thumbprints) > 0 && !slices.Contains(opts.thumbprints, tp) {
		cps.problems = append(cps.problems, fmt.Sprintf("%s (checkpoint %d) is signed by ledger key %s with thumbprint %s, not by the pinned key (--ledger-key-thumbprint %s)",
			from, p.ID, kid, tp, strings.Join(opts.thumbprints, ", ")))
		return
	}
	sum := sha256.Sum256([]byte(jws))
	if other, ok := cps.byID[p.ID]; ok && other.sum != sum {
		cps.problems = append(cps.problems, fmt.Sprintf("%s is checkpoint %d, and differs from the other checkpoint %d given", from, p.ID, p.ID))
		return
	}
	// Only the two streams' heads are kept: an export holds many.
	orgStream := "org:" + d.OrgID
	p.Streams = slices.DeleteFunc(p.Streams, func(h audit.StreamHead) bool { return h.Stream != d.Stream && h.Stream != orgStream })
	cps.byID[p.ID] = verifiedCheckpoint{p, sum, kid, tp}
}

// ledgerKeyLines names each key that signed a checkpoint, by kid and
// thumbprint, and says whether it was pinned.
func ledgerKeyLines(delegationID string, byID map[int64]verifiedCheckpoint, opts packOptions) (lines []string) {
	keys := map[string]string{} // thumbprint → kid, of the keys that signed
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		keys[byID[id].thumbprint] = byID[id].kid
	}
	for _, tp := range slices.Sorted(maps.Keys(keys)) {
		if how := opts.pinned(); how != "" {
			lines = append(lines, fmt.Sprintf("ledger-key\t%s\tkid %s\tthumbprint %s\tpinned (%s)", delegationID, keys[tp], tp, how))
			continue
		}
		lines = append(lines, fmt.Sprintf("ledger-key\t%s\tkid %s\tthumbprint %s\tUNPINNED: the checkpoints verify only against the pack's own "+
			"ledger_jwks, which anyone who made the pack could have made; compare the thumbprint with the ledger's "+
			"(quittance ledger-keys) or give --ledger-key-thumbprint", delegationID, keys[tp], tp))
	}
	return lines
}

// ledgerKeyThumbprint returns the RFC 7638 thumbprint of the key with kid
// in the ledger's JWK Set jwks.
func ledgerKeyThumbprint(jwks []byte, kid string) (string, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(jwks, &set); err != nil {
		return "", fmt.Errorf("ledger JWKS: %w", err)
	}
	for _, k := range set.Keys {
		var id struct {
			KeyID string `json:"kid"`
		}
		if json.Unmarshal(k, &id) == nil && id.KeyID == kid {
			return ledger.JWKThumbprint(k)
		}
	}
	return "", fmt.Errorf("kid %q is not in the ledger's JWKS", kid)
}

// checkPackDelegation checks the pack's description of the delegation
// against what its events record: the creation, the remote task and the
// obligation state the last transition left.
func checkPackDelegation(pack audit.EvidencePack) []string {
	var problems []string
	d := pack.Delegation
	first := pack.Events[0]
	if first.Type != ledger.EventTypeDelegationCreated {
		return []string{fmt.Sprintf("the first event is %s, not %s", first.Type, ledger.EventTypeDelegationCreated)}
	}
	var created ledger.DelegationCreatedData
	if err := json.Unmarshal(first.Data, &created); err != nil {
		return []string{"the delegation_created event's data does not parse"}
	}
	for _, f := range []struct {
		name      string
		pack, got any
	}{
		{"business_operation_id", d.BusinessOperationID, created.BusinessOperationID},
		{"org_id", d.OrgID, created.OrgID},
		{"task_class", d.TaskClass, created.TaskClass},
		{"budget_id", d.BudgetID, created.BudgetID},
		{"amount_minor", d.AmountMinor, created.AmountMinor},
		{"currency", d.Currency, created.Currency},
	} {
		if f.pack != f.got {
			problems = append(problems, fmt.Sprintf("delegation %s %v is not the %v its delegation_created event records", f.name, f.pack, f.got))
		}
	}
	if rec, err := recordedDelegation(pack.Events); err != nil {
		problems = append(problems, err.Error())
	} else if d.RemoteTaskID != rec.RemoteTaskID {
		problems = append(problems, fmt.Sprintf("delegation remote_task_id %q is not the %q its events record", d.RemoteTaskID, rec.RemoteTaskID))
	}
	state := ledger.ObligationHeld
	for _, r := range pack.Events {
		if r.ObligationTo != "" {
			state = r.ObligationTo
		}
	}
	if d.ObligationState != state {
		problems = append(problems, fmt.Sprintf("delegation obligation_state %s is not the %s its events leave", d.ObligationState, state))
	}
	return problems
}
