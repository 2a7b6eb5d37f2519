package main

import (
	"io"
	"net/url"

	"github.com/spf13/cobra"
)

// newCompensationCommand is `quittance compensation`: on-call actions on
// the compensation of an obligation.
func newCompensationCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "compensation", Short: "Act on the compensation of obligations"}
	var reason string
	redrive := &cobra.Command{
		Use:   "redrive ID",
		Short: "Ask the remote for compensation again (only from compensation_unconfirmed; same idempotency key)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlag("reason", reason); err != nil {
				return err
			}
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/delegations/"+url.PathEscape(args[0])+"/compensation/redrive",
				map[string]string{"reason": reason})
		},
	}
	redrive.Flags().StringVar(&reason, "reason", "", "why compensation is asked for again (required)")
	cmd.AddCommand(redrive)
	return cmd
}
