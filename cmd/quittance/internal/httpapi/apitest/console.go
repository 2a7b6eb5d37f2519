package apitest

import (
	"net/http"

	"github.com/quittance/quittance/cmd/quittance/internal/app"
	"github.com/quittance/quittance/cmd/quittance/internal/console"
)

// withConsole serves the web console under /console/ next to the API, as
// the quittance binary does.
func withConsole(built *app.App) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, built.Console)
	mux.Handle("/", built.API)
	return mux
}

// WithOIDC offers OpenID Connect sign-in on the Env's console.
func WithOIDC(oidc *console.OIDC) Option { return func(o *options) { o.oidc = oidc } }

// WithSecureCookies marks the console's cookies Secure on the Env's plain
// http server, as the binary does behind an https QUITTANCE_PUBLIC_URL.
func WithSecureCookies() Option { return func(o *options) { o.secureCookies = true } }
