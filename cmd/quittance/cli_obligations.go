package main

import (
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
		states    []string
		org       string
		tenant    string
		olderThan string
		condition string
		output    string
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
			q := url.Values{}
			for _, s := range states {
				q.Add("state", s)
			}
			if org != "" {
				q.Set("org_id", org)
			}
			if tenant != "" {
				q.Set("tenant", tenant)
			}
			if olderThan != "" {
				q.Set("older_than", olderThan)
			}
			if condition != "" {
				q.Set("condition", condition)
			}
			ctx := cmd.Context()
			if output == "csv" {
				// The API streams the whole selection; pass it through.
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
			q.Set("limit", "1000")
			var all []json.RawMessage
			for {
				var page struct {
					Obligations []json.RawMessage `json:"obligations"`
					NextCursor  string            `json:"next_cursor"`
				}
				if err := c.call(ctx, http.MethodGet, "/v1/obligations", q, nil, &page); err != nil {
					return err
				}
				all = append(all, page.Obligations...)
				if page.NextCursor == "" {
					break
				}
				q.Set("cursor", page.NextCursor)
			}
			if output == "json" {
				if all == nil {
					all = []json.RawMessage{}
				}
				return printJSON(stdout, all)
			}
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
		},
	}
	list.Flags().StringSliceVar(&states, "state", nil, "obligation states (repeat or comma-separate); default the open ones")
	list.Flags().StringVar(&org, "org", "", "only this remote org")
	list.Flags().StringVar(&tenant, "tenant", "", "only this tenant")
	list.Flags().StringVar(&olderThan, "older-than", "", "only obligations older than this (e.g. 72h, 7d)")
	list.Flags().StringVar(&condition, "condition", "", "only obligations in this condition: dispatch_unknown (nothing proves whether the remote created a task) or task_not_found (the agent no longer knows the delegation's task)")
	list.Flags().StringVarP(&output, "output", "o", "table", "output format: table, json or csv")
	cmd.AddCommand(list)
	return cmd
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
