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
	RequireSignedCard     bool            `json:"require_signed_card"`
	CardJKUHosts          []string        `json:"card_jku_hosts"`
	// JWKSFetch is only read: what was last fetched from JWKSURL.
	JWKSFetch *struct {
		Keys json.RawMessage `json:"keys"`
	} `json:"jwks_fetch,omitempty"`
}

// putBody is the PUT /admin/v1/orgs/{id} body that registers o as it is:
// a change starts from it and sets only what it changes, so that the rest
// of the registration (its keys above all) is kept.
func (o orgRegistration) putBody() map[string]any {
	hosts, jkuHosts := o.AllowedHosts, o.CardJKUHosts
	if hosts == nil {
		hosts = []string{}
	}
	if jkuHosts == nil {
		jkuHosts = []string{}
	}
	body := map[string]any{
		"name": o.Name, "shared_coordinator": o.SharedCoordinator,
		"agent_card_url": o.AgentCardURL, "allowed_hosts": hosts,
		"require_signed_receipts": o.RequireSignedReceipts,
		"require_signed_card":     o.RequireSignedCard, "card_jku_hosts": jkuHosts,
	}
	if len(o.JWKS) > 0 {
		body["jwks"] = o.JWKS
	}
	if o.JWKSURL != "" {
		body["jwks_url"] = o.JWKSURL
	}
	return body
}

// conflictError is a conflict the CLI finds before it changes anything
// (exit 3, as the API's 409).
type conflictError struct{ err error }

func (e conflictError) Error() string { return e.err.Error() }
func (e conflictError) exitCode() int { return exitConflict }

// newOrgRegisterCommand is `quittance orgs register`: a new remote org.
// Registering one with keys, an agent endpoint, the shared-coordinator flag
// or the signed-receipt requirement is a pending change a second on-call
// principal approves; a name alone applies at once.
func newOrgRegisterCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	var (
		name, jwksFile, jwksURL, agentCardURL string
		allowedHosts, jkuHosts                []string
		sharedCoordinator, requireSigned      bool
		requireSignedCard                     bool
	)
	cmd := &cobra.Command{
		Use: "register ID --name NAME [--jwks FILE | --jwks-url URL] [--agent-card-url URL --allowed-hosts H,...] " +
			"[--shared-coordinator] [--require-signed-receipts] [--require-signed-card] [--card-jku-hosts H,...]",
		Short: "Register a new remote org (on-call); with keys, an agent endpoint or a trust flag, a second on-call approves",
		Long: "register creates the org's registration (PUT /admin/v1/orgs/{id}) and prints the org, or, when a second " +
			"on-call principal must approve (keys, agent card URL, allowed hosts, shared_coordinator or " +
			"require_signed_receipts), the org as it still is with pending_change. An org that is already registered " +
			"is refused (exit 3): change it with quittance orgs update, its keys with quittance orgs keys set.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := requireFlag("name", name); err != nil {
				return err
			}
			if jwksFile != "" && jwksURL != "" {
				return usageError{errors.New("give at most one of --jwks and --jwks-url")}
			}
			org := orgRegistration{
				ID: args[0], Name: name, SharedCoordinator: sharedCoordinator, JWKSURL: jwksURL,
				AgentCardURL: agentCardURL, AllowedHosts: allowedHosts, RequireSignedReceipts: requireSigned,
				RequireSignedCard: requireSignedCard, CardJKUHosts: jkuHosts,
			}
			if jwksFile != "" {
				var err error
				if org.JWKS, err = readJWKSFile(jwksFile, cmd.InOrStdin()); err != nil {
					return usageError{err}
				}
			}
			c, err := newAPIClient(getenv)
			if err != nil {
				return err
			}
			path := "/admin/v1/orgs/" + url.PathEscape(args[0])
			var apiErr *apiError
			switch err := c.call(cmd.Context(), http.MethodGet, path, nil, nil, nil); {
			case err == nil:
				return conflictError{fmt.Errorf("org %s is already registered: change it with quittance orgs update", args[0])}
			case !errors.As(err, &apiErr) || apiErr.Status != http.StatusNotFound:
				return err
			}
			var out json.RawMessage
			if err := c.call(cmd.Context(), http.MethodPut, path, nil, org.putBody(), &out); err != nil {
				return err
			}
			return printJSON(stdout, out)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the org's display name (required)")
	cmd.Flags().StringVar(&jwksFile, "jwks", "", "file holding the org's public JWK Set, {\"keys\": [...]} (- for stdin)")
	cmd.Flags().StringVar(&jwksURL, "jwks-url", "", "the org's own JWKS URL (https), its keys fetched from there")
	cmd.Flags().StringVar(&agentCardURL, "agent-card-url", "", "the URL of the org's A2A agent card")
	cmd.Flags().StringSliceVar(&allowedHosts, "allowed-hosts", nil, "hosts the agent card's interfaces may be on, comma-separated (with --agent-card-url)")
	cmd.Flags().BoolVar(&sharedCoordinator, "shared-coordinator", false, "the org shares a transaction coordinator with us: the compensation gate does not apply")
	cmd.Flags().BoolVar(&requireSigned, "require-signed-receipts", false, "accept receipts from the org's agent only with a jws signed by the org's keys, not on the channel alone")
	addCardFlags(cmd, &requireSignedCard, &jkuHosts)
	return cmd
}

// addCardFlags adds the flags of an org's agent card signing requirements
// (ledger/DESIGN.md §4.1).
func addCardFlags(cmd *cobra.Command, requireSignedCard *bool, jkuHosts *[]string) {
	cmd.Flags().BoolVar(requireSignedCard, "require-signed-card", false, "use the org's agent card only when one of its signatures verifies with the org's keys")
	cmd.Flags().StringSliceVar(jkuHosts, "card-jku-hosts", nil, "hosts a card signature's jku may name for its key to be fetched from, comma-separated ('' for none)")
}

// newOrgUpdateCommand is `quittance orgs update`: change a registered org,
// keeping every setting whose flag is not given (its keys always; they
// change with `orgs keys set`).
func newOrgUpdateCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	var (
		name, agentCardURL               string
		allowedHosts, jkuHosts           []string
		sharedCoordinator, requireSigned bool
		requireSignedCard                bool
	)
	cmd := &cobra.Command{
		Use: "update ID [--name NAME] [--agent-card-url URL] [--allowed-hosts H,...] " +
			"[--shared-coordinator=true|false] [--require-signed-receipts=true|false] [--require-signed-card=true|false] [--card-jku-hosts H,...]",
		Short: "Change a registered org (on-call); flags not given keep their value; a second on-call approves all but the name",
		Long: "update reads the org's registration, changes what the flags say and writes it back (PUT " +
			"/admin/v1/orgs/{id}), keeping its keys. A change of the agent card URL, allowed hosts, shared_coordinator " +
			"or require_signed_receipts is a pending change a second on-call principal approves: the answer is the org " +
			"as it still is with pending_change. A change of name alone applies at once. --agent-card-url '' and " +
			"--allowed-hosts '' remove the agent endpoint. Do not run two changes to the same org at once.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			flags := cmd.Flags()
			if !flags.Changed("name") && !flags.Changed("agent-card-url") && !flags.Changed("allowed-hosts") &&
				!flags.Changed("shared-coordinator") && !flags.Changed("require-signed-receipts") &&
				!flags.Changed("require-signed-card") && !flags.Changed("card-jku-hosts") {
				return usageError{errors.New("nothing to change: give --name, --agent-card-url, --allowed-hosts, " +
					"--shared-coordinator or --require-signed-receipts (keys: quittance orgs keys set)")}
			}
			if flags.Changed("name") {
				if err := requireFlag("name", name); err != nil {
					return err
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
			if flags.Changed("name") {
				org.Name = name
			}
			if flags.Changed("agent-card-url") {
				org.AgentCardURL = agentCardURL
			}
			if flags.Changed("allowed-hosts") {
				org.AllowedHosts = allowedHosts
			}
			if flags.Changed("shared-coordinator") {
				org.SharedCoordinator = sharedCoordinator
			}
			if flags.Changed("require-signed-receipts") {
				org.RequireSignedReceipts = requireSigned
			}
			if flags.Changed("require-signed-card") {
				org.RequireSignedCard = requireSignedCard
			}
			if flags.Changed("card-jku-hosts") {
				org.CardJKUHosts = jkuHosts
			}
			var out json.RawMessage
			if err := c.call(cmd.Context(), http.MethodPut, path, nil, org.putBody(), &out); err != nil {
				return err
			}
			return printJSON(stdout, out)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "the org's display name")
	cmd.Flags().StringVar(&agentCardURL, "agent-card-url", "", "the URL of the org's A2A agent card ('' removes it)")
	cmd.Flags().StringSliceVar(&allowedHosts, "allowed-hosts", nil, "hosts the agent card's interfaces may be on, comma-separated ('' for none)")
	cmd.Flags().BoolVar(&sharedCoordinator, "shared-coordinator", false, "the org shares a transaction coordinator with us: the compensation gate does not apply")
	cmd.Flags().BoolVar(&requireSigned, "require-signed-receipts", false, "accept receipts from the org's agent only with a jws signed by the org's keys, not on the channel alone")
	addCardFlags(cmd, &requireSignedCard, &jkuHosts)
	return cmd
}

// newOrgShowCommand is `quittance orgs show ID`.
func newOrgShowCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	return newShowCommand(getenv, stdout, "show ID",
		"Show a remote org's registration (keys, agent card, allowed hosts, revocation), as JSON", 1,
		func(args []string) string { return "/admin/v1/orgs/" + url.PathEscape(args[0]) })
}

// newOrgKeysCommand is `quittance orgs keys`: the public keys an org signs
// its acks and declarations with.
func newOrgKeysCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Show, register or rotate the public keys a remote org signs acks and declarations with",
	}
	cmd.AddCommand(newOrgKeysShowCommand(getenv, stdout), newOrgKeysHistoryCommand(getenv, stdout),
		newOrgKeysRefreshCommand(getenv, stdout), newOrgKeysSetCommand(getenv, stdout))
	return cmd
}

// newOrgKeysShowCommand is `quittance orgs keys show ID`.
func newOrgKeysShowCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
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
	}
}

// newOrgKeysHistoryCommand is `quittance orgs keys history ID`.
func newOrgKeysHistoryCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
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
	}
}

// newOrgKeysRefreshCommand is `quittance orgs keys refresh ID`.
func newOrgKeysRefreshCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
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
	}
}

// newOrgAcceptCardCommand is `quittance orgs accept-card ID`.
func newOrgAcceptCardCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "accept-card ID",
		Short: "Ask that the org's changed agent card be used; a second on-call approves (on-call)",
		Long: "accept-card asks that the signing key and compensation params the last check of the org's agent card " +
			"found (agent_card.status change_awaiting_approval) become the org's pin (POST " +
			"/admin/v1/orgs/{id}/agent-card/accept), and prints the org with agent_card.pending_change: the card is " +
			"used again once a different on-call principal approves it (quittance changes approve). An org whose card " +
			"awaits no approval: exit 3.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return postAndPrint(cmd, getenv, stdout, "/admin/v1/orgs/"+url.PathEscape(args[0])+"/agent-card/accept", nil)
		},
	}
}

// newOrgKeysSetCommand is `quittance orgs keys set ID`.
func newOrgKeysSetCommand(getenv func(string) string, stdout io.Writer) *cobra.Command {
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
			body := org.putBody()
			delete(body, "jwks")
			delete(body, "jwks_url")
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
	return set
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
