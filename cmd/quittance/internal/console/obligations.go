package console

import (
	"context"
	"encoding/csv"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/csvsafe"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
)

// obligationsPage is the data of the obligations page.
type obligationsPage struct {
	// All is true for "every obligation", false for the needs-action queue.
	All       bool
	Query     url.Values
	States    []string
	AllStates []ledger.ObligationState
	Sorts     []report.QueueSort
	Page      report.QueuePage
	// Next, First and Export are links: the next page, the first page,
	// and the CSV of exactly this page's rows.
	Next, First, Export string
	// Back is this page's address, for bulk forms to return to.
	Back string
	// Threshold is the default write-off approval threshold, in minor units.
	Threshold int64
}

// parseAge reads an age such as 72h, 90m or 7d.
func parseAge(raw string) (time.Duration, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(raw, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 && n < 100000 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 {
		return 0, errors.New("use an age such as 72h or 7d")
	}
	return d, nil
}

// queueQuery reads the obligations page's filters from its query string.
// Field errors are returned by field; the query is unusable if any.
func queueQuery(v url.Values) (report.QueueQuery, bool, map[string]string) {
	errs := map[string]string{}
	all := v.Get("view") == "all"
	q := report.QueueQuery{
		OrgID: strings.TrimSpace(v.Get("org")), Tenant: strings.TrimSpace(v.Get("tenant")),
		Owner: strings.TrimSpace(v.Get("owner")), Unassigned: v.Get("unassigned") == "1",
		Currency: strings.ToUpper(strings.TrimSpace(v.Get("currency"))),
		Snoozed:  report.SnoozeFilter(v.Get("snoozed")), Sort: report.QueueSort(v.Get("sort")),
	}
	if all && q.Snoozed == "" {
		q.Snoozed = report.SnoozedShow
	}
	for _, raw := range v["state"] {
		st, err := ledger.ParseObligationState(raw)
		if err != nil {
			errs["state"] = "Not an obligation state: " + shorten(raw, 40)
			continue
		}
		q.States = append(q.States, st)
	}
	if len(q.States) == 0 && all {
		q.States = ledger.ObligationStates
	}
	var err error
	// An amount is read in its currency's minor units (a yen has none, a
	// dinar three), so a bound without a currency means nothing: it is
	// refused beside its field rather than read as if in cents.
	for _, bound := range []struct {
		field string
		minor *int64
	}{{"min", &q.MinAmountMinor}, {"max", &q.MaxAmountMinor}} {
		raw := v.Get(bound.field)
		switch {
		case strings.TrimSpace(raw) == "":
		case q.Currency == "":
			errs[bound.field] = "choose a currency too: the amount is read in its units"
		default:
			if *bound.minor, err = parseAmount(raw, q.Currency); err != nil {
				errs[bound.field] = err.Error()
			}
		}
	}
	if q.OlderThan, err = parseAge(v.Get("older")); err != nil {
		errs["older"] = err.Error()
	}
	if q.YoungerThan, err = parseAge(v.Get("younger")); err != nil {
		errs["younger"] = err.Error()
	}
	if raw := v.Get("limit"); raw != "" {
		if q.Limit, err = strconv.Atoi(raw); err != nil {
			errs["limit"] = "use a whole number"
		}
	}
	if q.After, err = report.ParseQueueCursor(v.Get("after")); err != nil {
		errs["after"] = "this page link is not valid; start from the first page"
	}
	if len(errs) == 0 {
		if _, err := q.Validate(); err != nil {
			if field, msg, ok := formError(err); ok {
				errs[queryField(field)] = msg
			}
		}
	}
	return q, all, errs
}

// queryField maps a domain field name to the page's query parameter.
func queryField(field string) string {
	switch field {
	case "min_amount":
		return "min"
	case "max_amount":
		return "max"
	case "older_than":
		return "older"
	case "younger_than":
		return "younger"
	case "org_id":
		return "org"
	}
	return field
}

// cleanQuery drops empty parameters, so shared links stay short.
func cleanQuery(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		if k == "done" {
			continue
		}
		for _, s := range vs {
			if s != "" {
				out.Add(k, s)
			}
		}
	}
	return out
}

func (c *Console) obligations(w http.ResponseWriter, r *http.Request, q *request) {
	v := cleanQuery(r.URL.Query())
	query, all, errs := queueQuery(v)
	thresholds, err := c.cfg.Compensation.ApprovalThresholds(r.Context())
	if err != nil {
		c.fail(w, r, q, err)
		return
	}
	threshold := thresholds.Default.Minor
	data := obligationsPage{
		All: all, Query: v, States: v["state"], AllStates: ledger.ObligationStates, Sorts: report.QueueSorts,
		Threshold: threshold,
	}
	data.Back = Prefix + "obligations"
	if len(v) > 0 {
		data.Back += "?" + v.Encode()
	}
	title := "Needs action"
	if all {
		title = "All obligations"
	}
	if len(errs) > 0 {
		c.render(w, r, q, http.StatusUnprocessableEntity, "obligations", view{Title: title, Nav: "obligations", Errors: errs, Form: v, Data: data})
		return
	}
	page, err := c.cfg.Cases.Queue(r.Context(), q.p, query)
	if err != nil {
		c.fail(w, r, q, err)
		return
	}
	data.Page = page
	if !page.Next.IsZero() {
		next := cleanQuery(v)
		next.Set("after", page.Next.String())
		data.Next = Prefix + "obligations?" + next.Encode()
	}
	if v.Get("after") != "" {
		first := cleanQuery(v)
		first.Del("after")
		data.First = Prefix + "obligations?" + first.Encode()
	}
	data.Export = Prefix + "obligations.csv"
	if len(v) > 0 {
		data.Export += "?" + v.Encode()
	}
	c.render(w, r, q, http.StatusOK, "obligations", view{Title: title, Nav: "obligations", Form: v, Data: data})
}

// csvColumns are the header of the console's export.
var csvColumns = []string{
	"delegation_id", "tenant", "org_id", "task_class", "budget_id", "amount_minor", "currency", "amount",
	"obligation_state", "task_status", "created_at", "age_seconds", "compensation_deadline",
	"owner", "snoozed_until", "notes", "pending_write_off_id", "last_evidence_type", "last_evidence_at",
}

func csvTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// obligationsCSV downloads exactly the rows the same query shows on the
// obligations page: the same filters, sort, cursor and page size.
func (c *Console) obligationsCSV(w http.ResponseWriter, r *http.Request, q *request) {
	query, _, errs := queueQuery(r.URL.Query())
	if len(errs) > 0 {
		c.renderError(w, r, q, http.StatusUnprocessableEntity, "Check the filters", "The export link's filters are not valid; open the obligations page and export from there.")
		return
	}
	page, err := c.cfg.Cases.Queue(r.Context(), q.p, query)
	if err != nil {
		c.fail(w, r, q, err)
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8; header=present")
	w.Header().Set("Content-Disposition", `attachment; filename="obligations-`+page.AsOf.Format("20060102T150405Z")+`.csv"`)
	cw := csv.NewWriter(w)
	cw.UseCRLF = true
	_ = cw.Write(csvColumns)
	for _, row := range page.Rows {
		pending := ""
		if row.PendingWriteOffID != uuid.Nil {
			pending = row.PendingWriteOffID.String()
		}
		_ = cw.Write([]string{
			row.DelegationID.String(), csvsafe.Text(row.Tenant), csvsafe.Text(row.OrgID), csvsafe.Text(row.TaskClass),
			csvsafe.Text(row.BudgetID), strconv.FormatInt(row.Amount.AmountMinor, 10), row.Amount.Currency,
			formatAmount(row.Amount.AmountMinor, row.Amount.Currency), string(row.ObligationState), string(row.TaskStatus),
			csvTime(row.CreatedAt), strconv.FormatInt(int64(page.AsOf.Sub(row.CreatedAt)/time.Second), 10),
			csvTime(row.CompensationDeadline), csvsafe.Text(row.Case.Owner), csvTime(row.Case.SnoozedUntil),
			strconv.Itoa(row.Case.Notes), pending, csvsafe.Text(string(row.LastEvidenceType)), csvTime(row.LastEvidenceAt),
		})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		c.log.WarnContext(r.Context(), "console export cut short", slog.Any("error", err))
	}
}

// bulkPage is the data of the bulk preview.
type bulkPage struct {
	Change  report.CaseChange
	Items   []report.BulkItem
	IDs     []string
	Changes int
	Refused int
	Back    string
	Until   string
}

// parseUntil reads a snooze date (YYYY-MM-DD): the entry comes back at
// the start of that day, UTC. Empty wakes the entry.
func parseUntil(raw string) (time.Time, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse("2006-01-02", raw)
	if err != nil {
		return time.Time{}, errors.New("use a date such as 2026-04-01")
	}
	return t.UTC(), nil
}

// bulkChange reads a bulk form's change.
func bulkChange(r *http.Request) (report.CaseChange, map[string]string) {
	ch := report.CaseChange{Kind: report.CaseChangeKind(r.PostFormValue("kind")), Owner: r.PostFormValue("owner")}
	errs := map[string]string{}
	switch ch.Kind {
	case report.CaseAssign:
	case report.CaseSnooze:
		until, err := parseUntil(r.PostFormValue("until"))
		if err != nil {
			errs["until"] = err.Error()
		} else if until.IsZero() {
			errs["until"] = "choose the date the entries come back"
		}
		ch.Until = until
		ch.Reason = r.PostFormValue("reason")
	default:
		errs["kind"] = "choose assign, snooze or redrive"
	}
	return ch, errs
}

// bulk previews a bulk change of the selected obligations (exactly what
// will change, row by row) and, once confirmed, applies it. Write-offs are
// never bulk.
func (c *Console) bulk(w http.ResponseWriter, r *http.Request, q *request) {
	back := localPath(r.PostFormValue("back"), Prefix+"obligations")
	var ids []uuid.UUID
	for _, raw := range r.PostForm["id"] {
		id, err := uuid.Parse(raw)
		if err != nil {
			c.renderError(w, r, q, http.StatusUnprocessableEntity, "Check the selection", "The selection holds something that is not an obligation id.")
			return
		}
		ids = append(ids, id)
	}
	if r.PostFormValue("kind") == "redrive" {
		c.bulkRedrive(w, r, q, ids, back)
		return
	}
	ch, errs := bulkChange(r)
	data := bulkPage{Change: ch, Back: back, Until: r.PostFormValue("until")}
	for _, id := range ids {
		data.IDs = append(data.IDs, id.String())
	}
	if len(ids) == 0 {
		errs["ids"] = "select at least one obligation on the list first"
	}
	render := func(status int) {
		c.render(w, r, q, status, "bulk", view{Title: "Bulk change", Nav: "obligations", Errors: errs, Form: r.PostForm, Data: data})
	}
	if len(errs) > 0 {
		render(http.StatusUnprocessableEntity)
		return
	}
	if r.PostFormValue("confirm") != "1" {
		items, err := c.cfg.Cases.PreviewBulk(r.Context(), q.p, ids, ch)
		if field, msg, ok := formError(err); ok {
			errs[field] = msg
			render(http.StatusUnprocessableEntity)
			return
		}
		if err != nil {
			c.fail(w, r, q, err)
			return
		}
		data.Items = items
		data.IDs = nil
		for _, it := range items {
			switch {
			case it.Refused != nil:
				data.Refused++
			case it.Changes:
				data.Changes++
				data.IDs = append(data.IDs, it.Delegation.ID.String())
			}
		}
		render(http.StatusOK)
		return
	}
	items, err := c.cfg.Cases.ApplyBulk(r.Context(), q.p, ids, ch)
	if field, msg, ok := formError(err); ok {
		errs[field] = msg
		render(http.StatusConflict)
		return
	}
	if err != nil {
		c.fail(w, r, q, err)
		return
	}
	n := 0
	for _, it := range items {
		if it.Changes {
			n++
		}
	}
	c.log.InfoContext(r.Context(), "console bulk change", slog.String("kind", string(ch.Kind)), slog.Int("changed", n), slog.String("principal", q.p.Name))
	redirect(w, r, withNotice(back, "bulk"))
}

// queueOf is a small queue read for the overview.
func (c *Console) queueOf(ctx context.Context, p ledger.Principal, q report.QueueQuery) ([]report.QueueRow, error) {
	page, err := c.cfg.Cases.Queue(ctx, p, q)
	return page.Rows, err
}
