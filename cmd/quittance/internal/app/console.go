package app

import (
	"log/slog"
	"time"

	"github.com/quittance/quittance/cmd/quittance/internal/console"
	"github.com/quittance/quittance/cmd/quittance/internal/ratelimit"
	"github.com/quittance/quittance/ledger/report"
	"github.com/quittance/quittance/ledger/session"
)

// ConsoleConfig tunes the web console served under console.Prefix.
type ConsoleConfig struct {
	// SessionTTL is how long a console sign-in lasts
	// (session.DefaultTTL when zero).
	SessionTTL time.Duration
	// OIDC, when set, offers OpenID Connect sign-in.
	OIDC *console.OIDC
	// SecureCookies marks the console's cookies Secure even on plain-http
	// requests (behind a TLS-terminating proxy).
	SecureCookies bool
}

// newConsole builds the console over the services the API uses, behind
// the API's rate limiter.
func newConsole(cfg Config, a *App, log *slog.Logger, limiter *ratelimit.Limiter) *console.Console {
	return console.New(console.Config{
		Ledger: a.Ledger, Access: a.Access, Reports: a.Reports, Cases: a.Cases, Compensation: a.Compensation, Webhooks: a.Webhooks,
		Overview:  report.NewOverview(report.OverviewConfig{Store: a.Reads.Overview(), Clock: cfg.Clock}),
		Sessions:  session.NewService(session.Config{Store: a.Store.Sessions(), Clock: cfg.Clock, TTL: cfg.Console.SessionTTL}),
		Snapshots: a.Orchestrator, RemoteTasks: a.Orchestrator, OIDC: cfg.Console.OIDC, SecureCookies: cfg.Console.SecureCookies,
		Limiter: limiter, Log: log.With(slog.String("component", "console")), Clock: cfg.Clock,
	})
}
