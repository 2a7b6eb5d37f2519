package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
)

// uuidArg is a usage error unless raw is a UUID.
func uuidArg(what, raw string) (string, error) {
	id, err := uuid.Parse(raw)
	if err != nil {
		return "", usageError{fmt.Errorf("%s %q is not a UUID", what, raw)}
	}
	return id.String(), nil
}

// getAndPrint gets path (with query) and prints the JSON answer.
func getAndPrint(cmd *cobra.Command, getenv func(string) string, stdout io.Writer, path string, query url.Values) error {
	c, err := newAPIClient(getenv)
	if err != nil {
		return err
	}
	var out json.RawMessage
	if err := c.call(cmd.Context(), http.MethodGet, path, query, nil, &out); err != nil {
		return err
	}
	return printJSON(stdout, out)
}

// expiresFlag turns --expires-in into an RFC 3339 expiry; "" for none.
func expiresFlag(in time.Duration) (string, error) {
	if in == 0 {
		return "", nil
	}
	if in < 0 {
		return "", usageError{fmt.Errorf("--expires-in must be positive")}
	}
	return time.Now().Add(in).UTC().Format(time.RFC3339), nil
}

func newPrincipalsCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "principals", Short: "List, show, disable principals and ask for role grants and OpenID Connect links"}
	cmd.AddCommand(&cobra.Command{
		Use: "list", Short: "List principals", Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return getAndPrint(cmd, getenv, stdout, "/admin/v1/principals", nil)
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use: "show ID", Short: "Show a principal", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuidArg("principal id", args[0])
			if err != nil {
				return err
			}
			return getAndPrint(cmd, getenv, stdout, "/admin/v1/principals/"+id, nil)
		},
	})
	cmd.AddCommand(newPrincipalDisableCommand(getenv, stdout), newPrincipalGrantRoleCommand(getenv, stdout),
		newPrincipalLinkOIDCCommand(getenv, stdout))
	cmd.AddCommand(&cobra.Command{
		Use:   "no-identity-provider-account ID",
		Short: "Ask for a person principal to be marked as having no identity-provider account (a second on-call approves)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuidArg("principal id", args[0])
			if err != nil {
				return err
			}
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/principals/"+id+"/no-identity-provider-account", nil)
		},
	})
	return cmd
}

// newPrincipalDisableCommand is `quittance principals disable ID`.
func newPrincipalDisableCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	var reason string
	disable := &cobra.Command{
		Use: "disable ID", Short: "Disable a principal and revoke all its credentials, at once", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuidArg("principal id", args[0])
			if err != nil {
				return err
			}
			if err := requireFlag("reason", reason); err != nil {
				return err
			}
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/principals/"+id+"/disable", map[string]string{"reason": reason})
		},
	}
	disable.Flags().StringVar(&reason, "reason", "", "why (required)")
	return disable
}

// newPrincipalGrantRoleCommand is `quittance principals grant-role ID`.
func newPrincipalGrantRoleCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	var role, tenant string
	grant := &cobra.Command{
		Use: "grant-role ID", Short: "Ask for a principal to get another role (a second on-call approves)", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuidArg("principal id", args[0])
			if err != nil {
				return err
			}
			if err := requireFlag("role", role); err != nil {
				return err
			}
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/principals/"+id+"/role", map[string]string{"role": role, "tenant": tenant})
		},
	}
	grant.Flags().StringVar(&role, "role", "", "orchestrator, finance or oncall (required)")
	grant.Flags().StringVar(&tenant, "tenant", "", "the tenant (orchestrator only)")
	return grant
}

// newPrincipalLinkOIDCCommand is `quittance principals link-oidc ID`.
func newPrincipalLinkOIDCCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	var issuer, subject string
	link := &cobra.Command{
		Use:   "link-oidc ID",
		Short: "Ask for an OpenID Connect identity to sign in as a person principal (its holder confirms, signed in to the console as it)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuidArg("principal id", args[0])
			if err != nil {
				return err
			}
			if err := requireFlag("issuer", issuer); err != nil {
				return err
			}
			if err := requireFlag("subject", subject); err != nil {
				return err
			}
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/principals/"+id+"/oidc", map[string]string{"issuer": issuer, "subject": subject})
		},
	}
	link.Flags().StringVar(&issuer, "issuer", "", "the identity provider's issuer URL, as its ID tokens' iss claim (required)")
	link.Flags().StringVar(&subject, "subject", "", "the person's subject, as its ID tokens' sub claim (required)")
	return link
}

func newCredentialsCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "credentials", Short: "List, revoke and rotate API credentials (never shows a secret but a new one)"}
	var principal string
	list := &cobra.Command{
		Use: "list", Short: "List credentials: yours, or (on-call) everyone's", Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q := url.Values{}
			if principal != "" {
				id, err := uuidArg("--principal", principal)
				if err != nil {
					return err
				}
				q.Set("principal_id", id)
			}
			return getAndPrint(cmd, getenv, stdout, "/admin/v1/credentials", q)
		},
	}
	list.Flags().StringVar(&principal, "principal", "", "only this principal's (id)")
	cmd.AddCommand(list)
	var reason string
	revoke := &cobra.Command{
		Use: "revoke ID", Short: "Revoke a credential: refused on every replica within a second", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuidArg("credential id", args[0])
			if err != nil {
				return err
			}
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/credentials/"+id+"/revoke", map[string]string{"reason": reason})
		},
	}
	revoke.Flags().StringVar(&reason, "reason", "", "why")
	cmd.AddCommand(revoke)
	var expiresIn time.Duration
	rotate := &cobra.Command{
		Use: "rotate ID", Short: "Issue a new credential (printed once) and revoke this one (on-call rotating a machine's: once a second on-call approves)", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuidArg("credential id", args[0])
			if err != nil {
				return err
			}
			expires, err := expiresFlag(expiresIn)
			if err != nil {
				return err
			}
			body := map[string]string{}
			if expires != "" {
				body["expires_at"] = expires
			}
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/credentials/"+id+"/rotate", body)
		},
	}
	rotate.Flags().DurationVar(&expiresIn, "expires-in", 0, "lifetime of the new credential (default: the principal's default)")
	cmd.AddCommand(rotate)
	return cmd
}

func newChangesCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "changes", Short: "Privileged changes awaiting a second on-call principal"}
	var status string
	list := &cobra.Command{
		Use: "list", Short: "List pending changes", Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch status {
			case "pending", "applied", "refused", "expired", "all":
			default:
				return usageError{fmt.Errorf("--status must be pending, applied, refused, expired or all")}
			}
			return getAndPrint(cmd, getenv, stdout, "/admin/v1/pending-changes", url.Values{"status": {status}})
		},
	}
	list.Flags().StringVar(&status, "status", "pending", "pending, applied, refused, expired or all")
	cmd.AddCommand(list)
	cmd.AddCommand(&cobra.Command{
		Use: "show ID", Short: "Show a pending change and what it applies", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuidArg("change id", args[0])
			if err != nil {
				return err
			}
			return getAndPrint(cmd, getenv, stdout, "/admin/v1/pending-changes/"+id, nil)
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use: "approve ID", Short: "Approve a change another on-call principal asked for: it applies now", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuidArg("change id", args[0])
			if err != nil {
				return err
			}
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/pending-changes/"+id+"/approve", nil)
		},
	})
	var reason string
	refuse := &cobra.Command{
		Use: "refuse ID", Short: "Refuse (or withdraw) a pending change", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := uuidArg("change id", args[0])
			if err != nil {
				return err
			}
			if err := requireFlag("reason", reason); err != nil {
				return err
			}
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/pending-changes/"+id+"/refuse", map[string]string{"reason": reason})
		},
	}
	refuse.Flags().StringVar(&reason, "reason", "", "why (required)")
	cmd.AddCommand(refuse)
	return cmd
}
