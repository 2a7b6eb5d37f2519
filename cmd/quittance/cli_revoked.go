package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
)

// newRevokedReleasesCommand is `quittance revoked-releases`: obligations
// released on declarations of orgs whose identity was revoked since.
func newRevokedReleasesCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "revoked-releases",
		Short: "Obligations released on declarations of an identity revoked since (finance)",
	}
	var note string
	ack := &cobra.Command{
		Use:   "acknowledge DELEGATION_ID --note TEXT",
		Short: "Acknowledge a release on a revoked identity, so it is no longer surfaced (finance)",
		Long: "acknowledge records finance's acknowledgement, with a note, as a revoked_release_acknowledged event; from then " +
			"on the release is no longer listed in the anomalies, the summary's revoked_identity_releases or the " +
			"reporting.revoked_identity_releases_v1 view. List them with GET /v1/anomalies?kind=released_on_revoked_identity.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := uuid.Parse(args[0]); err != nil {
				return usageError{fmt.Errorf("DELEGATION_ID must be a delegation id (a UUID)")}
			}
			if err := requireFlag("note", note); err != nil {
				return err
			}
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			var out json.RawMessage
			if err := c.call(cmd.Context(), http.MethodPost, "/v1/delegations/"+url.PathEscape(args[0])+"/revoked-release/acknowledge", nil,
				map[string]any{"note": note}, &out); err != nil {
				return err
			}
			return printJSON(stdout, out)
		},
	}
	ack.Flags().StringVar(&note, "note", "", "what finance did about it (required)")
	cmd.AddCommand(ack)
	return cmd
}
