package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/app"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
)

// What `quittance dev` seeds for the console walk-through: a second on-call
// person (write-offs above the threshold need one), and two canceled
// procurement delegations at an org that never answers, so that their
// obligations become compensation_unconfirmed a minute after the first
// start. QUITTANCE_DEMO_OBLIGATIONS=off seeds none;
// QUITTANCE_DEMO_COMPENSATION_TIMEOUT sets how long the demo task class
// seeks compensation (devConsoleTimeout by default), so that a test need not
// wait for it.
const (
	devSecondOncallFile = "dev-oncall-2-token"
	devConsoleBudget    = "console-demo"
	devConsoleOrg       = "silent-supplier"
	devConsoleClass     = "demo_procurement"
	devConsoleTenant    = "console-demo"
	devConsoleTimeout   = 30 * time.Second
)

// devConsole is the console part of `quittance dev`.
type devConsole struct {
	cfg    config
	stdout io.Writer
	seed   bool
	second string
	path   string
	// timeout is the demo task class's compensation timeout.
	timeout time.Duration
}

// newDevConsole reads its variables and reads or creates the second
// on-call token.
func newDevConsole(getenv func(string) string, cfg config, stdout io.Writer) (*devConsole, error) {
	d := &devConsole{cfg: cfg, stdout: stdout, path: filepath.Join(cfg.DataDir, devSecondOncallFile),
		seed: !strings.EqualFold(strings.TrimSpace(getenv("QUITTANCE_DEMO_OBLIGATIONS")), "off"), timeout: devConsoleTimeout}
	if raw := strings.TrimSpace(getenv("QUITTANCE_DEMO_COMPENSATION_TIMEOUT")); raw != "" {
		t, err := time.ParseDuration(raw)
		if err != nil || t < time.Millisecond {
			return nil, usageError{fmt.Errorf("configuration: QUITTANCE_DEMO_COMPENSATION_TIMEOUT must be a duration of at least 1ms, such as 30s")}
		}
		d.timeout = t
	}
	b, err := os.ReadFile(d.path)
	switch {
	case err == nil:
		d.second = strings.TrimSpace(string(b))
	case errors.Is(err, os.ErrNotExist):
		d.second = access.NewTokenSecret()
		if err := os.WriteFile(d.path, []byte(d.second), 0o600); err != nil {
			return nil, fmt.Errorf("save the second dev on-call token: %w", err)
		}
	default:
		return nil, fmt.Errorf("read the second dev on-call token: %w", err)
	}
	return d, nil
}

// chainHooks runs each start-up hook in turn, and joins their errors.
func chainHooks(hooks ...readyHook) readyHook {
	return func(ctx context.Context, svc *app.App, addr net.Addr) error {
		var errs []error
		for _, h := range hooks {
			if h != nil {
				errs = append(errs, h(ctx, svc, addr))
			}
		}
		return errors.Join(errs...)
	}
}

// onReady creates the second on-call token, seeds the demo obligations on
// the first start, and says how to sign in to the console at addr, where
// the service listens.
func (d *devConsole) onReady(ctx context.Context, a *app.App, addr net.Addr) error {
	svc := a.Ledger
	if _, err := a.Access.EnsureToken(ctx, access.TokenInput{Role: ledger.RoleOncall, Name: "oncall-2"}, d.second); err != nil {
		return fmt.Errorf("second dev on-call token: %w", err)
	}
	fmt.Fprintf(d.stdout, "Console: http://%s/console/\n  Sign in with the on-call token above. A second on-call person, to approve write-offs above %s,\n  signs in with (also in %s):\n  %s\n",
		addr, minorText(d.cfg.WriteOffApprovalThresholdMinor), d.path, d.second)
	if !d.seed {
		return nil
	}
	p, err := a.Access.Authenticate(ctx, d.cfg.BootstrapToken)
	if err != nil {
		return fmt.Errorf("seed demo obligations: %w", err)
	}
	if _, err := svc.GetBudget(ctx, p, devConsoleBudget); err == nil {
		return nil // seeded on an earlier start
	} else if !errors.Is(err, ledger.ErrNotFound) {
		return fmt.Errorf("seed demo obligations: %w", err)
	}
	if err := seedConsoleDemo(ctx, a, p, d.timeout); err != nil {
		return fmt.Errorf("seed demo obligations: %w", err)
	}
	fmt.Fprintf(d.stdout, "  Demo: two canceled procurement tasks at org %q, whose compensation nobody confirms,\n  become compensation_unconfirmed within a minute: find them on the console's Obligations page.\n", devConsoleOrg)
	return nil
}

// minorText writes an amount of minor units with two decimals.
func minorText(minor int64) string { return fmt.Sprintf("%d.%02d", minor/100, minor%100) }

// seedConsoleDemo records, through the ledger's own use cases, two
// delegations at an org with no agent and reports their tasks canceled.
// Their task class seeks compensation for timeout only (30 seconds unless
// configured), so the sweep soon moves them to compensation_unconfirmed; the
// holds stay.
func seedConsoleDemo(ctx context.Context, a *app.App, oncall ledger.Principal, timeout time.Duration) error {
	svc := a.Ledger
	if _, _, err := svc.PutBudget(ctx, oncall, devConsoleBudget, ledger.BudgetInput{Currency: "EUR", FundedMinor: 5_000_000, Tenants: &[]string{devConsoleTenant}}); err != nil {
		return err
	}
	if _, _, err := svc.PutOrg(ctx, oncall, devConsoleOrg, ledger.OrgInput{Name: "Silent Supplier (demo)"}); err != nil {
		return err
	}
	if _, err := svc.PutTaskClass(ctx, oncall, ledger.TaskClass{
		Name: devConsoleClass, EffectCapable: true, GateOn: []ledger.TaskStatus{ledger.StatusCanceled, ledger.StatusFailed},
		CompensationTimeout: timeout,
	}); err != nil {
		return err
	}
	issued, err := a.Access.CreateToken(ctx, oncall, access.TokenInput{Role: ledger.RoleOrchestrator, Tenant: devConsoleTenant, Name: "console-demo-orchestrator"})
	if err != nil {
		return err
	}
	tok, secret := issued.Token, issued.Secret
	orch, err := a.Access.Authenticate(ctx, secret)
	if err != nil || orch.TokenID != tok.ID {
		return fmt.Errorf("demo orchestrator token: %w", err)
	}
	for i, amount := range []int64{250_000, 40_000} {
		op := fmt.Sprintf("demo-po-%d", i+1)
		d, _, err := svc.CreateDelegation(ctx, orch, ledger.CreateInput{
			BusinessOperationID: op, OrgID: devConsoleOrg, TaskClass: devConsoleClass, BudgetID: devConsoleBudget,
			Hold: ledger.Money{AmountMinor: amount, Currency: "EUR"}, Remote: ledger.RemoteTask{TaskID: "task-" + op},
		})
		if err != nil {
			return err
		}
		if _, err := svc.RequestCancel(ctx, orch, d.ID); err != nil {
			return err
		}
		if _, err := a.Compensation.ReportTaskStatus(ctx, orch, d.ID, compensation.Observation{Status: ledger.StatusCanceled, Source: "api"}); err != nil {
			return err
		}
	}
	return nil
}
