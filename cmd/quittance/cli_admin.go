package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// exactArgs requires n positional arguments, as a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s takes %d argument(s), got %d", cmd.CommandPath(), n, len(args))}
		}
		return nil
	}
}

// newShowCommand is a client command that GETs the admin resource at
// path(args), its nargs arguments, and prints it as the API answers it.
func newShowCommand(getenv func(string) string, stdout io.Writer, use, short string, nargs int, path func(args []string) string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(nargs),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			var out json.RawMessage
			if err := c.call(cmd.Context(), http.MethodGet, path(args), nil, nil, &out); err != nil {
				return err
			}
			return printJSON(stdout, out)
		},
	}
}

// requireFlag is a usage error when a mandatory flag is empty.
func requireFlag(name, value string) error {
	if strings.TrimSpace(value) == "" {
		return usageError{fmt.Errorf("--%s is required", name)}
	}
	return nil
}

// postAndPrint posts body to path and prints the JSON answer.
func postAndPrint(cmd *cobra.Command, getenv func(string) string, stdout io.Writer, path string, body any) error {
	c, err := newAPIClient(getenv)
	if err != nil {
		return err
	}
	var out json.RawMessage
	if err := c.call(cmd.Context(), http.MethodPost, path, nil, body, &out); err != nil {
		return err
	}
	return printJSON(stdout, out)
}

func newDelegationsCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "delegations", Short: "Inspect delegations, resolve an unknown dispatch, and write off an extra remote task"}
	var taskID, contextID, reason string
	resolve := &cobra.Command{
		Use:   "resolve-dispatch ID",
		Short: "Record the remote task of a dispatch_unknown delegation, as the remote org named it",
		Long: "resolve-dispatch ends the dispatch_unknown condition of a delegation by recording the remote task the " +
			"remote org says its agent created for the dispatch (look it up with them by the dispatch's messageId, on " +
			"the dispatch_unknown event). The task is observed at once and tracked from then on; the hold does not move.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlag("task-id", taskID); err != nil {
				return err
			}
			if err := requireFlag("reason", reason); err != nil {
				return err
			}
			body := map[string]string{"task_id": taskID, "reason": reason}
			if contextID != "" {
				body["context_id"] = contextID
			}
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/delegations/"+url.PathEscape(args[0])+"/dispatch/resolve", body)
		},
	}
	resolve.Flags().StringVar(&taskID, "task-id", "", "the remote task id the org confirmed (required)")
	resolve.Flags().StringVar(&contextID, "context-id", "", "that task's context id, if the org gave it")
	resolve.Flags().StringVar(&reason, "reason", "", "who at the org confirmed it, and a ticket (required)")
	cmd.AddCommand(resolve)
	cmd.AddCommand(newCreateBatchCommand(getenv, stdout))
	cmd.AddCommand(newWriteOffRemoteTaskCommand(getenv, stdout))
	cmd.AddCommand(newRedriveRemoteTaskCommand(getenv, stdout))
	cmd.AddCommand(&cobra.Command{
		Use:   "show ID",
		Short: "Show a delegation and its audit events",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			id := url.PathEscape(args[0])
			var out struct {
				Delegation json.RawMessage `json:"delegation"`
				Events     json.RawMessage `json:"events"`
			}
			if err := c.call(cmd.Context(), http.MethodGet, "/v1/delegations/"+id, nil, nil, &out.Delegation); err != nil {
				return err
			}
			var events struct {
				Events json.RawMessage `json:"events"`
			}
			if err := c.call(cmd.Context(), http.MethodGet, "/v1/delegations/"+id+"/events", nil, nil, &events); err != nil {
				return err
			}
			out.Events = events.Events
			return printJSON(stdout, out)
		},
	})
	return cmd
}

// newWriteOffRemoteTaskCommand is `quittance delegations
// write-off-remote-task`: on-call's end of the extra_task_compensation
// anomaly of one extra remote task of a completed delegation
// (ledger/DESIGN.md §2.2), accepting that its effects may stand.
func newWriteOffRemoteTaskCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "write-off-remote-task ID TASK_ID",
		Short: "Accept that an extra remote task of a completed delegation may keep its effects (ends its extra_task_compensation anomaly)",
		Long: "write-off-remote-task resolves the open compensation of an extra remote task of a completed delegation " +
			"(one the agent created beside the tracked task, listed as an extra_task_compensation anomaly) that no receipt " +
			"resolved: on-call accepts, with a reason, that its effects may stand. No money moves; the settled obligation's " +
			"hold paid for the tracked task alone.",
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlag("reason", reason); err != nil {
				return err
			}
			return postAndPrint(cmd, getenv, stdout,
				"/admin/v1/delegations/"+url.PathEscape(args[0])+"/remote-tasks/"+url.PathEscape(args[1])+"/write-off",
				map[string]string{"reason": reason})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why its effects may stand: who at the org was asked, and a ticket (required)")
	return cmd
}

// newRedriveRemoteTaskCommand is `quittance delegations
// redrive-remote-task`: on-call asks the org's agent again for the
// compensation of one extra remote task of a completed delegation whose
// requests are exhausted (ledger/DESIGN.md §2.2).
func newRedriveRemoteTaskCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "redrive-remote-task ID TASK_ID",
		Short: "Ask again for the compensation of an extra remote task of a completed delegation whose requests are exhausted",
		Long: "redrive-remote-task resets the attempt count of an extra remote task's open compensation (an " +
			"extra_task_compensation anomaly) whose requests are exhausted, records an extra_task_compensation_redriven " +
			"event with the reason and queues the compensation requests again, under the task's own idempotency key. " +
			"Refused (exit 3, redrive_not_allowed) while requests are still being sent, before any was sent, or once the " +
			"task's compensation is resolved. No money moves.",
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlag("reason", reason); err != nil {
				return err
			}
			return postAndPrint(cmd, getenv, stdout,
				"/admin/v1/delegations/"+url.PathEscape(args[0])+"/remote-tasks/"+url.PathEscape(args[1])+"/redrive",
				map[string]string{"reason": reason})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the org is asked again: what changed since the requests were exhausted (required)")
	return cmd
}

func newWriteOffCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	var reason, reference string
	cmd := &cobra.Command{
		Use:   "write-off ID",
		Short: "Write off a delegation's obligation (above the threshold it awaits a second approver)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlag("reason", reason); err != nil {
				return err
			}
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/delegations/"+url.PathEscape(args[0])+"/write-offs",
				map[string]string{"reason": reason, "reference": reference})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the loss is accepted (required)")
	cmd.Flags().StringVar(&reference, "reference", "", "an external reference: ticket, incident")
	return cmd
}

func newWriteOffsCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "write-offs", Short: "Act on write-offs"}
	cmd.AddCommand(&cobra.Command{
		Use:   "approve WRITE_OFF_ID",
		Short: "Approve a pending write-off, by the id write-off printed (as a different on-call identity than its requester)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/write-offs/"+url.PathEscape(args[0])+"/approve", nil)
		},
	})
	var reason string
	reject := &cobra.Command{
		Use:   "reject WRITE_OFF_ID --reason TEXT",
		Short: "Reject a pending write-off, by the id write-off printed (as a different on-call identity than its requester); the obligation stays open",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuidArg("write-off id", args[0])
			if err != nil {
				return err
			}
			if err := requireFlag("reason", reason); err != nil {
				return err
			}
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/write-offs/"+id+"/reject", map[string]string{"reason": reason})
		},
	}
	reject.Flags().StringVar(&reason, "reason", "", "why the loss is not accepted (required)")
	cmd.AddCommand(reject)
	cmd.AddCommand(newWriteOffThresholdCommand(getenv, stdout))
	return cmd
}

// newWriteOffThresholdCommand is `quittance write-offs threshold`: the
// amount above which a write-off needs a second on-call principal.
func newWriteOffThresholdCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "threshold", Short: "Show or change the write-off approval threshold"}
	cmd.AddCommand(&cobra.Command{
		Use:   "show",
		Short: "Print the default threshold and the currencies' own, each with where it comes from (finance, on-call)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			var out json.RawMessage
			if err := c.call(cmd.Context(), http.MethodGet, "/admin/v1/write-off-threshold", nil, nil, &out); err != nil {
				return err
			}
			return printJSON(stdout, out)
		},
	})
	var currency string
	set := &cobra.Command{
		Use:   "set MINOR",
		Short: "Ask for a new threshold, the default or (--currency) a currency's own, in minor units; it applies when a different on-call principal approves (on-call)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			minor, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil || minor < 0 {
				return usageError{fmt.Errorf("MINOR must be zero or a positive integer number of minor units")}
			}
			body := map[string]any{"threshold_minor": minor}
			if currency != "" {
				body["currency"] = currency
			}
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			var out json.RawMessage
			if err := c.call(cmd.Context(), http.MethodPut, "/admin/v1/write-off-threshold", nil, body, &out); err != nil {
				return err
			}
			return printJSON(stdout, out)
		},
	}
	set.Flags().StringVar(&currency, "currency", "", "the ISO 4217 currency whose own threshold to set (default: the default threshold)")
	cmd.AddCommand(set)
	return cmd
}

func newOrgsCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "orgs", Short: "Administer remote orgs"}
	var reason string
	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a remote org's agent identity; its open obligations escalate",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlag("reason", reason); err != nil {
				return err
			}
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/orgs/"+url.PathEscape(args[0])+"/revoke-identity",
				map[string]string{"reason": reason})
		},
	}
	revoke.Flags().StringVar(&reason, "reason", "", "why the identity is no longer trusted (required)")
	cmd.AddCommand(revoke, newOrgShowCommand(getenv, stdout), newOrgKeysCommand(getenv, stdout),
		newOrgRegisterCommand(getenv, stdout), newOrgUpdateCommand(getenv, stdout), newOrgAcceptCardCommand(getenv, stdout))
	return cmd
}

func newSweepCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "sweep",
		Short: "Run the compensation deadline sweep now",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/compensation/sweep", nil)
		},
	}
}

func newTokenCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Issue API tokens"}
	var (
		role, tenant, name, kind, label string
		expiresIn                       time.Duration
	)
	create := &cobra.Command{
		Use:   "create",
		Short: "Issue an API token (a new name creates its principal); the secret is printed once, on stdout",
		Long: "Issue an API token; the secret is printed once, on stdout. An existing name (any case) gets another\n" +
			"credential, a new name creates the principal. Where a different on-call principal must approve (a new\n" +
			"person, finance or on-call principal, an orchestrator for a tenant in use, another credential of a\n" +
			"machine), the answer holds pending_change and the token works once it is approved (quittance changes).",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := requireFlag("role", role); err != nil {
				return err
			}
			if err := requireFlag("name", name); err != nil {
				return err
			}
			body := map[string]string{"role": role, "tenant": tenant, "name": name}
			if kind != "" {
				body["kind"] = kind
			}
			if label != "" {
				body["label"] = label
			}
			expires, err := expiresFlag(expiresIn)
			if err != nil {
				return err
			}
			if expires != "" {
				body["expires_at"] = expires
			}
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/tokens", body)
		},
	}
	create.Flags().StringVar(&kind, "kind", "", "person or machine (a new principal; default: orchestrators are machines)")
	create.Flags().DurationVar(&expiresIn, "expires-in", 0, "lifetime of the token (default: QUITTANCE_PERSON_CREDENTIAL_TTL for people, none for machines)")
	create.Flags().StringVar(&role, "role", "", "orchestrator, finance or oncall (required)")
	create.Flags().StringVar(&tenant, "tenant", "", "the tenant (orchestrator tokens only)")
	create.Flags().StringVar(&name, "name", "", "who holds the token (required)")
	create.Flags().StringVar(&label, "label", "", "a name for the credential itself, shown by credentials list (default the principal's name)")
	cmd.AddCommand(create)
	return cmd
}
