package apitest

import (
	"net/http"

	"github.com/quittance/quittance/cmd/quittance/internal/console"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/session"
)

// withConsole mounts the web console under /console/ next to the API, on
// the Env's services, the way the quittance binary does.
func (e *Env) withConsole(api http.Handler, o options) http.Handler {
	clock := o.clock
	var snapshots console.SnapshotSource
	if e.Worker != nil {
		snapshots = e.Worker
	}
	e.Console = console.New(console.Config{
		Ledger: e.Ledger, Reports: e.Reports, Cases: e.Cases, Compensation: e.Compensation, Webhooks: e.Webhooks,
		Overview:  ledger.NewOverview(ledger.OverviewConfig{Store: e.Store.Overview(), Clock: clock}),
		Sessions:  session.NewService(session.Config{Store: e.Store.Sessions(), Clock: clock}),
		Snapshots: snapshots, OIDC: o.oidc, Clock: clock,
	})
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, e.Console)
	mux.Handle("/", api)
	return mux
}

// WithOIDC offers OpenID Connect sign-in on the Env's console.
func WithOIDC(oidc *console.OIDC) Option { return func(o *options) { o.oidc = oidc } }
