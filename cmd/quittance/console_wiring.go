package main

import (
	"errors"
	"log/slog"
	"strings"

	"github.com/quittance/quittance/cmd/quittance/internal/console"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/session"
	"github.com/quittance/quittance/ledger/webhook"
	"github.com/quittance/quittance/sql/pgstore"
)

// checkConsole checks the console's configuration: OIDC sign-in is all or
// nothing, and its role map must parse.
func (c config) checkConsole() error {
	if c.ConsoleSessionTTL <= 0 {
		return errors.New("QUITTANCE_CONSOLE_SESSION_TTL must be positive")
	}
	if c.OIDCIssuerURL == "" {
		return nil
	}
	if c.OIDCClientID == "" || c.OIDCRoleMap == "" || (c.OIDCRedirectURL == "" && c.PublicURL == "") {
		return errors.New("QUITTANCE_OIDC_ISSUER_URL needs QUITTANCE_OIDC_CLIENT_ID, QUITTANCE_OIDC_ROLE_MAP and QUITTANCE_OIDC_REDIRECT_URL (or QUITTANCE_PUBLIC_URL)")
	}
	if _, err := console.ParseRoleMap(c.OIDCRoleMap); err != nil {
		return errors.New("QUITTANCE_OIDC_ROLE_MAP: " + err.Error())
	}
	return nil
}

// consoleServices are the services the console shows, as runService (or
// a test) built them for the API.
type consoleServices struct {
	store        *pgstore.Store
	ledger       *ledger.Service
	reports      *ledger.Reports
	cases        *ledger.Cases
	compensation *compensation.Service
	webhooks     *webhook.Service
	snapshots    console.SnapshotSource
	clock        ledger.Clock
}

// newConsole builds the console over the services the API uses.
func newConsole(cfg config, s consoleServices, log *slog.Logger) (*console.Console, error) {
	var oidc *console.OIDC
	if cfg.OIDCIssuerURL != "" {
		roles, err := console.ParseRoleMap(cfg.OIDCRoleMap)
		if err != nil {
			return nil, err
		}
		redirect := cfg.OIDCRedirectURL
		if redirect == "" {
			redirect = strings.TrimSuffix(cfg.PublicURL, "/") + console.Prefix + "oidc/callback"
		}
		if oidc, err = console.NewOIDC(console.OIDCConfig{
			IssuerURL: cfg.OIDCIssuerURL, ClientID: cfg.OIDCClientID, ClientSecret: cfg.OIDCClientSecret,
			RedirectURL: redirect, RoleClaim: cfg.OIDCRoleClaim, Roles: roles,
		}); err != nil {
			return nil, err
		}
	}
	return console.New(console.Config{
		Ledger: s.ledger, Reports: s.reports, Cases: s.cases, Compensation: s.compensation, Webhooks: s.webhooks,
		Overview:  ledger.NewOverview(ledger.OverviewConfig{Store: s.store.Overview(), Clock: s.clock}),
		Sessions:  session.NewService(session.Config{Store: s.store.Sessions(), Clock: s.clock, TTL: cfg.ConsoleSessionTTL}),
		Snapshots: s.snapshots, OIDC: oidc, SecureCookies: strings.HasPrefix(cfg.PublicURL, "https://"),
		Log: log.With(slog.String("component", "console")), Clock: s.clock,
	}), nil
}
