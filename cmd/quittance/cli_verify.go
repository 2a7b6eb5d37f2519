package main

import (
	"context"
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
	)
	cmd := &cobra.Command{
		Use:   "verify-chain",
		Short: "Re-verify the audit log's hash chains and every stored signed token",
		Long: "verify-chain fetches each delegation's event chain (or only --delegation's), recomputes every event's " +
			"hash and link, and re-verifies every stored signed ack or declaration against the org's keys in force " +
			"when the event accepted it (its key history, not its current keys), printing the kid and RFC 7638 " +
			"thumbprint of the key that verified each. It then checks every other stream's chain (orgs, budgets, principals, " +
			"tokens, pending changes, …) and every stream against the latest signed checkpoint (or --checkpoint FILE, an " +
			"exported one), so a tail removed or rewritten up to the checkpoint is a break; events after it are not covered " +
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
			cpOpts.now = time.Now()
			v := &verifier{c: c, keys: map[string][]ledger.OrgKey{}, out: stdout}
			if delegation != "" {
				if _, err := uuid.Parse(delegation); err != nil {
					return usageError{fmt.Errorf("--delegation must be a delegation id (a UUID)")}
				}
				if err := v.verify(ctx, delegation); err != nil {
					return err
				}
			} else {
				q := url.Values{"limit": {"500"}}
				for {
					var page struct {
						Delegations []struct {
							ID string `json:"id"`
						} `json:"delegations"`
						NextCursor string `json:"next_cursor"`
					}
					if err := c.call(ctx, http.MethodGet, "/v1/delegations", q, nil, &page); err != nil {
						return err
					}
					for _, d := range page.Delegations {
						if err := v.verify(ctx, d.ID); err != nil {
							return err
						}
					}
					if page.NextCursor == "" {
						break
					}
					q.Set("cursor", page.NextCursor)
				}
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
	cmd.Flags().StringVar(&cpOpts.jwksFile, "ledger-jwks", "", "verify the checkpoint with the ledger's public keys in this file instead of those it serves")
	return cmd
}

type verifier struct {
	c    *apiClient
	keys map[string][]ledger.OrgKey // org key histories, fetched once
	out  io.Writer

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
	problems := v.check(ctx, ch)
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

func (v *verifier) check(ctx context.Context, ch chain) []string {
	var problems []string
	events := make([]ledger.Event, len(ch.Events))
	for i, e := range ch.Events {
		le, err := e.Event()
		if err != nil {
			problems = append(problems, fmt.Sprintf("event %d: %v", e.StreamSeq, err))
			continue
		}
		events[i] = le
	}
	if len(problems) == 0 {
		if err := ledger.VerifyChain(events); err != nil {
			problems = append(problems, err.Error())
		}
	}
	for _, e := range ch.Events {
		if e.Evidence == "" {
			continue
		}
		v.tokens++
		if err := v.verifyToken(ctx, ch, e); err != nil {
			problems = append(problems, fmt.Sprintf("event %d (%s): token does not verify: %v", e.StreamSeq, e.Type, err))
		}
	}
	return problems
}

// verifyToken re-verifies a stored token against the org's keys in force
// when the event accepted it (the org's key history, not its current keys)
// and prints which key verified it.
func (v *verifier) verifyToken(ctx context.Context, ch chain, e ledger.EventRecord) error {
	history, err := v.orgKeyHistory(ctx, ch.OrgID)
	if err != nil {
		return err
	}
	_, key, err := verifyStoredToken(ch.OrgID, ch.RemoteTaskID, ch.LedgerID, e, history)
	if err != nil {
		return err
	}
	fmt.Fprintf(v.out, "token\t%s\tevent %d (%s)\tkid %s\tthumbprint %s\n", ch.DelegationID, e.StreamSeq, e.Type, key.KeyID, key.Thumbprint)
	return nil
}

// verifyStoredToken verifies the token stored on the published event r
// with compensation.VerifyStoredEvent, the one rule the ledger, the console
// and the CLI share. verify-chain and verify-pack call it.
func verifyStoredToken(orgID, remoteTaskID, ledgerID string, r ledger.EventRecord, history []ledger.OrgKey) (compensation.Claims, ledger.OrgKey, error) {
	e, err := r.Event()
	if err != nil {
		return compensation.Claims{}, ledger.OrgKey{}, err
	}
	return compensation.VerifyStoredEvent(orgID, remoteTaskID, ledgerID, e, history)
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
