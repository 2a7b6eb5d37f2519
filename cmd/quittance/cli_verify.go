package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/audit"
)

// chain is a delegation's event chain as GET /v1/delegations/{id}/evidence
// returns it.
type chain struct {
	DelegationID string               `json:"delegation_id"`
	OrgID        string               `json:"org_id"`
	RemoteTaskID string               `json:"remote_task_id"`
	LedgerID     string               `json:"ledger_id"`
	Events       []ledger.EventRecord `json:"events"`
}

// errChainBroken is returned when any chain or signature failed to verify.
var errChainBroken = errors.New("verification failed: the audit log does not verify (see above)")

func newVerifyChainCommand(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	var (
		delegation string
		cpOpts     checkpointOptions
		slack      time.Duration
		cpSlack    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "verify-chain",
		Short: "Re-verify the audit log's hash chains and every stored signed token",
		Long: "verify-chain fetches each delegation's event chain (or only --delegation's), recomputes every event's " +
			"hash and link, checks that no event is dated more than --event-time-slack before the event before it, " +
			"and re-verifies every stored signed ack or declaration as the kind it was accepted as, against the org's keys in " +
			"force when it was accepted (its key history, not its current keys; its exp judged then), about the org and " +
			"remote task the delegation's own events record (an extra task's receipt: that task), with the event's jti, " +
			"token_sha256 and an ack's idempotency key checked against the token, printing the kid and RFC 7638 thumbprint " +
			"of the key that verified each, its kind and when it was accepted; a discharge that rests on a signed " +
			"token but stores none, or a delegation with no events, is a break. With --delegation it also checks the " +
			"org's stream and key history. It then checks every other stream's chain (orgs, budgets, principals, " +
			"tokens, pending changes, …) and every stream against the latest signed checkpoint (or --checkpoint FILE, an " +
			"exported one), so a tail removed or rewritten up to the checkpoint is a break, as is an event dated more than " +
			"--checkpoint-time-slack before a checkpoint that did not include it; events after it are not covered " +
			"until the next checkpoint. An event older than --max-unanchored-age that the latest checkpoint does not cover " +
			"(or any such event, when the ledger serves no checkpoint) is a break too: the ledger signs one every " +
			"QUITTANCE_CHECKPOINT_INTERVAL, so it signs none or its checkpoints were removed. It prints one line per " +
			"delegation and stream and exits 1 on any break.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if cpOpts.maxUnanchored < 0 {
				return usageError{errors.New("--max-unanchored-age must not be negative")}
			}
			if slack < 0 || cpSlack < 0 {
				return usageError{errors.New("--event-time-slack and --checkpoint-time-slack must not be negative")}
			}
			cpOpts.now = time.Now()
			v := &verifier{c: c, keys: map[string][]ledger.OrgKey{}, out: stdout, slack: slack, checkpointSlack: cpSlack}
			if delegation != "" {
				if _, err := uuid.Parse(delegation); err != nil {
					return usageError{fmt.Errorf("--delegation must be a delegation id (a UUID)")}
				}
				if err := v.verify(ctx, delegation); err != nil {
					return err
				}
				if err := v.verifyOrgOf(ctx, delegation); err != nil {
					return err
				}
			} else if err := v.eachDelegation(ctx, func(id string) error { return v.verify(ctx, id) }); err != nil {
				return err
			}
			if err := v.verifyStreams(ctx, cpOpts, delegation, stderr); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "verified %d delegation(s), %d other stream(s), %d event(s), %d signed token(s); %d broken\n",
				v.delegations, v.streams, v.events, v.tokens, v.broken)
			if v.broken > 0 {
				return errChainBroken
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&delegation, "delegation", "", "verify only this delegation")
	cmd.Flags().StringVar(&cpOpts.file, "checkpoint", "", "check against this exported checkpoint (quittance checkpoints export) instead of the latest the ledger serves")
	cmd.Flags().DurationVar(&cpOpts.maxUnanchored, "max-unanchored-age", defaultMaxUnanchored,
		"an event older than this that the latest checkpoint does not cover is a break (0: only report that none is served)")
	cmd.Flags().DurationVar(&slack, "event-time-slack", ledger.EventTimeSlack,
		"an event of a delegation (or, with --delegation, of its org) dated more than this before the event before it in its stream is a break")
	cmd.Flags().DurationVar(&cpSlack, "checkpoint-time-slack", audit.CheckpointTimeSlack,
		"an event dated more than this before a checkpoint that did not include it is a break (a transaction held open longer keeps events out of the checkpoints signed meanwhile)")
	cmd.Flags().StringVar(&cpOpts.jwksFile, "ledger-jwks", "", "verify the checkpoint with the ledger's public keys in this file instead of those it serves")
	return cmd
}

type verifier struct {
	c    *apiClient
	keys map[string][]ledger.OrgKey // org key histories, fetched once
	out  io.Writer
	// slack is how much earlier than the event before it an event may be
	// dated (--event-time-slack); checkpointSlack how much earlier than a
	// checkpoint that did not include it (--checkpoint-time-slack).
	slack, checkpointSlack time.Duration
	// timeline is the checkpoints signedHeads folded, for dating events.
	timeline audit.CheckpointTimeline

	delegations, events, tokens, broken int
	// streams counts the streams other than delegations' verifyStreams checked.
	streams int
}

// verify checks one delegation's chain and tokens and prints the result.
// Only failures to talk to the API are returned; breaks are counted.
func (v *verifier) verify(ctx context.Context, id string) error {
	var ch chain
	if err := v.c.call(ctx, http.MethodGet, "/v1/delegations/"+url.PathEscape(id)+"/evidence", nil, nil, &ch); err != nil {
		return err
	}
	v.delegations++
	v.events += len(ch.Events)
	lines, problems, err := v.check(ctx, ch)
	if err != nil {
		return err
	}
	for _, l := range lines {
		fmt.Fprintln(v.out, l)
	}
	if len(problems) == 0 {
		fmt.Fprintf(v.out, "ok\t%s\t%d events\n", ch.DelegationID, len(ch.Events))
		return nil
	}
	v.broken++
	for _, p := range problems {
		fmt.Fprintf(v.out, "BROKEN\t%s\t%s\n", ch.DelegationID, p)
	}
	return nil
}

// check verifies one delegation's chain and the tokens stored on it. The
// delegation's org and remote task are the ones its own events record,
// never the delegations row's (which the service's role may update): a
// row that disagrees with them is a problem too.
func (v *verifier) check(ctx context.Context, ch chain) (lines, problems []string, err error) {
	id, err := uuid.Parse(ch.DelegationID)
	if err != nil {
		return nil, []string{fmt.Sprintf("delegation id %q is not a UUID", ch.DelegationID)}, nil
	}
	if len(ch.Events) == 0 {
		return nil, []string{"the delegation has no events: every delegation is created with its delegation_created event, so its stream was removed"}, nil
	}
	events := make([]ledger.Event, len(ch.Events))
	for i, e := range ch.Events {
		le, err := e.Event()
		if err != nil {
			problems = append(problems, fmt.Sprintf("event %d: %v", e.StreamSeq, err))
			continue
		}
		events[i] = le
	}
	if len(problems) > 0 {
		return nil, problems, nil
	}
	if err := ledger.VerifyChainWithin(events, v.slack); err != nil {
		problems = append(problems, err.Error())
	}
	recorded, err := recordedDelegation(ch.Events)
	if err != nil {
		return nil, append(problems, err.Error()), nil
	}
	if ch.OrgID != recorded.OrgID {
		problems = append(problems, fmt.Sprintf("the delegation's org_id %q is not the %q its delegation_created event records", ch.OrgID, recorded.OrgID))
	}
	if ch.RemoteTaskID != recorded.RemoteTaskID {
		problems = append(problems, fmt.Sprintf("the delegation's remote_task_id %q is not the %q its events record", ch.RemoteTaskID, recorded.RemoteTaskID))
	}
	history, err := v.orgKeyHistory(ctx, recorded.OrgID)
	if err != nil {
		return nil, nil, err
	}
	lines, broken := checkDelegationTokens(id, recorded, ch.LedgerID, ch.Events, history, v.slack)
	for _, e := range ch.Events {
		if e.Evidence != "" {
			v.tokens++
		}
	}
	return lines, append(problems, broken...), nil
}

// verifyOrgOf checks, for verify-chain --delegation, what the full run
// checks of the delegation's org: its stream's chain, and its key history
// (which the delegation's tokens were verified against) against that
// stream, with ledger.CheckOrgKeys. The org is the one the delegation's
// events record; its stream comes with the delegation's evidence pack.
// Breaks are printed and counted; only failures to talk to the API are
// returned.
func (v *verifier) verifyOrgOf(ctx context.Context, id string) error {
	var pack audit.EvidencePack
	if err := v.c.call(ctx, http.MethodGet, "/v1/delegations/"+url.PathEscape(id)+"/evidence-pack", nil, nil, &pack); err != nil {
		return err
	}
	rec, err := recordedDelegation(pack.Events)
	if err != nil {
		return nil // verify reported it
	}
	stream := "org:" + rec.OrgID
	v.streams++
	events := make([]ledger.Event, 0, len(pack.OrgEvents))
	for _, r := range pack.OrgEvents {
		e, err := r.Event()
		if err != nil || r.Stream != stream {
			v.broken++
			fmt.Fprintf(v.out, "BROKEN\t%s\tevent %d is not an event of the stream\n", stream, r.StreamSeq)
			return nil
		}
		events = append(events, e)
	}
	if err := ledger.VerifyChainWithin(events, v.slack); err != nil {
		v.broken++
		fmt.Fprintf(v.out, "BROKEN\t%s\t%v\n", stream, err)
		return nil
	}
	return v.checkKeyHistory(ctx, stream, rec.OrgID, events)
}

// checkKeyHistory reports the org's stream as ok or broken by whether the
// org's key history, the one tokens are verified against, is the one its
// (verified) events record.
func (v *verifier) checkKeyHistory(ctx context.Context, stream, orgID string, events []ledger.Event) error {
	history, err := v.orgKeyHistory(ctx, orgID)
	if err != nil {
		return err
	}
	if problems := ledger.CheckOrgKeys(history, events, true); len(problems) > 0 {
		v.broken++
		for _, p := range problems {
			fmt.Fprintf(v.out, "BROKEN\t%s\tkey history: %s\n", stream, p)
		}
		return nil
	}
	fmt.Fprintf(v.out, "ok\t%s\t%d events\t%d key(s) in its history\n", stream, len(events), len(history))
	return nil
}

// recorded is what a delegation's own events say it is about.
type recorded struct {
	// OrgID is the org its delegation_created event names.
	OrgID string
	// RemoteTaskID is the remote task its events recorded last: the one it
	// was created with, or the one a task_dispatched or dispatch_resolved
	// event recorded.
	RemoteTaskID string
}

// recordedDelegation reads the org and the remote task a delegation's
// events record, in stream order: the first must be its
// delegation_created event. verify-chain and verify-pack take both from
// here, never from a row or a pack's description, which can say anything.
func recordedDelegation(records []ledger.EventRecord) (recorded, error) {
	if len(records) == 0 || records[0].Type != ledger.EventTypeDelegationCreated {
		return recorded{}, fmt.Errorf("the first event is not %s", ledger.EventTypeDelegationCreated)
	}
	var created ledger.DelegationCreatedData
	if err := json.Unmarshal(records[0].Data, &created); err != nil || created.OrgID == "" {
		return recorded{}, fmt.Errorf("the %s event's data does not name the org", ledger.EventTypeDelegationCreated)
	}
	out := recorded{OrgID: created.OrgID, RemoteTaskID: created.RemoteTaskID}
	for _, r := range records[1:] {
		if r.Type != ledger.EventTypeTaskDispatched && r.Type != ledger.EventTypeDispatchResolved {
			continue
		}
		var data struct {
			TaskID string `json:"task_id"`
		}
		if json.Unmarshal(r.Data, &data) == nil && data.TaskID != "" {
			out.RemoteTaskID = data.TaskID
		}
	}
	return out, nil
}

// checkDelegationTokens verifies every signed token stored on a
// delegation's events (records, in stream order) as the ledger accepted it,
// with compensation.VerifyStoredTokens — as the kind it was accepted as,
// against the org's key history when it was accepted, about the task it
// was accepted for, with the event's record of it — and that every
// discharge that rests on a token carries it (dischargeWithoutToken).
// slack is the event-time slack. It returns a line per verified token and
// every problem. verify-chain and verify-pack both call it: one rule for
// both, and the console's.
func checkDelegationTokens(id uuid.UUID, d recorded, ledgerID string, records []ledger.EventRecord, history []ledger.OrgKey, slack time.Duration) (lines, problems []string) {
	events := make([]ledger.Event, 0, len(records))
	for _, r := range records {
		if r.Evidence == "" {
			if err := dischargeWithoutToken(r); err != nil {
				problems = append(problems, fmt.Sprintf("event %d (%s): %v", r.StreamSeq, r.Type, err))
			}
		}
		e, err := r.Event()
		if err != nil {
			problems = append(problems, fmt.Sprintf("event %d (%s): %v", r.StreamSeq, r.Type, err))
			continue
		}
		events = append(events, e)
	}
	owner := compensation.TokenOwner{DelegationID: id, OrgID: d.OrgID, RemoteTaskID: d.RemoteTaskID, LedgerID: ledgerID, History: history, Slack: slack}
	for _, v := range compensation.VerifyStoredTokens(owner, events) {
		e := v.Event
		if v.Err != nil {
			problems = append(problems, fmt.Sprintf("event %d (%s): token does not verify: %v", e.StreamSeq, e.Type, v.Err))
			continue
		}
		how := ""
		if v.Derived {
			how = ", derived: the event predates token_kind"
		}
		lines = append(lines, fmt.Sprintf("token\t%s\tevent %d (%s)\tkid %s\tthumbprint %s\t%s accepted %s%s",
			id, e.StreamSeq, e.Type, v.Key.KeyID, v.Key.Thumbprint, v.Kind, v.AcceptedAt.UTC().Format(time.RFC3339Nano), how))
	}
	return lines, problems
}

// dischargeWithoutToken says why r, an event with no stored token, should
// have had one: it moved the obligation to compensated or released on
// evidence that is a signed token (ledger/DESIGN.md §3). Compensated rests on an
// ack, posted (channel http) or received early, or on a receipt of
// Quittance's own A2A call (channel a2a_receipt or atomic_cancel), which
// the channel authenticates and which may carry no token. Released on a
// declaration always rests on a signed declaration, posted or the jws of an
// A2A receipt. The other releases (rejected_before_work,
// gate_not_required), settlements and write-offs rest on no token.
func dischargeWithoutToken(r ledger.EventRecord) error {
	if r.ObligationTo == "" || r.ObligationTo == r.ObligationFrom {
		return nil
	}
	var data struct {
		Reason          string `json:"reason"`
		Channel         string `json:"channel"`
		EvidenceChannel string `json:"evidence_channel"`
	}
	_ = json.Unmarshal(r.Data, &data)
	switch r.ObligationTo {
	case ledger.ObligationReleased:
		if data.Reason == string(ledger.ReasonNoCompensationDeclared) {
			return errors.New("released on a declaration, but the event stores no signed declaration")
		}
	case ledger.ObligationCompensated:
		channel := ledger.EvidenceChannel(data.EvidenceChannel)
		if channel == "" {
			channel = ledger.EvidenceChannel(data.Channel)
		}
		if channel != ledger.ChannelA2AReceipt && channel != ledger.ChannelAtomicCancel {
			return fmt.Errorf("compensated on evidence of channel %q, but the event stores no signed ack (only a receipt of Quittance's own A2A call may carry none)", channel)
		}
	}
	return nil
}

// orgKeyHistory fetches and caches an org's key history.
func (v *verifier) orgKeyHistory(ctx context.Context, orgID string) ([]ledger.OrgKey, error) {
	if k, ok := v.keys[orgID]; ok {
		return k, nil
	}
	var out struct {
		Keys []ledger.OrgKey `json:"keys"`
	}
	if err := v.c.call(ctx, http.MethodGet, "/admin/v1/orgs/"+url.PathEscape(orgID)+"/keys", nil, nil, &out); err != nil {
		return nil, err
	}
	for i := range out.Keys {
		out.Keys[i].OrgID = orgID
	}
	v.keys[orgID] = out.Keys
	return out.Keys, nil
}
