package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
	"github.com/quittance/quittance/cmd/quittance/internal/ratelimit"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/access"
	"github.com/quittance/quittance/ledger/report"
	"github.com/quittance/quittance/ledger/session"
	"github.com/quittance/quittance/ledger/webhook"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Prefix is the path the console is served under.
const Prefix = "/console/"

// SnapshotSource serves the latest remote task snapshot of a delegation
// (the A2A worker does).
type SnapshotSource interface {
	TaskSnapshot(ctx context.Context, p ledger.Principal, id uuid.UUID) (delegate.TaskSnapshot, error)
}

// RemoteTaskSource serves the extra remote tasks recorded on a delegation,
// with where the compensation of each stands (the orchestrator does, as
// for the API's remote_tasks).
type RemoteTaskSource interface {
	RemoteTasks(ctx context.Context, p ledger.Principal, id uuid.UUID) ([]delegate.RemoteTask, error)
}

// Config wires the console to the services the API uses.
type Config struct {
	Ledger *ledger.Service
	// Access signs people in and serves principals, credentials and
	// pending changes.
	Access       *access.Service
	Reports      *report.Reports
	Cases        *report.Cases
	Overview     *report.Overview
	Compensation *compensation.Service
	Sessions     *session.Service
	// Webhooks, when set, serves the webhooks page's redrive.
	Webhooks *webhook.Service
	// Snapshots, when set, shows the remote task snapshot on a delegation.
	Snapshots SnapshotSource
	// RemoteTasks, when set, lists a delegation's extra remote tasks on its
	// page, with the write-off of an open extra task compensation.
	RemoteTasks RemoteTaskSource
	// OIDC, when set, offers OpenID Connect sign-in.
	OIDC *OIDC
	// SecureCookies marks cookies Secure even on plain-http requests (the
	// service is behind a TLS-terminating proxy); requests over TLS always
	// get Secure cookies.
	SecureCookies bool
	// Limiter is the API's rate limiter, which the console shares (nil
	// limits nothing): a request holds a token of its client address's
	// bucket, given back when its session cookie or sign-in token proves
	// to be a principal's, whose bucket is charged instead.
	Limiter *ratelimit.Limiter
	Log     *slog.Logger
	// Clock tells the time ages are shown against; the system clock when nil.
	Clock ledger.Clock
}

// Console is the console's handler.
type Console struct {
	cfg   Config
	log   *slog.Logger
	clock ledger.Clock
	mux   *http.ServeMux
	pages map[string]*template.Template
}

// New builds the console's handler, to be mounted at Prefix.
func New(cfg Config) *Console {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = ledger.SystemClock{}
	}
	c := &Console{cfg: cfg, log: cfg.Log, clock: cfg.Clock, mux: http.NewServeMux(), pages: mustParseTemplates()}
	c.routes()
	return c
}

func (c *Console) routes() {
	static, _ := fs.Sub(staticFS, "static")
	files := http.StripPrefix(Prefix+"static/", http.FileServer(http.FS(static)))
	c.mux.Handle("GET "+Prefix+"static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=300")
		files.ServeHTTP(w, r)
	}))
	c.mux.HandleFunc("GET "+Prefix+"sign-in", c.signInForm)
	c.mux.HandleFunc("POST "+Prefix+"sign-in", c.signIn)
	c.mux.HandleFunc("GET "+Prefix+"oidc/login", c.oidcLogin)
	c.mux.HandleFunc("GET "+Prefix+"oidc/callback", c.oidcCallback)

	page := func(pattern string, h func(http.ResponseWriter, *http.Request, *request)) {
		c.mux.Handle(pattern, c.authenticated(h))
	}
	page("POST "+Prefix+"sign-out", c.signOut)
	page("GET "+Prefix+"{$}", c.overview)
	page("GET "+Prefix+"obligations", c.obligations)
	page("GET "+Prefix+"obligations.csv", c.obligationsCSV)
	page("POST "+Prefix+"obligations/bulk", c.bulk)
	page("GET "+Prefix+"delegations/{id}", c.delegation)
	page("POST "+Prefix+"delegations/{id}/owner", c.assignOwner)
	page("POST "+Prefix+"delegations/{id}/notes", c.addNote)
	page("POST "+Prefix+"delegations/{id}/snooze", c.snooze)
	page("POST "+Prefix+"delegations/{id}/write-offs", c.requestWriteOff)
	page("POST "+Prefix+"delegations/{id}/compensation/redrive", c.redrive)
	page("POST "+Prefix+"delegations/{id}/remote-tasks/write-off", c.writeOffExtraTask)
	page("POST "+Prefix+"delegations/{id}/remote-tasks/redrive", c.redriveExtraTask)
	page("GET "+Prefix+"write-offs", c.writeOffs)
	page("POST "+Prefix+"write-offs/{id}/approve", c.approveWriteOff)
	page("POST "+Prefix+"write-offs/{id}/reject", c.rejectWriteOff)
	page("GET "+Prefix+"orgs", c.orgs)
	page("GET "+Prefix+"orgs/{id}", c.org)
	page("POST "+Prefix+"orgs/{id}/revoke-identity", c.revokeIdentity)
	page("GET "+Prefix+"anomalies", c.anomalies)
	page("GET "+Prefix+"webhooks", c.webhooksPage)
	page("POST "+Prefix+"webhooks/redrive", c.redriveWebhooks)
	page("GET "+Prefix+"principals", c.principals)
	page("POST "+Prefix+"principals/{id}/disable", c.disablePrincipal)
	page("POST "+Prefix+"credentials/{id}/revoke", c.revokeCredential)
	page("POST "+Prefix+"pending-changes/{id}/approve", c.approveChange)
	page("POST "+Prefix+"pending-changes/{id}/refuse", c.refuseChange)
	page("POST "+Prefix+"pending-changes/{id}/confirm-link", c.confirmLink)
	c.mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		c.renderError(w, r, nil, http.StatusNotFound, "No such page", "There is no console page at this address.")
	})
}

// contentSecurityPolicy allows the console's own scripts, styles and
// images only: no inline script, no third-party host, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'; connect-src 'self'"

// ServeHTTP implements http.Handler: every response carries the security
// headers.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	// The embedded static files cost no lookup and are not limited: a
	// page would otherwise spend a token per stylesheet and script.
	if !strings.HasPrefix(r.URL.Path, Prefix+"static/") {
		h.Set("Cache-Control", "no-store")
		lk, ok, wait := c.cfg.Limiter.Lookup(r)
		if !ok {
			c.rateLimited(w, r, wait)
			return
		}
		defer lk.Refused()
		r = r.WithContext(context.WithValue(r.Context(), lookupKey{}, lk))
	}
	// Lists and figures may be read from the standby; the page says how
	// old they are (render), and consistency=strong reads the primary.
	r = r.WithContext(report.WithRead(r.Context(), r.URL.Query().Get("consistency") == "strong"))
	c.mux.ServeHTTP(&timedWriter{ResponseWriter: w, start: time.Now()}, r)
}

// lookupKey carries the client address token a console request holds
// (ratelimit.Lookup) until it proves to be a principal's.
type lookupKey struct{}

// charge charges a request that proved to be p's (a live session, a valid
// sign-in token) to p's bucket, giving its address's token back; false
// means p is over the limit, and the 429 page is written. Requests that
// prove no principal's spend their address's token.
func (c *Console) charge(w http.ResponseWriter, r *http.Request, p ledger.Principal) bool {
	lk, _ := r.Context().Value(lookupKey{}).(*ratelimit.Lookup)
	ok, wait := lk.Known(p.ID)
	if !ok {
		c.rateLimited(w, r, wait)
	}
	return ok
}

// rateLimited answers 429 with a page saying how long to wait.
func (c *Console) rateLimited(w http.ResponseWriter, r *http.Request, wait time.Duration) {
	retry := max(1, int(math.Ceil(wait.Seconds())))
	w.Header().Set("Retry-After", strconv.Itoa(retry))
	c.renderError(w, r, nil, http.StatusTooManyRequests, "Too many requests",
		"Too many requests came from your address or your session. Wait "+strconv.Itoa(retry)+" seconds, then try again; nothing was changed.")
}

// timedWriter adds a Server-Timing header ("app;dur=" milliseconds) to a
// response: the time from the request's arrival to its first byte. A page
// is rendered into a buffer before it is written, so for a page this is
// its whole server-side time, gathering and rendering; make bench reads
// it (cmd/quittance-bench/BENCHMARK.md).
type timedWriter struct {
	http.ResponseWriter
	start time.Time
	wrote bool
}

// WriteHeader implements http.ResponseWriter.
func (t *timedWriter) WriteHeader(code int) {
	if !t.wrote {
		t.wrote = true
		t.Header().Set("Server-Timing", "app;dur="+strconv.FormatFloat(float64(time.Since(t.start))/float64(time.Millisecond), 'f', 2, 64))
	}
	t.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (t *timedWriter) Write(b []byte) (int, error) {
	if !t.wrote {
		t.WriteHeader(http.StatusOK)
	}
	return t.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (t *timedWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// request is what a signed-in request carries.
type request struct {
	p         ledger.Principal
	sess      session.Session
	sessionID string
	now       time.Time
}

// csrf is the anti-forgery token of the request's session.
func (q *request) csrf() string { return session.CSRFToken(q.sessionID) }

// authenticated resolves the session cookie; without a live session, a
// GET is sent to the sign-in form and anything else refused. Every POST
// must carry the session's CSRF token (and, when the browser sends one, a
// same-origin Origin header), or it is refused with 403 before its handler
// runs: nothing is changed.
func (c *Console) authenticated(h func(http.ResponseWriter, *http.Request, *request)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := sessionCookie(r)
		sess, err := c.cfg.Sessions.Resolve(r.Context(), id)
		if err != nil {
			if !errors.Is(err, session.ErrNoSession) {
				c.fail(w, r, nil, fmt.Errorf("resolve console session: %w", err))
				return
			}
			if r.Method == http.MethodGet {
				http.Redirect(w, r, Prefix+"sign-in?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			c.renderError(w, r, nil, http.StatusForbidden, "Signed out", "Your session has ended. Sign in again; nothing was changed.")
			return
		}
		if !c.charge(w, r, sess.Principal) {
			return
		}
		q := &request{p: sess.Principal, sess: sess, sessionID: id, now: c.clock.Now().UTC()}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
			if !sameOrigin(r) || !session.ValidCSRF(id, r.PostFormValue("csrf")) {
				c.log.WarnContext(r.Context(), "console form refused: missing or wrong CSRF token", slog.String("path", r.URL.Path))
				c.renderError(w, r, q, http.StatusForbidden, "Form refused",
					"This form did not come from this console session (its anti-forgery token is missing or wrong). Nothing was changed.")
				return
			}
		}
		h(w, r, q)
	})
}

// sameOrigin is false when the browser says the request came from another
// origin.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" || origin == "null" {
		return origin == ""
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// fail shows a domain error as a page, with its kind's status (errkind):
// the kinds a console action can meet have a page of their own, any other
// is an opaque internal error that is logged.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, q *request, err error) {
	kind := errkind.Of(err)
	status := kind.Status()
	switch kind {
	case errkind.Forbidden:
		c.renderError(w, r, q, status, "Not allowed", "Your role ("+string(q.p.Role)+") may not do this. Nothing was changed.")
	case errkind.NotFound:
		c.renderError(w, r, q, status, "Not found", "There is nothing here, or you may not see it.")
	case errkind.Validation:
		var validation *ledger.ValidationError
		errors.As(err, &validation)
		c.renderError(w, r, q, status, "Check the request", validation.Error())
	case errkind.Conflict:
		var conflict *ledger.ConflictError
		errors.As(err, &conflict)
		c.renderError(w, r, q, status, "Not possible now", conflict.Detail)
	case errkind.WriteOffSelfApproval:
		c.renderError(w, r, q, status, "Another person must decide", "A write-off must be approved or rejected by a different on-call person than the one who asked for it. Nothing was changed.")
	case errkind.SelfApproval:
		c.renderError(w, r, q, status, "Another person must approve", "A privileged change must be approved by a different on-call person than the one who asked for it. Nothing was changed.")
	case errkind.IdentityNotLinked:
		c.renderError(w, r, q, status, "Another person must decide", identityNotLinked+" Nothing was changed.")
	case errkind.Unavailable:
		w.Header().Set("Retry-After", errkind.UnavailableRetryAfter)
		c.renderError(w, r, q, status, "Try again in a moment", "The ledger could not take this just now and changed nothing. Send it again in a second.")
	case errkind.OutcomeUnknown:
		c.log.ErrorContext(r.Context(), "console request of unknown outcome", slog.String("path", r.URL.Path), slog.Any("error", err))
		c.renderError(w, r, q, status, "Not known whether this was recorded", "The database connection was lost as this was being committed: it may or may not have been recorded. Reload the page to see, before you send it again.")
	case errkind.Canceled:
	default:
		c.log.ErrorContext(r.Context(), "console request failed", slog.String("path", r.URL.Path), slog.Any("error", err))
		c.renderError(w, r, q, errkind.Internal.Status(), "Something went wrong", "The error has been logged; nothing you can fix from here.")
	}
}

// identityNotLinked explains access.ErrIdentityNotLinked.
const identityNotLinked = "An identity signed in through OpenID Connect and not linked to its person's token principal may be the same person as a token principal not yet linked or marked as having no identity-provider account: link the identity (or mark the principal) first."

// formError is the message to show beside a form's field for err, and
// the field; ok is false for errors that are not about the input.
func formError(err error) (field, msg string, ok bool) {
	switch errkind.Of(err) {
	case errkind.Validation:
		var validation *ledger.ValidationError
		errors.As(err, &validation)
		return validation.Field, validation.Problem, true
	case errkind.Conflict:
		var conflict *ledger.ConflictError
		errors.As(err, &conflict)
		return "form", conflict.Detail, true
	case errkind.WriteOffSelfApproval:
		return "form", "a different on-call person must decide on this write-off", true
	case errkind.SelfApproval:
		return "form", "a different on-call person must approve this change; you asked for it (refuse it to withdraw it)", true
	case errkind.IdentityNotLinked:
		return "form", identityNotLinked, true
	default:
		return "", "", false
	}
}

// redirect answers a successful form with POST-redirect-GET.
func redirect(w http.ResponseWriter, r *http.Request, to string) {
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// withNotice adds a notice code to a console URL.
func withNotice(path, code string) string {
	u, err := url.Parse(path)
	if err != nil {
		return path
	}
	v := u.Query()
	v.Set("done", code)
	u.RawQuery = v.Encode()
	return u.String()
}

// localPath keeps a return address inside the console; anything else
// becomes fallback.
func localPath(raw, fallback string) string {
	u, err := url.Parse(raw)
	if err != nil || u.IsAbs() || u.Host != "" || !strings.HasPrefix(u.Path, Prefix) || strings.Contains(raw, "\\") {
		return fallback
	}
	return u.RequestURI()
}
