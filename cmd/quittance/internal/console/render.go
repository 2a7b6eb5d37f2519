package console

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
)

// view is what every page template receives.
type view struct {
	Title string
	// Nav names the menu entry of the page.
	Nav string
	// Me is the signed-in principal; nil on the sign-in page.
	Me   *ledger.Principal
	CSRF string
	// Notice is a confirmation of what the last form did.
	Notice string
	Now    time.Time
	// Errors holds a message per form field ("form" for the whole form).
	Errors map[string]string
	// Form holds the submitted values to show again beside the errors.
	Form url.Values
	// OIDC says whether OpenID Connect sign-in is offered.
	OIDC bool
	// DataAge, when the page's figures were read from the standby, says
	// how far behind the primary they were (ledger/DESIGN.md §7); the
	// "as of" lines show it.
	DataAge string
	Data    any
}

// Can reports whether the signed-in principal may do action: the console
// shows a control only when the service would accept it.
func (v view) Can(action string) bool {
	return v.Me != nil && v.Me.Permits(ledger.Action(action))
}

// Err is the error message of a form field, if any.
func (v view) Err(field string) string { return v.Errors[field] }

// Val is the submitted value of a form field, if any.
func (v view) Val(field string) string { return v.Form.Get(field) }

// notices are the confirmations a redirect may ask for (?done=code).
var notices = map[string]string{
	"owner":                  "Owner updated.",
	"note":                   "Note added.",
	"snooze":                 "Snooze updated. The hold has not moved.",
	"write_off":              "Write-off requested.",
	"executed":               "Write-off executed: the hold is written off.",
	"approved":               "Write-off approved and executed: the hold is written off.",
	"rejected":               "Write-off rejected. The obligation stays open and the hold active.",
	"revoked":                "Identity revoked. Its open obligations are escalated; their holds stay active.",
	"bulk":                   "Bulk change applied.",
	"redrive":                "Dead-lettered deliveries are back in the queue.",
	"signed_out":             "Signed out.",
	"redriven":               "Compensation redriven: the org's agent is asked again. The obligation stays compensation unconfirmed, hold active, until evidence arrives.",
	"extra_task_written_off": "Extra remote task written off: its compensation is no longer asked for, and the anomaly ends. No money moved.",
	"extra_task_redriven":    "Extra remote task redriven: the org's agent is asked again for its compensation. The anomaly stays until a receipt resolves it. No money moved.",
	"bulk_redriven":          "Compensation redriven for each confirmed obligation; each redrive is on its timeline. The holds stay active until evidence arrives.",
	"credential_revoked":     "Credential revoked: it is refused on every replica from now on.",
	"principal_disabled":     "Principal disabled and every credential of it revoked.",
	"change_approved":        "Change approved: it applies now.",
	"change_refused":         "Change refused. Nothing of it applies.",
	"link_confirmed":         "Link confirmed: your identity signs in as the linked principal from now on. Sign in again.",
}

func mustParseTemplates() map[string]*template.Template {
	base := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/partials.html"))
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		panic(err)
	}
	pages := map[string]*template.Template{}
	for _, name := range names {
		page := strings.TrimSuffix(path.Base(name), ".html")
		if page == "layout" || page == "partials" {
			continue
		}
		t := template.Must(base.Clone())
		pages[page] = template.Must(t.ParseFS(templateFS, name))
	}
	return pages
}

// render writes a page. q may be nil (signed out).
func (c *Console) render(w http.ResponseWriter, r *http.Request, q *request, status int, page string, v view) {
	t, ok := c.pages[page]
	if !ok {
		panic("console: no template " + page)
	}
	v.Now = c.clock.Now().UTC()
	v.OIDC = c.cfg.OIDC != nil
	if q != nil {
		me := q.p
		v.Me, v.CSRF, v.Now = &me, q.csrf(), q.now
	}
	if f, ok := report.ReadFreshness(r.Context()); ok && f.Standby {
		v.DataAge = "read from the standby, " + strconv.FormatFloat(math.Round(f.Age.Seconds()*10)/10, 'f', -1, 64) + " s behind the primary"
	}
	if code := r.URL.Query().Get("done"); code != "" && v.Notice == "" {
		v.Notice = notices[code]
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", v); err != nil {
		c.log.ErrorContext(r.Context(), "render console page", slog.String("page", page), slog.Any("error", err))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// errorPage is the data of the error page.
type errorPage struct {
	Message string
}

func (c *Console) renderError(w http.ResponseWriter, r *http.Request, q *request, status int, title, message string) {
	c.render(w, r, q, status, "error", view{Title: title, Data: errorPage{Message: message}})
}

var funcs = template.FuncMap{
	"money":      formatMoney,
	"amount":     formatAmount,
	"utc":        formatUTC,
	"ago":        formatAgo,
	"dur":        formatDuration,
	"iso":        func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"zero":       func(t time.Time) bool { return t.IsZero() },
	"label":      stateLabel,
	"stateclass": stateClass,
	"pct":        func(f float64) string { return strconv.FormatFloat(f*100, 'f', 1, 64) + "%" },
	"short":      shortID,
	"prettyjson": prettyJSON,
	"some":       func(id uuid.UUID) bool { return id != uuid.Nil },
	"join":       strings.Join,
	"contains": func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	},
	"query": func(base string, v url.Values, kv ...string) string {
		out := url.Values{}
		for k, vs := range v {
			out[k] = append([]string(nil), vs...)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				out.Del(kv[i])
			} else {
				out.Set(kv[i], kv[i+1])
			}
		}
		if len(out) == 0 {
			return base
		}
		return base + "?" + out.Encode()
	},
}

// currencyExponent is the number of minor-unit digits of an ISO 4217
// currency: 2 unless listed.
var currencyExponent = map[string]int{
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0,
	"RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
}

func exponent(currency string) int {
	if e, ok := currencyExponent[currency]; ok {
		return e
	}
	return 2
}

// formatAmount writes minor units in major units with thousands
// separators: 123456 EUR is "1,234.56".
func formatAmount(minor int64, currency string) string {
	neg := minor < 0
	if neg {
		minor = -minor
	}
	e := exponent(currency)
	div := int64(math.Pow10(e))
	whole, frac := minor/div, minor%div
	digits := strconv.FormatInt(whole, 10)
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, d := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	if e > 0 {
		fmt.Fprintf(&b, ".%0*d", e, frac)
	}
	return b.String()
}

// formatMoney is an amount with its currency: "1,234.56 EUR".
func formatMoney(minor int64, currency string) string {
	return formatAmount(minor, currency) + " " + currency
}

// parseAmount reads a decimal amount in major units into minor units of
// currency. Empty input is zero.
func parseAmount(raw, currency string) (int64, error) {
	raw = strings.ReplaceAll(strings.TrimSpace(raw), ",", "")
	if raw == "" {
		return 0, nil
	}
	e := exponent(currency)
	whole, frac, _ := strings.Cut(raw, ".")
	if whole == "" {
		whole = "0"
	}
	if len(frac) > e || strings.ContainsAny(whole+frac, "+-") {
		return 0, fmt.Errorf("use a plain amount with at most %d decimals", e)
	}
	for len(frac) < e {
		frac += "0"
	}
	n, err := strconv.ParseInt(whole+frac, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("use a plain amount such as 1500.00")
	}
	return n, nil
}

func formatUTC(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05") + " UTC"
}

// formatAgo is t relative to now: "3h 12m ago", "in 2d 4h".
func formatAgo(t, now time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	if d >= 0 {
		if d < time.Minute {
			return "just now"
		}
		return formatDuration(d) + " ago"
	}
	return "in " + formatDuration(-d)
}

// formatDuration is a duration in at most two units: "2d 4h", "3h 12m", "45s".
func formatDuration(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd %dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

var stateLabels = map[ledger.ObligationState]string{
	ledger.ObligationHeld:                          "Held",
	ledger.ObligationRevocationPendingCompensation: "Awaiting compensation",
	ledger.ObligationCompensationUnconfirmed:       "Compensation unconfirmed",
	ledger.ObligationEscalated:                     "Escalated",
	ledger.ObligationSettled:                       "Settled",
	ledger.ObligationReleased:                      "Released",
	ledger.ObligationCompensated:                   "Compensated",
	ledger.ObligationWrittenOff:                    "Written off",
}

// stateLabel is a person's name for an obligation state.
func stateLabel(s ledger.ObligationState) string {
	if l, ok := stateLabels[s]; ok {
		return l
	}
	return string(s)
}

// stateClass is the CSS class of an obligation state's badge.
func stateClass(s ledger.ObligationState) string {
	switch s {
	case ledger.ObligationCompensationUnconfirmed, ledger.ObligationEscalated:
		return "badge danger"
	case ledger.ObligationRevocationPendingCompensation:
		return "badge warn"
	case ledger.ObligationHeld:
		return "badge info"
	case ledger.ObligationWrittenOff:
		return "badge lost"
	case ledger.ObligationSettled, ledger.ObligationReleased, ledger.ObligationCompensated:
		return "badge ok"
	}
	return "badge"
}

// shortID is how lists name an id. A UUIDv7 starts with its creation time
// in milliseconds, so its leading digits are the same for every id made in
// the same minute or so; its last eight hex digits are random, and tell ids
// made together apart. Anything else (a hash) is shown by its first eight.
func shortID(s string) string {
	if id, err := uuid.Parse(s); err == nil {
		h := id.String()
		return "…" + h[len(h)-8:]
	}
	return shorten(s, 8)
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// prettyJSON indents a JSON document for display; anything else is shown
// as it is.
func prettyJSON(raw any) string {
	var b []byte
	switch v := raw.(type) {
	case json.RawMessage:
		b = v
	case []byte:
		b = v
	case string:
		b = []byte(v)
	default:
		out, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return fmt.Sprint(v)
		}
		return string(out)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, b, "", "  "); err != nil {
		return string(b)
	}
	return buf.String()
}
