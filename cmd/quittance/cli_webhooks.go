package main

import (
	"io"

	"github.com/spf13/cobra"
)

// newWebhooksCommand is `quittance webhooks`: on-call operations on webhook
// deliveries.
func newWebhooksCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "webhooks", Short: "Operate webhook deliveries"}
	var tenant, webhookID string
	redrive := &cobra.Command{
		Use:   "redrive",
		Short: "Put dead-lettered webhook deliveries back in the queue, due now (on-call)",
		Long: "redrive resets the attempts of dead-lettered deliveries and makes them, and every pending delivery, due now. " +
			"--tenant limits it to one tenant, --webhook (with --tenant) to one endpoint.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if webhookID != "" {
				if err := requireFlag("tenant", tenant); err != nil {
					return err
				}
			}
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/webhooks/deliveries/redrive", map[string]string{
				"tenant": tenant, "webhook_id": webhookID,
			})
		},
	}
	redrive.Flags().StringVar(&tenant, "tenant", "", "only this tenant's deliveries")
	redrive.Flags().StringVar(&webhookID, "webhook", "", "only this webhook endpoint's deliveries (needs --tenant)")
	cmd.AddCommand(redrive)
	return cmd
}
