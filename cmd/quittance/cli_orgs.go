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
	AgentCardURL          string          `json:"agent_card_url,omitempty"`
	AllowedHosts          []string        `json:"allowed_hosts"`
	RequireSignedReceipts bool            `json:"require_signed_receipts"`
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
		Short: "Print the org's registered JWK Set",
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

	var jwksFile string
	set := &cobra.Command{
		Use:   "set ID --jwks FILE",
		Short: "Register the org's public keys, replacing the registered set (on-call)",
		Long: "set replaces the org's JWK Set with the one in FILE (- for stdin) and keeps the rest of its " +
			"registration. To rotate a key without refusing tokens already signed with the old one, register a set " +
			"that holds both keys, and remove the old key once the org has stopped using it. The change is recorded " +
			"as an org_updated event in the org's stream. The registration is read and written back: do not run " +
			"two changes to the same org at once.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlag("jwks", jwksFile); err != nil {
				return err
			}
			jwks, err := readJWKSFile(jwksFile, cmd.InOrStdin())
			if err != nil {
				return usageError{err}
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
			var out json.RawMessage
			err = c.call(cmd.Context(), http.MethodPut, path, nil, map[string]any{
				"name": org.Name, "shared_coordinator": org.SharedCoordinator, "jwks": jwks,
				"agent_card_url": org.AgentCardURL, "allowed_hosts": org.AllowedHosts,
				"require_signed_receipts": org.RequireSignedReceipts,
			}, &out)
			if err != nil {
				return err
			}
			return printJSON(stdout, out)
		},
	}
	set.Flags().StringVar(&jwksFile, "jwks", "", "file holding the org's public JWK Set, {\"keys\": [...]} (required; - for stdin)")
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
