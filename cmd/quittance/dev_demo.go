package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/quittance/quittance/cmd/quittance/internal/app"
	"github.com/quittance/quittance/cmd/quittance/internal/demoagent"
	"github.com/quittance/quittance/ledger"
)

// Where `quittance dev` runs the demo supplier agent unless
// QUITTANCE_DEMO_AGENT_ADDR says otherwise (tests use port 0, a free one),
// and what it registers it as. QUITTANCE_DEMO_AGENT=off turns it off.
const (
	devDemoAddr    = "127.0.0.1:8090"
	devDemoOrgName = "Demo Supplier"
)

// devDemo is the demo supplier agent `quittance dev` runs in-process next
// to the service. A nil *devDemo (demo agent off) does nothing.
type devDemo struct {
	agent     *demoagent.Agent
	base      string
	stop      func()
	bootstrap string
	stdout    io.Writer
}

// startDevDemo starts the demo agent unless QUITTANCE_DEMO_AGENT is "off"
// (or its address is taken, which it reports and carries on without it),
// and defaults what the local walk-through needs beyond dev's loopback
// egress: the address the service listens on as its public URL for push
// notifications (runService sets it once it listens).
func startDevDemo(getenv func(string) string, cfg *config, log *slog.Logger, stdout io.Writer) (*devDemo, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("QUITTANCE_DEMO_AGENT")), "off") {
		return nil, nil
	}
	key, err := demoagent.LoadOrCreateKey(filepath.Join(cfg.DataDir, demoAgentKeyFile))
	if err != nil {
		return nil, fmt.Errorf("demo agent: %w", err)
	}
	agent, err := demoagent.New(demoagent.Config{
		LedgerID: cfg.LedgerID, Key: key, Log: log.With(slog.String("component", "demo-agent")),
	})
	if err != nil {
		return nil, err
	}
	addr := strings.TrimSpace(getenv("QUITTANCE_DEMO_AGENT_ADDR"))
	if addr == "" {
		addr = devDemoAddr
	}
	base, stop, err := serveDemoAgent(agent, addr, log)
	if err != nil {
		// Most likely a demo agent is already running there: the service
		// is still worth running without this one.
		agent.Close()
		fmt.Fprintf(stdout, "Demo supplier agent not started: %v (QUITTANCE_DEMO_AGENT=off skips it)\n", err)
		return nil, nil
	}
	cfg.publicURLFromListener = true
	return &devDemo{agent: agent, base: base, stop: stop, bootstrap: cfg.BootstrapToken, stdout: stdout}, nil
}

// close stops the agent.
func (d *devDemo) close() {
	if d == nil {
		return
	}
	d.stop()
	d.agent.Close()
}

// onReady returns the hook that registers the agent once the service is
// up, or nil when there is no demo agent.
func (d *devDemo) onReady() readyHook {
	if d == nil {
		return nil
	}
	return d.register
}

// register registers the demo agent's org through the ledger service, as
// the dev on-call token, unless it is already registered exactly so.
func (d *devDemo) register(ctx context.Context, a *app.App, _ net.Addr) error {
	svc := a.Ledger
	p, err := a.Access.Authenticate(ctx, d.bootstrap)
	if err != nil {
		return fmt.Errorf("register the demo agent: %w", err)
	}
	orgID := d.agent.OrgID()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(d.base, "http://"))
	in := ledger.OrgInput{
		Name:         devDemoOrgName,
		JWKS:         d.agent.JWKS(),
		AgentCardURL: d.agent.CardURL("http://127.0.0.1:" + port),
		// a2a.FetchAgentCard compares interface hosts without port.
		AllowedHosts: []string{"127.0.0.1"},
	}
	current, err := svc.GetOrg(ctx, p, orgID)
	if err == nil {
		// An on-call choice to require signed receipts is kept.
		in.RequireSignedReceipts = current.RequireSignedReceipts
	}
	switch {
	case err == nil && sameOrg(current, in):
		fmt.Fprintf(d.stdout, "Demo supplier agent: %s, registered as org %q (unchanged)\n", in.AgentCardURL, orgID)
		return nil
	case err != nil && !errors.Is(err, ledger.ErrNotFound):
		return fmt.Errorf("register the demo agent: %w", err)
	}
	if _, _, err := svc.PutOrg(ctx, p, orgID, in); err != nil {
		return fmt.Errorf("register the demo agent: %w", err)
	}
	fmt.Fprintf(d.stdout, "Demo supplier agent: %s, registered as org %q\n", in.AgentCardURL, orgID)
	return nil
}

// sameOrg reports whether a registered org already matches in.
func sameOrg(o ledger.Org, in ledger.OrgInput) bool {
	return o.Name == in.Name && o.AgentCardURL == in.AgentCardURL && !o.SharedCoordinator &&
		slices.Equal(o.AllowedHosts, in.AllowedHosts) && sameJSON(o.JWKS, in.JWKS)
}

func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}
