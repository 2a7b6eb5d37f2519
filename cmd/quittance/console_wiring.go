package main

import (
	"errors"
	"strings"

	"github.com/quittance/quittance/cmd/quittance/internal/app"
	"github.com/quittance/quittance/cmd/quittance/internal/console"
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

// consoleConfig is the console's part of the app's configuration: session
// lifetime, Secure cookies behind an https public URL, and OpenID Connect
// sign-in when an issuer is configured.
func (c config) consoleConfig() (app.ConsoleConfig, error) {
	out := app.ConsoleConfig{SessionTTL: c.ConsoleSessionTTL, SecureCookies: strings.HasPrefix(c.PublicURL, "https://")}
	if c.OIDCIssuerURL == "" {
		return out, nil
	}
	roles, err := console.ParseRoleMap(c.OIDCRoleMap)
	if err != nil {
		return out, err
	}
	redirect := c.OIDCRedirectURL
	if redirect == "" {
		redirect = strings.TrimSuffix(c.PublicURL, "/") + console.Prefix + "oidc/callback"
	}
	out.OIDC, err = console.NewOIDC(console.OIDCConfig{
		IssuerURL: c.OIDCIssuerURL, ClientID: c.OIDCClientID, ClientSecret: c.OIDCClientSecret,
		RedirectURL: redirect, RoleClaim: c.OIDCRoleClaim, Roles: roles,
	})
	return out, err
}
