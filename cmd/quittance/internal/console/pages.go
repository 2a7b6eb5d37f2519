package console

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
)

// stateTotal is the count and amount of one obligation state in one
// currency.
type stateTotal struct {
	State    ledger.ObligationState
	Currency string
	Count    int64
	Amount   int64
}

// overviewPage is the data of the overview.
type overviewPage struct {
	Totals      []stateTotal
	Budgets     []ledger.Budget
	Unconfirmed []report.QueueRow
	DueSoon     []report.QueueRow
	Anomalies   []report.Anomaly
	Pending     []compensation.WriteOff
	// Changes are the open privileged changes, oldest (first to expire)
	// first.
	Changes []pendingApproval
	AsOf    time.Time
}

// pendingApproval is an open privileged change as the overview lists it,
// with the page where it is approved or refused.
type pendingApproval struct {
	ledger.PendingChange
	RequestedByName string
	Where           string
}

// overviewChanges is how many open privileged changes the overview lists.
const overviewChanges = 20

// openChanges lists the open privileged changes for the overview. An org
// change is decided on its org's page, anything else on the principals
// page (which lists every change).
func (c *Console) openChanges(ctx context.Context, p ledger.Principal) ([]pendingApproval, error) {
	open, err := c.cfg.Access.ListPendingChanges(ctx, p, ledger.PendingOpen)
	if err != nil || len(open) == 0 {
		return nil, err
	}
	byID, _, err := c.principalNames(ctx, p)
	if err != nil {
		return nil, err
	}
	slices.Reverse(open)
	out := make([]pendingApproval, 0, min(len(open), overviewChanges))
	for _, ch := range open[:min(len(open), overviewChanges)] {
		where := Prefix + "principals#change-" + ch.ID.String()
		if id, _, ok := ch.OrgUpdate(); ok {
			where = Prefix + "orgs/" + url.PathEscape(id) + "#change-" + ch.ID.String()
		}
		out = append(out, pendingApproval{PendingChange: ch, RequestedByName: byID.of(ch.RequestedBy), Where: where})
	}
	return out, nil
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, q *request) {
	ctx, p := r.Context(), q.p
	rows, asOf, err := c.cfg.Reports.Summary(ctx, p, report.SummaryQuery{})
	if err != nil {
		c.fail(w, r, q, err)
		return
	}
	data := overviewPage{AsOf: asOf}
	totals := map[[2]string]*stateTotal{}
	for _, row := range rows {
		k := [2]string{string(row.ObligationState), row.Currency}
		t, ok := totals[k]
		if !ok {
			t = &stateTotal{State: row.ObligationState, Currency: row.Currency}
			totals[k] = t
		}
		t.Count += row.Count
		t.Amount += row.AmountMinor
	}
	for _, st := range ledger.ObligationStates {
		for _, t := range totals {
			if t.State == st {
				data.Totals = append(data.Totals, *t)
			}
		}
	}
	slices.SortStableFunc(data.Totals, func(a, b stateTotal) int {
		if a.State != b.State {
			return slices.Index(ledger.ObligationStates, a.State) - slices.Index(ledger.ObligationStates, b.State)
		}
		return strings.Compare(a.Currency, b.Currency)
	})
	if data.Budgets, err = c.cfg.Overview.Budgets(ctx, p); err != nil {
		c.fail(w, r, q, err)
		return
	}
	if data.Unconfirmed, err = c.queueOf(ctx, p, report.QueueQuery{
		States: []ledger.ObligationState{ledger.ObligationCompensationUnconfirmed}, Snoozed: report.SnoozedShow, Limit: 5,
	}); err != nil {
		c.fail(w, r, q, err)
		return
	}
	if data.DueSoon, err = c.queueOf(ctx, p, report.QueueQuery{
		States: []ledger.ObligationState{ledger.ObligationRevocationPendingCompensation}, Snoozed: report.SnoozedShow,
		DeadlineBefore: q.now.Add(24 * time.Hour), Sort: report.SortDeadline, Limit: 10,
	}); err != nil {
		c.fail(w, r, q, err)
		return
	}
	if data.Anomalies, err = c.cfg.Reports.Anomalies(ctx, p, report.AnomalyQuery{Since: q.now.Add(-7 * 24 * time.Hour), Limit: 10}); err != nil {
		c.fail(w, r, q, err)
		return
	}
	if data.Pending, err = c.cfg.Compensation.WriteOffs(ctx, p, compensation.WriteOffFilter{
		Statuses: []compensation.WriteOffStatus{compensation.WriteOffPendingApproval}, Limit: 20,
	}); err != nil {
		c.fail(w, r, q, err)
		return
	}
	if data.Changes, err = c.openChanges(ctx, p); err != nil {
		c.fail(w, r, q, err)
		return
	}
	c.render(w, r, q, http.StatusOK, "overview", view{Title: "Overview", Nav: "overview", Data: data})
}

// writeOffsPage is the data of the write-offs page.
type writeOffsPage struct {
	Pending   []compensation.WriteOff
	Decided   []compensation.WriteOff
	Threshold int64
	// Currencies are the currencies with thresholds of their own.
	Currencies []ledger.WriteOffThreshold
}

// Decidable reports whether the viewer may decide on w.
func (writeOffsPage) Decidable(w compensation.WriteOff, p *ledger.Principal) bool {
	return p != nil && w.DecidableBy(*p)
}

func (c *Console) writeOffs(w http.ResponseWriter, r *http.Request, q *request) {
	c.showWriteOffs(w, r, q, http.StatusOK, nil)
}

func (c *Console) showWriteOffs(w http.ResponseWriter, r *http.Request, q *request, status int, errs map[string]string) {
	ctx := r.Context()
	pending, err := c.cfg.Compensation.WriteOffs(ctx, q.p, compensation.WriteOffFilter{
		Statuses: []compensation.WriteOffStatus{compensation.WriteOffPendingApproval}, Limit: 200,
	})
	if err != nil {
		c.fail(w, r, q, err)
		return
	}
	decided, err := c.cfg.Compensation.WriteOffs(ctx, q.p, compensation.WriteOffFilter{
		Statuses: []compensation.WriteOffStatus{compensation.WriteOffExecuted, compensation.WriteOffRejected, compensation.WriteOffVoid}, Limit: 100,
	})
	if err != nil {
		c.fail(w, r, q, err)
		return
	}
	thresholds, err := c.cfg.Compensation.ApprovalThresholds(ctx)
	if err != nil {
		c.fail(w, r, q, err)
		return
	}
	var form url.Values
	if r.Method == http.MethodPost {
		form = r.PostForm
	}
	c.render(w, r, q, status, "write-offs", view{Title: "Write-offs", Nav: "write-offs", Errors: errs, Form: form,
		Data: writeOffsPage{Pending: pending, Decided: decided, Threshold: thresholds.Default.Minor, Currencies: thresholds.Currencies}})
}

// writeOffForm runs an approval or rejection; a refusal is shown beside
// the write-off on the page it came from.
func (c *Console) writeOffForm(w http.ResponseWriter, r *http.Request, q *request, notice string, do func(uuid.UUID) (compensation.WriteOffResult, error)) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		c.renderError(w, r, q, http.StatusNotFound, "Not found", "This is not a write-off id.")
		return
	}
	back := localPath(r.PostFormValue("back"), Prefix+"write-offs")
	res, err := do(id)
	if err != nil {
		c.formFailed(w, r, q, id.String(), err, func(status int, errs map[string]string) {
			if strings.HasPrefix(back, Prefix+"delegations/") {
				r.SetPathValue("id", strings.TrimPrefix(strings.SplitN(back, "?", 2)[0], Prefix+"delegations/"))
				c.showDelegation(w, r, q, status, errs)
				return
			}
			c.showWriteOffs(w, r, q, status, errs)
		})
		return
	}
	_ = res
	redirect(w, r, withNotice(back, notice))
}

func (c *Console) approveWriteOff(w http.ResponseWriter, r *http.Request, q *request) {
	c.writeOffForm(w, r, q, "approved", func(id uuid.UUID) (compensation.WriteOffResult, error) {
		return c.cfg.Compensation.ApproveWriteOff(r.Context(), q.p, id)
	})
}

func (c *Console) rejectWriteOff(w http.ResponseWriter, r *http.Request, q *request) {
	c.writeOffForm(w, r, q, "rejected", func(id uuid.UUID) (compensation.WriteOffResult, error) {
		return c.cfg.Compensation.RejectWriteOff(r.Context(), q.p, id, r.PostFormValue("reason"))
	})
}

// orgsPage is the data of the orgs page.
type orgsPage struct {
	Orgs   []ledger.Org
	Cards  map[string]report.Scorecard
	Period report.ScorecardQuery
	Since  string
	Until  string
}

// scorecardPeriod reads since/until dates (YYYY-MM-DD, until inclusive).
func scorecardPeriod(v url.Values) (report.ScorecardQuery, map[string]string) {
	errs := map[string]string{}
	var q report.ScorecardQuery
	if raw := strings.TrimSpace(v.Get("since")); raw != "" {
		t, err := time.Parse("2006-01-02", raw)
		if err != nil {
			errs["since"] = "use a date such as 2026-01-31"
		}
		q.Since = t
	}
	if raw := strings.TrimSpace(v.Get("until")); raw != "" {
		t, err := time.Parse("2006-01-02", raw)
		if err != nil {
			errs["until"] = "use a date such as 2026-01-31"
		}
		q.Until = t.Add(24 * time.Hour)
	}
	return q, errs
}

func (c *Console) orgs(w http.ResponseWriter, r *http.Request, q *request) {
	ctx := r.Context()
	v := r.URL.Query()
	period, errs := scorecardPeriod(v)
	orgs, err := c.cfg.Overview.Orgs(ctx, q.p)
	if err != nil {
		c.fail(w, r, q, err)
		return
	}
	data := orgsPage{Orgs: orgs, Cards: map[string]report.Scorecard{}}
	if len(errs) == 0 {
		cards, used, err := c.cfg.Overview.Scorecard(ctx, q.p, period)
		if field, msg, ok := formError(err); ok {
			errs[field] = msg
		} else if err != nil {
			c.fail(w, r, q, err)
			return
		}
		for _, card := range cards {
			data.Cards[card.OrgID] = card
		}
		data.Period = used
		data.Since, data.Until = used.Since.Format("2006-01-02"), used.Until.Add(-time.Nanosecond).Format("2006-01-02")
	}
	status := http.StatusOK
	if len(errs) > 0 {
		status = http.StatusUnprocessableEntity
	}
	c.render(w, r, q, status, "orgs", view{Title: "Counterparties", Nav: "orgs", Errors: errs, Form: v, Data: data})
}

// orgPage is the data of one org's page.
type orgPage struct {
	Org       ledger.Org
	Keys      []Key
	KeysError string
	// History is every key the org ever had, with when it was in force.
	History []ledger.OrgKey
	Card    *report.Scorecard
	Since   string
	Until   string
	Open    []report.QueueRow
	// Pending are the org's privileged changes waiting for a second
	// on-call person, Decided its last decided ones; Classes the task
	// class changes waiting (they apply to delegations to every org).
	Pending []changeRow
	Decided []changeRow
	Classes []changeRow
	// Policies are the task-class policies of the tenants at the org
	// (ledger/DESIGN.md §2.4), PolicyChanges those waiting for a second
	// on-call person.
	Policies      []ledger.TaskClassPolicy
	PolicyChanges []changeRow
	Back          string
}

func (c *Console) org(w http.ResponseWriter, r *http.Request, q *request) {
	c.showOrg(w, r, q, http.StatusOK, nil)
}

func (c *Console) showOrg(w http.ResponseWriter, r *http.Request, q *request, status int, errs map[string]string) {
	ctx := r.Context()
	o, err := c.cfg.Ledger.GetOrg(ctx, q.p, r.PathValue("id"))
	if err != nil {
		c.fail(w, r, q, err)
		return
	}
	data := orgPage{Org: o, Back: Prefix + "orgs/" + url.PathEscape(o.ID)}
	if data.Keys, err = orgKeys(o.KeySet()); err != nil {
		data.KeysError = err.Error()
	}
	if data.History, err = c.cfg.Ledger.OrgKeyHistory(ctx, q.p, o.ID); err != nil {
		c.fail(w, r, q, err)
		return
	}
	period, perr := scorecardPeriod(r.URL.Query())
	if errs == nil {
		errs = perr
	}
	if len(perr) == 0 {
		period.OrgID = o.ID
		cards, used, err := c.cfg.Overview.Scorecard(ctx, q.p, period)
		if err != nil {
			c.fail(w, r, q, err)
			return
		}
		for i := range cards {
			data.Card = &cards[i]
		}
		data.Since, data.Until = used.Since.Format("2006-01-02"), used.Until.Add(-time.Nanosecond).Format("2006-01-02")
	}
	if data.Open, err = c.queueOf(ctx, q.p, report.QueueQuery{OrgID: o.ID, Snoozed: report.SnoozedShow, Limit: 20}); err != nil {
		c.fail(w, r, q, err)
		return
	}
	byID, _, err := c.principalNames(ctx, q.p)
	if err != nil {
		c.fail(w, r, q, err)
		return
	}
	pending, decided, err := c.pendingChanges(ctx, q.p, byID, func(ch ledger.PendingChange) bool {
		if id, _, ok := ch.OrgUpdate(); ok {
			return id == o.ID
		}
		if pol, ok := ch.TaskClassPolicyUpdate(); ok {
			return pol.OrgID == o.ID
		}
		_, ok := ch.TaskClassUpdate()
		return ok
	})
	if err != nil {
		c.fail(w, r, q, err)
		return
	}
	for _, row := range pending {
		switch {
		case row.Org != nil:
			data.Pending = append(data.Pending, row)
		case row.Kind == ledger.ChangeTaskClassPolicyUpdate:
			data.PolicyChanges = append(data.PolicyChanges, row)
		default:
			data.Classes = append(data.Classes, row)
		}
	}
	for _, row := range decided {
		if row.Org != nil {
			data.Decided = append(data.Decided, row)
		}
	}
	if data.Policies, err = c.cfg.Ledger.ListTaskClassPolicies(ctx, q.p, o.ID); err != nil {
		c.fail(w, r, q, err)
		return
	}
	var form url.Values
	if r.Method == http.MethodPost {
		form = r.PostForm
	}
	c.render(w, r, q, status, "org", view{Title: "Org " + o.ID, Nav: "orgs", Errors: errs, Form: form, Data: data})
}

func (c *Console) revokeIdentity(w http.ResponseWriter, r *http.Request, q *request) {
	id := r.PathValue("id")
	_, _, err := c.cfg.Compensation.RevokeIdentity(r.Context(), q.p, id, r.PostFormValue("reason"))
	if err != nil {
		c.formFailed(w, r, q, "revoke", err, func(status int, errs map[string]string) { c.showOrg(w, r, q, status, errs) })
		return
	}
	redirect(w, r, withNotice(Prefix+"orgs/"+url.PathEscape(id), "revoked"))
}

// anomaliesPage is the data of the anomalies page.
type anomaliesPage struct {
	Kinds     []report.AnomalyKind
	Kind      string
	Anomalies []report.Anomaly
	Next      string
	// Refused are the refused-token totals per (org, reason), and Shared
	// the remote task ids more than one tenant recorded, on the first page
	// of all kinds or of their kind, as the API's first page carries them:
	// no event holds them.
	Refused      []report.TokenRefusalTotal
	RefusedShown bool
	Shared       []report.SharedRemoteTask
	SharedShown  bool
}

func (c *Console) anomalies(w http.ResponseWriter, r *http.Request, q *request) {
	v := r.URL.Query()
	aq := report.AnomalyQuery{Limit: 50}
	errs := map[string]string{}
	if k := v.Get("kind"); k != "" {
		aq.Kinds = []report.AnomalyKind{report.AnomalyKind(k)}
	}
	if raw := v.Get("after"); raw != "" {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n < 0 {
			errs["after"] = "this page link is not valid"
		}
		aq.AfterSeq = n
	}
	data := anomaliesPage{Kinds: slices.Concat(report.AnomalyKinds, []report.AnomalyKind{report.AnomalySharedRemoteTask}), Kind: v.Get("kind")}
	if len(errs) == 0 {
		list, err := c.cfg.Reports.Anomalies(r.Context(), q.p, aq)
		if field, msg, ok := formError(err); ok {
			errs[field] = msg
		} else if err != nil {
			c.fail(w, r, q, err)
			return
		}
		data.Anomalies = list
		if aq.AfterSeq == 0 && (data.Kind == "" || data.Kind == string(report.AnomalyRefusedToken)) {
			if data.Refused, err = c.cfg.Reports.TokenRefusals(r.Context(), q.p, time.Time{}); err != nil {
				c.fail(w, r, q, err)
				return
			}
			data.RefusedShown = true
		}
		if aq.AfterSeq == 0 && (data.Kind == "" || data.Kind == string(report.AnomalySharedRemoteTask)) {
			if data.Shared, err = c.cfg.Reports.SharedRemoteTasks(r.Context(), q.p); err != nil {
				c.fail(w, r, q, err)
				return
			}
			data.SharedShown = true
		}
		if len(list) == aq.Limit {
			next := url.Values{"after": {strconv.FormatInt(list[len(list)-1].Seq, 10)}}
			if data.Kind != "" {
				next.Set("kind", data.Kind)
			}
			data.Next = Prefix + "anomalies?" + next.Encode()
		}
	}
	status := http.StatusOK
	if len(errs) > 0 {
		status = http.StatusUnprocessableEntity
	}
	c.render(w, r, q, status, "anomalies", view{Title: "Anomalies", Nav: "anomalies", Errors: errs, Form: v, Data: data})
}

// webhooksPage is the data of the webhooks page.
type webhooksPage struct {
	Available bool
	Redriven  string
}

func (c *Console) webhooksPage(w http.ResponseWriter, r *http.Request, q *request) {
	c.render(w, r, q, http.StatusOK, "webhooks", view{Title: "Webhooks", Nav: "webhooks",
		Data: webhooksPage{Available: c.cfg.Webhooks != nil, Redriven: r.URL.Query().Get("n")}})
}

func (c *Console) redriveWebhooks(w http.ResponseWriter, r *http.Request, q *request) {
	if c.cfg.Webhooks == nil {
		c.renderError(w, r, q, http.StatusNotFound, "Not served", "Webhooks are not served by this instance.")
		return
	}
	tenant, endpoint := strings.TrimSpace(r.PostFormValue("tenant")), strings.TrimSpace(r.PostFormValue("endpoint"))
	n, err := c.cfg.Webhooks.Redrive(r.Context(), q.p, tenant, endpoint)
	if err != nil {
		field, msg, ok := formError(err)
		if !ok {
			c.fail(w, r, q, err)
			return
		}
		c.render(w, r, q, http.StatusUnprocessableEntity, "webhooks", view{Title: "Webhooks", Nav: "webhooks",
			Errors: map[string]string{field: msg}, Form: r.PostForm, Data: webhooksPage{Available: true}})
		return
	}
	redirect(w, r, withNotice(Prefix+"webhooks?n="+strconv.Itoa(n), "redrive"))
}
