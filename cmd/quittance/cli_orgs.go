package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"

	"github.com/spf13/cobra"
)

// orgRegistration is the part of an org's registration that PUT
// /admin/v1/orgs/{id} replaces: every field, so that changing one keeps
// the others.
type orgRegistration struct {
	ID                    string          `json:"id"`
	Name                  string          `json:"name"`
	SharedCoordinator     bool            `json:"shared_coordinator"`
	JWKS                  json.RawMessage `json:"jwks,omitempty"`
	JWKSURL               string          `json:"jwks_url,omitempty"`
	AgentCardURL          string          `json:"agent_card_url,omitempty"`
	AllowedHosts          []string        `json:"allowed_hosts"`
	RequireSignedReceipts bool            `json:"require_signed_receipts"`
	// JWKSFetch is only read: what was last fetched from JWKSURL.
	JWKSFetch *struct {
		Keys json.RawMessage `json:"keys"`
	} `json:"jwks_fetch,omitempty"`
}

// newOrgShowCommand is `quittance orgs show ID`.
func newOrgShowCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show a remote org's registration (keys, agent card, allowed hosts, revocation), as JSON",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			var out json.RawMessage
			if err := c.call(cmd.Context(), http.MethodGet, "/admin/v1/orgs/"+url.PathEscape(args[0]), nil, nil, &out); err != nil {
				return err
			}
			return printJSON(stdout, out)
		},
	}
}

// newOrgKeysCommand is `quittance orgs keys`: the public keys an org signs
// its acks and declarations with.
func newOrgKeysCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Show, register or rotate the public keys a remote org signs acks and declarations with",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "show ID",
		Short: "Print the org's JWK Set in force: the inline set, or the one last fetched from its JWKS URL",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			var org orgRegistration
			if err := c.call(cmd.Context(), http.MethodGet, "/admin/v1/orgs/"+url.PathEscape(args[0]), nil, nil, &org); err != nil {
				return err
			}
			if org.JWKSURL != "" {
				if org.JWKSFetch == nil || len(org.JWKSFetch.Keys) == 0 {
					return fmt.Errorf("org %s's keys come from %s, and no valid set was fetched from it yet", org.ID, org.JWKSURL)
				}
				return printJSON(stdout, org.JWKSFetch.Keys)
			}
			if len(org.JWKS) == 0 {
				return fmt.Errorf("org %s has no registered keys", org.ID)
			}
			return printJSON(stdout, org.JWKS)
		},
	})

	cmd.AddCommand(&cobra.Command{
		Use:   "history ID",
		Short: "Print every key the org ever had: kid, RFC 7638 thumbprint, when it was in force (on-call, finance)",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			var out json.RawMessage
			if err := c.call(cmd.Context(), http.MethodGet, "/admin/v1/orgs/"+url.PathEscape(args[0])+"/keys", nil, nil, &out); err != nil {
				return err
			}
			return printJSON(stdout, out)
		},
	})

	cmd.AddCommand(&cobra.Command{
		Use:   "refresh ID",
		Short: "Fetch the org's JWKS URL now and print what changed (on-call)",
		Long: "refresh fetches the JWKS URL of an org registered by URL at once, as the periodic refresh " +
			"(QUITTANCE_ORG_JWKS_REFRESH) does: keys the org added there come into force and keys it removed stop " +
			"being in force, without approval. A fetch that fails or serves an invalid set changes no key; the " +
			"answer's org.jwks_fetch.error says why.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/orgs/"+url.PathEscape(args[0])+"/keys/refresh", nil)
		},
	})

	var jwksFile, jwksURL string
	set := &cobra.Command{
		Use:   "set ID (--jwks FILE | --jwks-url URL)",
		Short: "Register the org's public keys, inline or by JWKS URL, replacing the key source (on-call)",
		Long: "set replaces the org's keys with the JWK Set in FILE (- for stdin), or with the keys served at the " +
			"org's own JWKS URL (https), and keeps the rest of its registration. Either is a privileged change a " +
			"second on-call principal approves. Keys the org later rotates at its URL take effect without approval. " +
			"To rotate an inline key without refusing tokens already signed with the old one, register a set " +
			"that holds both keys, and remove the old key once the org has stopped using it. The change is recorded " +
			"as an org_updated event in the org's stream. The registration is read and written back: do not run " +
			"two changes to the same org at once.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (jwksFile == "") == (jwksURL == "") {
				return usageError{errors.New("give exactly one of --jwks and --jwks-url")}
			}
			var jwks json.RawMessage
			if jwksFile != "" {
				var err error
				if jwks, err = readJWKSFile(jwksFile, cmd.InOrStdin()); err != nil {
					return usageError{err}
				}
			}
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			path := "/admin/v1/orgs/" + url.PathEscape(args[0])
			var org orgRegistration
			if err := c.call(cmd.Context(), http.MethodGet, path, nil, nil, &org); err != nil {
				return err
			}
			body := map[string]any{
				"name": org.Name, "shared_coordinator": org.SharedCoordinator,
				"agent_card_url": org.AgentCardURL, "allowed_hosts": org.AllowedHosts,
				"require_signed_receipts": org.RequireSignedReceipts,
			}
			if jwks != nil {
				body["jwks"] = jwks
			} else {
				body["jwks_url"] = jwksURL
			}
			var out json.RawMessage
			err = c.call(cmd.Context(), http.MethodPut, path, nil, body, &out)
			if err != nil {
				return err
			}
			return printJSON(stdout, out)
		},
	}
	set.Flags().StringVar(&jwksFile, "jwks", "", "file holding the org's public JWK Set, {\"keys\": [...]} (- for stdin)")
	set.Flags().StringVar(&jwksURL, "jwks-url", "", "the org's own JWKS URL (https), its keys fetched from there")
	cmd.AddCommand(set)
	return cmd
}

// maxJWKSBytes bounds the JWK Set file the CLI reads.
const maxJWKSBytes = 1 << 20

// readJWKSFile reads a public JWK Set from path (- for stdin) and checks
// its shape: a JSON object whose "keys" is a non-empty array of objects.
// The service checks the keys themselves.
func readJWKSFile(path string, stdin io.Reader) (json.RawMessage, error) {
	var r io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("--jwks: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("--jwks: %w", err)
	}
	if len(b) > maxJWKSBytes {
		return nil, errors.New("--jwks: the file is larger than 1 MiB")
	}
	var set struct {
		Keys []map[string]any `json:"keys"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&set); err != nil {
		return nil, fmt.Errorf("--jwks: not a JWK Set: %v", err)
	}
	if len(set.Keys) == 0 {
		return nil, errors.New(`--jwks: not a JWK Set: "keys" is missing or empty`)
	}
	for _, k := range set.Keys {
		if _, private := k["d"]; private {
			return nil, errors.New("--jwks: the set holds a private key; register public keys only")
		}
	}
	return json.RawMessage(b), nil
}
