package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"

	"github.com/spf13/cobra"
)

// newBudgetsCommand is `quittance budgets`: show a budget, create or fund
// one, and name the tenants whose orchestrators may hold on it.
func newBudgetsCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "budgets",
		Short: "Administer budgets: funding, and the tenants that may hold on each",
		Long: "A budget is money in one currency set aside for delegations. Only orchestrators of the tenants it names " +
			"may hold on it; naming tenants is a change a second on-call principal approves (at once under dev).",
	}
	show := newShowCommand(getenv, stdout, "show ID", "Show a budget (its money and its tenants), as JSON", 1,
		func(args []string) string { return "/admin/v1/budgets/" + url.PathEscape(args[0]) })

	var (
		currency string
		funded   int64
		tenants  []string
	)
	set := &cobra.Command{
		Use:   "set ID [--currency EUR] [--funded-minor N] [--tenants T,…]",
		Short: "Create a budget or change its funding or tenants (on-call); flags not given keep their current value",
		Long: "set creates the budget (--currency is then required; funding defaults to 0) or changes it, keeping every " +
			"setting whose flag is not given. Funding applies at once. --tenants replaces the tenants whose " +
			"orchestrators may hold on it (--tenants '' names none); outside dev that is a pending change a " +
			"different on-call principal approves, and the answer is the budget as it still is, with pending_change.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			flags := cmd.Flags()
			if !flags.Changed("currency") && !flags.Changed("funded-minor") && !flags.Changed("tenants") {
				return usageError{errors.New("nothing to set: give --currency, --funded-minor or --tenants")}
			}
			if funded < 0 {
				return usageError{errors.New("--funded-minor must be zero or a positive number of minor units")}
			}
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			path := "/admin/v1/budgets/" + url.PathEscape(args[0])
			var current struct {
				Currency    string `json:"currency"`
				FundedMinor int64  `json:"funded_minor"`
			}
			err = c.call(cmd.Context(), http.MethodGet, path, nil, nil, &current)
			var apiErr *apiError
			switch {
			case err != nil && !(errors.As(err, &apiErr) && apiErr.Status == http.StatusNotFound):
				return err
			case err != nil && !flags.Changed("currency"):
				return usageError{errors.New("budget " + args[0] + " does not exist: give --currency to create it")}
			}
			body := map[string]any{"currency": current.Currency, "funded_minor": current.FundedMinor}
			if flags.Changed("currency") {
				body["currency"] = currency
			}
			if flags.Changed("funded-minor") {
				body["funded_minor"] = funded
			}
			if flags.Changed("tenants") {
				if tenants == nil {
					tenants = []string{}
				}
				body["tenants"] = tenants
			}
			var out json.RawMessage
			if err := c.call(cmd.Context(), http.MethodPut, path, nil, body, &out); err != nil {
				return err
			}
			return printJSON(stdout, out)
		},
	}
	set.Flags().StringVar(&currency, "currency", "", "ISO 4217 currency, fixed once the budget exists")
	set.Flags().Int64Var(&funded, "funded-minor", 0, "total funding in integer minor units")
	set.Flags().StringSliceVar(&tenants, "tenants", nil, "the tenants whose orchestrators may hold on the budget, comma-separated ('' for none)")

	cmd.AddCommand(show, set)
	return cmd
}
