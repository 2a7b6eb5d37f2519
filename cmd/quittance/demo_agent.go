package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/quittance/quittance/cmd/quittance/internal/demoagent"
)

// demoAgentKeyFile is the demo agent's signing key, under the data
// directory unless --key-file says otherwise.
const demoAgentKeyFile = "demo-agent-key.pem"

func newDemoAgentCommand(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	var (
		addr, orgID, ledgerID, keyFile string
		compensationMode               string
		workDelay, pendingDelay        time.Duration
		atomicCancel, purgeOnCancel    bool
	)
	cmd := &cobra.Command{
		Use:   "demo-agent",
		Short: "Run a demo supplier's A2A agent that commits purchase orders and honours compensation requests",
		Long: "demo-agent serves an A2A v1.0 JSON-RPC agent playing a supplier org. A procurement task commits a " +
			"purchase order as soon as it starts working and completes after --work-delay; canceling the task " +
			"leaves the purchase order in place, and a compensation request (https://quittance.dev/a2a/compensation/v1) " +
			"reverses it and returns a receipt signed with the org's Ed25519 key (created in --key-file on first run; " +
			"the public JWK Set is served at /.well-known/jwks.json). `quittance dev` runs one itself.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyFile == "" {
				dataDir := getenv("QUITTANCE_DATA_DIR")
				if dataDir == "" {
					dataDir = "./.quittance"
				}
				keyFile = filepath.Join(dataDir, demoAgentKeyFile)
			}
			key, err := demoagent.LoadOrCreateKey(keyFile)
			if err != nil {
				return err
			}
			log := newLogger(stderr, slog.LevelInfo)
			agent, err := demoagent.New(demoagent.Config{
				OrgID: orgID, LedgerID: ledgerID, WorkDelay: workDelay, Key: key, AtomicCancel: atomicCancel, Log: log,
				Compensation: compensationMode, PendingDelay: pendingDelay, PurgeOnCancel: purgeOnCancel,
			})
			if err != nil {
				return usageError{err}
			}
			defer agent.Close()
			base, stop, err := serveDemoAgent(agent, addr, log)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "Demo agent for org %q: card %s, JWK Set %s\n", agent.OrgID(), agent.CardURL(base), base+demoagent.JWKSPath)
			<-cmd.Context().Done()
			stop()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:8090", "address to listen on")
	f.StringVar(&orgID, "org-id", demoagent.DefaultOrgID, "org id the agent signs receipts as (their iss)")
	f.StringVar(&ledgerID, "ledger-id", demoagent.DefaultLedgerID, "ledger id receipts are addressed to (their aud)")
	f.DurationVar(&workDelay, "work-delay", demoagent.DefaultWorkDelay, "how long a procurement task works before it completes")
	f.StringVar(&keyFile, "key-file", "", "Ed25519 signing key, PKCS #8 PEM, created if missing (default $QUITTANCE_DATA_DIR/"+demoAgentKeyFile+")")
	f.BoolVar(&atomicCancel, "atomic-cancel", false, "declare atomicCancel and return a compensation receipt with every cancel")
	f.StringVar(&compensationMode, "compensation", demoagent.CompensationImmediate,
		"how compensation requests are answered: immediate, pending (a pending receipt, the final one after --pending-delay) or not_supported")
	f.DurationVar(&pendingDelay, "pending-delay", demoagent.DefaultPendingDelay, "how long a pending compensation works before its final receipt")
	f.BoolVar(&purgeOnCancel, "purge-on-cancel", false,
		"forget a task when asked to cancel it, as an agent with a short retention does: the cancel and every later call on the task answer TaskNotFoundError (-32001), and its purchase order stands")
	return cmd
}

// serveDemoAgent serves agent on addr and returns its base URL and a
// function that shuts it down.
func serveDemoAgent(agent *demoagent.Agent, addr string, log *slog.Logger) (string, func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("demo agent: listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           agent.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go srv.Serve(l)
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}
	return "http://" + l.Addr().String(), stop, nil
}
