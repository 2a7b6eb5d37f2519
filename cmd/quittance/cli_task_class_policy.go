package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

// taskClassPolicy is a task-class policy as the admin API has it.
type taskClassPolicy struct {
	OrgID     string    `json:"org_id"`
	Tenant    string    `json:"tenant"`
	Classes   []string  `json:"classes"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
}

// newTaskClassPolicyCommand is `quittance task-classes policy`: which task
// classes a tenant's orchestrators may use with an org on the delegations
// Quittance dispatches (ledger/DESIGN.md §2.4).
func newTaskClassPolicyCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Which task classes each tenant may use with an org (a two-person change outside dev)",
		Long: "On a delegation Quittance dispatched, a task class the policy of its tenant at its org does not list " +
			"gates as an unregistered class does: effect-capable, gated on canceled and failed. So an orchestrator " +
			"naming an ungated class (read_only) does not by itself make an observed cancel release the hold. " +
			"Delegations the orchestrator recorded itself are not affected.",
	}
	list := newTaskClassPolicyListCommand(getenv, stdout)

	show := newShowCommand(getenv, stdout, "show ORG TENANT", "Show the task-class policy of a tenant at an org, as JSON", 2,
		func(args []string) string { return taskClassPolicyPath(args[0], args[1]) })

	var classes []string
	set := &cobra.Command{
		Use:   "set ORG TENANT --classes procurement,read_only",
		Short: "Set the task classes a tenant may use with an org (on-call; a second on-call person approves it outside dev)",
		Long: "set replaces the list. --classes '' lists none: every class then gates. Outside dev the answer names " +
			"the pending change, which applies when a different on-call person approves it " +
			"(quittance changes approve ID).",
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("classes") {
				return usageError{errors.New("nothing to set: give --classes")}
			}
			if classes == nil {
				classes = []string{}
			}
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			var out struct {
				taskClassPolicy
				PendingChange json.RawMessage `json:"pending_change,omitempty"`
			}
			if err := c.call(cmd.Context(), http.MethodPut, taskClassPolicyPath(args[0], args[1]), nil, map[string]any{"classes": classes}, &out); err != nil {
				return err
			}
			return printJSON(stdout, out)
		},
	}
	set.Flags().StringSliceVar(&classes, "classes", nil, "the task classes the tenant's orchestrators may use with the org")

	cmd.AddCommand(list, show, set)
	return cmd
}

// newTaskClassPolicyListCommand is `quittance task-classes policy list ORG`.
func newTaskClassPolicyListCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	var output string
	list := &cobra.Command{
		Use:   "list ORG",
		Short: "List the task-class policies at an org, by tenant",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "table" && output != "json" {
				return usageError{errors.New("-o must be table or json")}
			}
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			var out struct {
				Policies []taskClassPolicy `json:"task_class_policies"`
			}
			if err := c.call(cmd.Context(), http.MethodGet, taskClassPolicyPath(args[0]), nil, nil, &out); err != nil {
				return err
			}
			if output == "json" {
				return printJSON(stdout, out.Policies)
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tCLASSES\tUPDATED_AT")
			for _, p := range out.Policies {
				classes := strings.Join(p.Classes, ",")
				if classes == "" {
					classes = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Tenant, classes, p.UpdatedAt.UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		},
	}
	list.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return list
}

// taskClassPolicyPath is the admin API path of org's task-class policies,
// or of tenant's there.
func taskClassPolicyPath(org string, tenant ...string) string {
	p := "/admin/v1/orgs/" + url.PathEscape(org) + "/task-class-policies"
	if len(tenant) > 0 {
		p += "/" + url.PathEscape(tenant[0])
	}
	return p
}
