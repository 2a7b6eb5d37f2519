package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// obligationRow is the part of an obligation the table shows; json and
// csv output pass the API's answer through unchanged.
type obligationRow struct {
	DelegationID     string `json:"delegation_id"`
	Tenant           string `json:"tenant"`
	OrgID            string `json:"org_id"`
	AmountMinor      int64  `json:"amount_minor"`
	Currency         string `json:"currency"`
	ObligationState  string `json:"obligation_state"`
	AgeSeconds       int64  `json:"age_seconds"`
	LastEvidenceType string `json:"last_evidence_type"`
}

func newObligationsCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "obligations", Short: "Reconciliation: list open obligations"}
	var (
		f      obligationFilter
		output string
	)
	list := &cobra.Command{
		Use:   "list",
		Short: "List obligations (default: the open ones) as a table, JSON or CSV",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "table" && output != "json" && output != "csv" {
				return usageError{fmt.Errorf("-o must be table, json or csv")}
			}
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			q := f.query()
			ctx := cmd.Context()
			if output == "csv" {
				return exportObligations(ctx, c, q, stdout)
			}
			all, err := allObligations(ctx, c, q)
			if err != nil {
				return err
			}
			if output == "json" {
				if all == nil {
					all = []json.RawMessage{}
				}
				return printJSON(stdout, all)
			}
			return printObligations(stdout, all)
		},
	}
	list.Flags().StringSliceVar(&f.states, "state", nil, "obligation states (repeat or comma-separate); default the open ones")
	list.Flags().StringVar(&f.org, "org", "", "only this remote org")
	list.Flags().StringVar(&f.tenant, "tenant", "", "only this tenant")
	list.Flags().StringVar(&f.olderThan, "older-than", "", "only obligations older than this (e.g. 72h, 7d)")
	list.Flags().StringVar(&f.condition, "condition", "", "only obligations in this condition: dispatch_unknown (nothing proves whether the remote created a task) or task_not_found (the agent no longer knows the delegation's task)")
	list.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or csv")
	cmd.AddCommand(list)
	return cmd
}

// obligationFilter is obligations list's selection flags.
type obligationFilter struct {
	states                            []string
	org, tenant, olderThan, condition string
}

// query is the filter as GET /v1/obligations's query parameters.
func (f obligationFilter) query() url.Values {
	q := url.Values{}
	for _, s := range f.states {
		q.Add("state", s)
	}
	if f.org != "" {
		q.Set("org_id", f.org)
	}
	if f.tenant != "" {
		q.Set("tenant", f.tenant)
	}
	if f.olderThan != "" {
		q.Set("older_than", f.olderThan)
	}
	if f.condition != "" {
		q.Set("condition", f.condition)
	}
	return q
}

// exportObligations copies the API's CSV export of the selection q to
// stdout: the API streams the whole selection.
func exportObligations(ctx context.Context, c *apiClient, q url.Values, stdout io.Writer) error {
	q.Set("format", "csv")
	resp, err := c.do(ctx, http.MethodGet, "/v1/obligations", q, nil, "text/csv")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(stdout, resp.Body); err != nil {
		return fmt.Errorf("obligations export interrupted: %w", err)
	}
	return nil
}

// allObligations reads every page of the selection q, as the API gives
// each obligation.
func allObligations(ctx context.Context, c *apiClient, q url.Values) ([]json.RawMessage, error) {
	q.Set("limit", "1000")
	var all []json.RawMessage
	for {
		var page struct {
			Obligations []json.RawMessage `json:"obligations"`
			NextCursor  string            `json:"next_cursor"`
		}
		if err := c.call(ctx, http.MethodGet, "/v1/obligations", q, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Obligations...)
		if page.NextCursor == "" {
			return all, nil
		}
		q.Set("cursor", page.NextCursor)
	}
}

// printObligations prints obligations as a table.
func printObligations(stdout io.Writer, all []json.RawMessage) error {
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DELEGATION\tTENANT\tORG\tAMOUNT_MINOR\tCURRENCY\tSTATE\tAGE\tLAST_EVIDENCE")
	for _, raw := range all {
		var o obligationRow
		if err := json.Unmarshal(raw, &o); err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", o.DelegationID, cell(o.Tenant), o.OrgID, o.AmountMinor,
			o.Currency, o.ObligationState, humanAge(o.AgeSeconds), o.LastEvidenceType)
	}
	return tw.Flush()
}

// cell keeps a table cell on one line.
func cell(s string) string {
	return strings.NewReplacer("\n", " ", "\r", " ", "\t", " ").Replace(s)
}

// humanAge renders seconds as days and hours.
func humanAge(seconds int64) string {
	d, h := seconds/86400, (seconds%86400)/3600
	if d > 0 {
		return strconv.FormatInt(d, 10) + "d" + strconv.FormatInt(h, 10) + "h"
	}
	return strconv.FormatInt(h, 10) + "h" + strconv.FormatInt((seconds%3600)/60, 10) + "m"
}
