package httpapi

import (
	"context"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/csvsafe"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
)

// ObligationBody is one obligation as GET /v1/obligations lists it. The
// CSV export has one column per field, named like the JSON field, in this
// order; money is integer minor units plus the currency.
type ObligationBody struct {
	DelegationID          string     `json:"delegation_id" format:"uuid"`
	Tenant                string     `json:"tenant"`
	OrgID                 string     `json:"org_id"`
	TaskClass             string     `json:"task_class"`
	BudgetID              string     `json:"budget_id"`
	AmountMinor           int64      `json:"amount_minor" doc:"The held amount in integer minor units."`
	Currency              string     `json:"currency" doc:"ISO 4217 currency of amount_minor."`
	RemoteTaskID          string     `json:"remote_task_id"`
	TaskStatus            string     `json:"task_status"`
	ObligationState       string     `json:"obligation_state"`
	ObligationReason      string     `json:"obligation_reason"`
	CreatedAt             time.Time  `json:"created_at"`
	AgeSeconds            int64      `json:"age_seconds" doc:"Seconds since created_at, at the time of the response."`
	CancelRequestedAt     *time.Time `json:"cancel_requested_at"`
	CompensationDeadline  *time.Time `json:"compensation_deadline"`
	CompensationAttempts  int        `json:"compensation_attempts"`
	CompensationLastError string     `json:"compensation_last_error"`
	LastEvidenceType      string     `json:"last_evidence_type" doc:"Type of the last event in the delegation's audit stream."`
	LastEvidenceAt        time.Time  `json:"last_evidence_at"`
	DispatchUnknownAt     *time.Time `json:"dispatch_unknown_at,omitempty" doc:"When the delegation entered the dispatch_unknown condition: nothing proves whether the remote created a task; the hold stays. Absent when not in it."`
	TaskNotFoundAt        *time.Time `json:"task_not_found_at,omitempty" doc:"When the delegation entered the task_not_found condition: its agent answered TaskNotFoundError for the delegation's task (it may have purged it), which proves nothing of its end or effects; the hold stays. Absent when not in it."`
}

// obligationColumns are the CSV header: the JSON field names, in order.
var obligationColumns = []string{
	"delegation_id", "tenant", "org_id", "task_class", "budget_id", "amount_minor", "currency",
	"remote_task_id", "task_status", "obligation_state", "obligation_reason", "created_at", "age_seconds",
	"cancel_requested_at", "compensation_deadline", "compensation_attempts", "compensation_last_error",
	"last_evidence_type", "last_evidence_at",
}

func obligationBody(o report.ObligationRow, now time.Time) ObligationBody {
	return ObligationBody{
		DelegationID: o.DelegationID.String(), Tenant: o.Tenant, OrgID: o.OrgID, TaskClass: o.TaskClass,
		BudgetID: o.BudgetID, AmountMinor: o.Amount.AmountMinor, Currency: o.Amount.Currency,
		RemoteTaskID: o.RemoteTaskID, TaskStatus: string(o.TaskStatus), ObligationState: string(o.ObligationState),
		ObligationReason: o.ObligationReason, CreatedAt: o.CreatedAt, AgeSeconds: int64(now.Sub(o.CreatedAt) / time.Second),
		CancelRequestedAt: timePtr(o.CancelRequestedAt), CompensationDeadline: timePtr(o.CompensationDeadline),
		DispatchUnknownAt: timePtr(o.DispatchUnknownAt), TaskNotFoundAt: timePtr(o.TaskNotFoundAt),
		CompensationAttempts: o.CompensationAttempts, CompensationLastError: o.CompensationLastError,
		LastEvidenceType: string(o.LastEvidenceType), LastEvidenceAt: o.LastEvidenceAt,
	}
}

// csvRecord renders b as CSV cells, in obligationColumns order. Free-text
// cells are guarded against spreadsheet formula injection.
func (b ObligationBody) csvRecord() []string {
	return []string{
		b.DelegationID, csvText(b.Tenant), csvText(b.OrgID), csvText(b.TaskClass), csvText(b.BudgetID),
		strconv.FormatInt(b.AmountMinor, 10), csvText(b.Currency), csvText(b.RemoteTaskID), b.TaskStatus,
		b.ObligationState, csvText(b.ObligationReason), csvTime(&b.CreatedAt), strconv.FormatInt(b.AgeSeconds, 10),
		csvTime(b.CancelRequestedAt), csvTime(b.CompensationDeadline), strconv.Itoa(b.CompensationAttempts),
		csvText(b.CompensationLastError), csvText(b.LastEvidenceType), csvTime(&b.LastEvidenceAt),
	}
}

// csvText guards a free-text cell against formula injection (OWASP "CSV
// injection"), by csvsafe's one rule.
func csvText(s string) string { return csvsafe.Text(s) }

func csvTime(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// ObligationListBody is a page of obligations.
type ObligationListBody struct {
	AsOf        time.Time        `json:"as_of" doc:"The time ages are measured at."`
	Obligations []ObligationBody `json:"obligations"`
	NextCursor  string           `json:"next_cursor,omitempty" doc:"Pass as cursor for the next page; absent on the last page."`
}

// SummaryBucketBody is a count and an amount of one age bucket.
type SummaryBucketBody struct {
	Count       int64 `json:"count"`
	AmountMinor int64 `json:"amount_minor"`
}

// SummaryRowBody is the active holds of one org, currency and state.
type SummaryRowBody struct {
	OrgID           string `json:"org_id"`
	Currency        string `json:"currency"`
	ObligationState string `json:"obligation_state"`
	Count           int64  `json:"count"`
	AmountMinor     int64  `json:"amount_minor"`
	// AgeBuckets are by creation time: under 1 day, 1 to 7 days, 7 to 30
	// days, over 30 days.
	AgeBuckets map[string]SummaryBucketBody `json:"age_buckets" doc:"Keys lt_1d, 1d_7d, 7d_30d, gt_30d."`
}

// RevokedReleaseTotalBody is the obligations of one org, in one currency,
// released on its declarations before its identity was revoked, and not
// yet acknowledged by finance.
type RevokedReleaseTotalBody struct {
	OrgID       string `json:"org_id"`
	Currency    string `json:"currency"`
	Count       int64  `json:"count"`
	AmountMinor int64  `json:"amount_minor"`
}

// AnomalyBody is one anomaly.
type AnomalyBody struct {
	Seq             int64     `json:"seq"`
	Kind            string    `json:"kind" enum:"status_conflict,late_evidence,contradicted_write_off,refused_token,evidence_conflict,unused_early_evidence,released_on_revoked_identity,extra_task_compensation"`
	EventType       string    `json:"event_type"`
	DelegationID    string    `json:"delegation_id,omitempty"`
	OrgID           string    `json:"org_id,omitempty"`
	Tenant          string    `json:"tenant,omitempty"`
	ObligationState string    `json:"obligation_state,omitempty"`
	At              time.Time `json:"at"`
	Actor           string    `json:"actor"`
	Data            any       `json:"data"`
}

// RefusedTokensBody is the refused signed evidence of one (org, reason):
// how many, since when, and the last few, each by its sha256 only.
type RefusedTokensBody struct {
	OrgID         string               `json:"org_id,omitempty" doc:"The registered org the tokens named; absent when they named none (or could not be read)."`
	OrgRegistered bool                 `json:"org_registered"`
	Reason        string               `json:"reason" doc:"The server-side refusal code (token_signature_invalid, token_org_unknown, token_delegation_unknown, ...); the poster was told only token_refused unless its token verified."`
	Refused       int64                `json:"refused" doc:"How many tokens were refused for this org and reason."`
	FirstAt       time.Time            `json:"first_at"`
	LastAt        time.Time            `json:"last_at"`
	Samples       []RefusedTokenSample `json:"samples" doc:"The latest refusals kept (at most 10), newest first."`
}

// RefusedTokenSample is one kept refused token.
type RefusedTokenSample struct {
	Kind          string    `json:"kind" doc:"compensation-ack+jwt or no-compensation-required+jwt: the endpoint it was posted to."`
	TokenSHA256   string    `json:"token_sha256" doc:"The token itself is never kept."`
	TokenBytes    int       `json:"token_bytes"`
	ClaimedIssuer string    `json:"claimed_issuer,omitempty" doc:"The unverified iss, at most 128 bytes."`
	ClientAddress string    `json:"client_address"`
	At            time.Time `json:"at"`
}

// SharedRemoteTaskBody is a remote task id recorded by delegations of
// more than one tenant.
type SharedRemoteTaskBody struct {
	OrgID         string    `json:"org_id"`
	RemoteTaskID  string    `json:"remote_task_id"`
	DelegationIDs []string  `json:"delegation_ids"`
	Tenants       []string  `json:"tenants"`
	LastCreatedAt time.Time `json:"last_created_at" doc:"When the latest of these delegations was created."`
}

// ChainBody is a delegation's event chain, as GET
// /v1/delegations/{id}/evidence returns it.
type ChainBody struct {
	DelegationID string        `json:"delegation_id"`
	OrgID        string        `json:"org_id"`
	RemoteTaskID string        `json:"remote_task_id"`
	LedgerID     string        `json:"ledger_id" doc:"The audience signed tokens must name."`
	Stream       string        `json:"stream"`
	Events       []EventRecord `json:"events" doc:"Each with everything needed to recompute its hash (ledger.Event.ComputeHash) and re-verify its token."`
}

// parseOlderThan accepts a Go duration or a whole number of days ("7d").
func parseOlderThan(raw string) (time.Duration, error) {
	if raw == "" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(raw, "d"); ok {
		n, err := strconv.Atoi(days)
		if err == nil && n >= 0 && n < 100000 {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 {
		return 0, ledger.Invalid("older_than", "must be a duration such as 72h or 7d")
	}
	return d, nil
}

func parseStates(raw []string) ([]ledger.ObligationState, error) {
	var out []ledger.ObligationState
	for _, r := range raw {
		for _, s := range strings.Split(r, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			st, err := ledger.ParseObligationState(s)
			if err != nil {
				return nil, ledger.Invalid("state", "%q is not an obligation state", s)
			}
			out = append(out, st)
		}
	}
	return out, nil
}

// obligationCursor encodes the position after a row: "<unix micros>.<uuid>".
func encodeObligationCursor(c report.ObligationCursor) string {
	return strconv.FormatInt(c.CreatedAt.UnixMicro(), 10) + "." + c.ID.String()
}

func decodeObligationCursor(raw string) (report.ObligationCursor, error) {
	if raw == "" {
		return report.ObligationCursor{}, nil
	}
	micros, id, ok := strings.Cut(raw, ".")
	us, err1 := strconv.ParseInt(micros, 10, 64)
	uid, err2 := uuid.Parse(id)
	if !ok || err1 != nil || err2 != nil {
		return report.ObligationCursor{}, ledger.Invalid("cursor", "is not one this API issued")
	}
	return report.ObligationCursor{CreatedAt: time.UnixMicro(us).UTC(), ID: uid}, nil
}

// registerReporting is the route table of reconciliation: obligations,
// their summary, anomalies and evidence, served when reports are.
func (s *Server) registerReporting() {
	if s.reports == nil {
		return
	}
	tags := []string{"reconciliation"}
	listSchema := s.api.OpenAPI().Components.Schemas.Schema(reflect.TypeFor[ObligationListBody](), true, "ObligationList")
	huma.Register(s.api, huma.Operation{
		OperationID: "list-obligations", Method: http.MethodGet, Path: "/v1/obligations", Tags: tags,
		Summary: "List obligations for reconciliation (JSON or CSV)",
		Description: "Open obligations by default (revocation_pending_compensation, compensation_unconfirmed, escalated), oldest first. " +
			"format=csv (or Accept: text/csv) streams the whole selection from one database snapshot as RFC 4180 CSV whose header is the JSON field names; " +
			"free-text cells that a spreadsheet would evaluate are prefixed with a single quote. Roles finance and oncall." + consistencyDoc,
		Security: bearerAuth,
		Responses: map[string]*huma.Response{"200": {
			Description: "The obligations.",
			Content: map[string]*huma.MediaType{
				"application/json": {Schema: listSchema},
				"text/csv":         {Schema: &huma.Schema{Type: "string"}},
			},
		}},
	}, s.listObligations)

	huma.Register(s.api, huma.Operation{
		OperationID: "obligation-summary", Method: http.MethodGet, Path: "/v1/obligations/summary", Tags: tags,
		Summary:     "Active holds by org, currency and state, with age buckets",
		Description: "Counts and amounts (integer minor units) of active holds, with age buckets lt_1d, 1d_7d, 7d_30d and gt_30d by creation time. Roles finance and oncall." + consistencyDoc,
		Security:    bearerAuth,
	}, s.obligationSummary)

	huma.Register(s.api, huma.Operation{
		OperationID: "list-anomalies", Method: http.MethodGet, Path: "/v1/anomalies", Tags: tags,
		Summary: "Status conflicts, late evidence, write-offs contradicted by later acks, refused tokens",
		Description: "Anomaly events, oldest first. kind contradicted_write_off is late evidence whose data has contradicts_write_off true. " +
			"The first page (no cursor) also carries refused_tokens (refused signed evidence counted by org and reason, with samples) " +
			"and shared_remote_tasks (task ids recorded by more than one tenant), which are not events. Roles finance and oncall." + consistencyDoc,
		Security: bearerAuth,
	}, s.listAnomalies)

	huma.Register(s.api, huma.Operation{
		OperationID: "delegation-evidence", Method: http.MethodGet, Path: "/v1/delegations/{id}/evidence", Tags: tags,
		Summary: "The delegation's hash-chained event log with every stored token",
		Description: "Everything `quittance verify-chain` needs to recompute each event's hash and re-verify each stored signed token " +
			"against the org's registered keys. Roles finance and oncall.",
		Security: bearerAuth,
	}, s.delegationEvidence)
}

type listObligationsInput struct {
	State     []string `query:"state,explode" doc:"Obligation states to list (repeat or comma-separate); default revocation_pending_compensation, compensation_unconfirmed and escalated."`
	OrgID     string   `query:"org_id"`
	Tenant    string   `query:"tenant"`
	Condition string   `query:"condition" enum:"dispatch_unknown,task_not_found" doc:"Only delegations in this condition: dispatch_unknown (nothing proves whether the remote created a task) or task_not_found (the agent no longer knows the delegation's task); with either and no state given, every active state is listed."`
	OlderThan string   `query:"older_than" doc:"Only obligations created longer ago than this Go duration (e.g. 72h) or number of days (e.g. 7d)."`
	Format    string   `query:"format" enum:"json,csv" doc:"json (default, paged) or csv (the whole selection, streamed)."`
	Limit     int      `query:"limit" minimum:"0" maximum:"1000" doc:"JSON page size (default 100); ignored for csv."`
	Cursor    string   `query:"cursor" doc:"next_cursor of the previous JSON page."`
	Accept    string   `header:"Accept"`
	ReadConsistency
}

type streamOutput struct {
	Body func(huma.Context)
}

// listObligations serves GET /v1/obligations: list obligations for
// reconciliation (JSON or CSV).
func (s *Server) listObligations(ctx context.Context, in *listObligationsInput) (*streamOutput, error) {
	states, err := parseStates(in.State)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	olderThan, err := parseOlderThan(in.OlderThan)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	q := report.ObligationQuery{States: states, OrgID: in.OrgID, Tenant: in.Tenant, OlderThan: olderThan, Condition: in.Condition}
	csvWanted := in.Format == "csv" || (in.Format == "" && strings.Contains(in.Accept, "text/csv"))
	if csvWanted {
		// A refusal (access, arguments) comes before the first row, and
		// streamObligationsCSV answers it as a problem.
		return &streamOutput{Body: func(hctx huma.Context) { s.streamObligationsCSV(ctx, hctx, q) }}, nil
	}
	if q.After, err = decodeObligationCursor(in.Cursor); err != nil {
		return nil, s.fail(ctx, err)
	}
	q.Limit = in.Limit
	if q.Limit == 0 {
		q.Limit = report.DefaultReportLimit
	}
	var rows []report.ObligationRow
	now, err := s.reports.EachObligation(ctx, principal(ctx), q, func(o report.ObligationRow) error {
		rows = append(rows, o)
		return nil
	})
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	body := ObligationListBody{AsOf: now, Obligations: make([]ObligationBody, len(rows))}
	for i, o := range rows {
		body.Obligations[i] = obligationBody(o, now)
	}
	if len(rows) == q.Limit {
		body.NextCursor = encodeObligationCursor(rows[len(rows)-1].Cursor())
	}
	return &streamOutput{Body: func(hctx huma.Context) {
		hctx.SetHeader("Content-Type", "application/json")
		hctx.SetStatus(http.StatusOK)
		_ = jsonEncode(hctx.BodyWriter(), body)
	}}, nil
}

type summaryInput struct {
	State  []string `query:"state,explode" doc:"States to include; default the active ones (held and the three open obligation states)."`
	OrgID  string   `query:"org_id"`
	Tenant string   `query:"tenant"`
	ReadConsistency
}

type summaryOutput struct {
	Body struct {
		AsOf time.Time        `json:"as_of"`
		Rows []SummaryRowBody `json:"rows"`
		// RevokedIdentityReleases is not filtered by state.
		RevokedIdentityReleases []RevokedReleaseTotalBody `json:"revoked_identity_releases" doc:"Obligations released on declarations of orgs whose identity was revoked since, not yet acknowledged by finance, by org and currency (the org_id and tenant filters apply, state does not)."`
	}
}

// obligationSummary serves GET /v1/obligations/summary: active holds by org,
// currency and state, with age buckets.
func (s *Server) obligationSummary(ctx context.Context, in *summaryInput) (*summaryOutput, error) {
	states, err := parseStates(in.State)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	rows, now, err := s.reports.Summary(ctx, principal(ctx), report.SummaryQuery{States: states, OrgID: in.OrgID, Tenant: in.Tenant})
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &summaryOutput{}
	out.Body.AsOf = now
	out.Body.Rows = make([]SummaryRowBody, len(rows))
	for i, r := range rows {
		out.Body.Rows[i] = SummaryRowBody{
			OrgID: r.OrgID, Currency: r.Currency, ObligationState: string(r.ObligationState), Count: r.Count, AmountMinor: r.AmountMinor,
			AgeBuckets: map[string]SummaryBucketBody{
				"lt_1d":  {Count: r.Under1Day.Count, AmountMinor: r.Under1Day.AmountMinor},
				"1d_7d":  {Count: r.Days1To7.Count, AmountMinor: r.Days1To7.AmountMinor},
				"7d_30d": {Count: r.Days7To30.Count, AmountMinor: r.Days7To30.AmountMinor},
				"gt_30d": {Count: r.Over30Days.Count, AmountMinor: r.Over30Days.AmountMinor},
			},
		}
	}
	totals, err := s.reports.RevokedReleaseTotals(ctx, principal(ctx), report.SummaryQuery{OrgID: in.OrgID, Tenant: in.Tenant})
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out.Body.RevokedIdentityReleases = make([]RevokedReleaseTotalBody, len(totals))
	for i, t := range totals {
		out.Body.RevokedIdentityReleases[i] = RevokedReleaseTotalBody(t)
	}
	return out, nil
}

type anomaliesInput struct {
	Kind   []string  `query:"kind,explode" doc:"status_conflict, late_evidence, contradicted_write_off, refused_token, evidence_conflict, unused_early_evidence, released_on_revoked_identity, shared_remote_task, extra_task_compensation; default all."`
	Since  time.Time `query:"since" doc:"Only anomalies recorded at or after this time (RFC 3339)."`
	Cursor int64     `query:"cursor" minimum:"0" doc:"next_cursor of the previous page."`
	Limit  int       `query:"limit" minimum:"0" maximum:"1000"`
	ReadConsistency
}

type anomaliesOutput struct {
	Body struct {
		Anomalies  []AnomalyBody `json:"anomalies"`
		NextCursor int64         `json:"next_cursor,omitempty"`
		// Read from counts and from the delegations, not from events: not
		// paginated, on the first page only.
		RefusedTokens     []RefusedTokensBody    `json:"refused_tokens,omitempty" doc:"Kind refused_token, first page only (no cursor): refused signed evidence by org and reason, updated at or after since, with the latest samples. Refused tokens are counted here, not recorded as events; anomalies of event type token_refused are from before."`
		SharedRemoteTasks []SharedRemoteTaskBody `json:"shared_remote_tasks,omitempty" doc:"Kind shared_remote_task, first page only (no cursor): remote task ids of one org recorded by delegations of more than one tenant (at most 100). Evidence for one is matched by the compensation idempotency key it carries; a declaration without one is refused."`
	}
}

// listAnomalies serves GET /v1/anomalies: status conflicts, late evidence,
// write-offs contradicted by later acks, refused tokens.
func (s *Server) listAnomalies(ctx context.Context, in *anomaliesInput) (*anomaliesOutput, error) {
	q := report.AnomalyQuery{Since: in.Since, AfterSeq: in.Cursor, Limit: in.Limit}
	for _, raw := range in.Kind {
		for _, k := range strings.Split(raw, ",") {
			if k = strings.TrimSpace(k); k != "" {
				q.Kinds = append(q.Kinds, report.AnomalyKind(k))
			}
		}
	}
	list, err := s.reports.Anomalies(ctx, principal(ctx), q)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &anomaliesOutput{}
	if in.Cursor == 0 {
		if err := s.currentAnomalies(ctx, q.Kinds, in.Since, out); err != nil {
			return nil, s.fail(ctx, err)
		}
	}
	out.Body.Anomalies = make([]AnomalyBody, len(list))
	for i, a := range list {
		b := AnomalyBody{
			Seq: a.Seq, Kind: string(a.Kind), EventType: string(a.EventType), OrgID: a.OrgID, Tenant: a.Tenant,
			ObligationState: string(a.ObligationState), At: a.At, Actor: a.Actor, Data: rawJSON(a.Data),
		}
		if a.DelegationID != uuid.Nil {
			b.DelegationID = a.DelegationID.String()
		}
		out.Body.Anomalies[i] = b
	}
	limit := q.Limit
	if limit == 0 {
		limit = report.DefaultReportLimit
	}
	if len(list) == limit {
		out.Body.NextCursor = list[len(list)-1].Seq
	}
	return out, nil
}

type chainOutput struct {
	Body ChainBody
}

// delegationEvidence serves GET /v1/delegations/{id}/evidence: the
// delegation's hash-chained event log with every stored token.
func (s *Server) delegationEvidence(ctx context.Context, in *delegationPathInput) (*chainOutput, error) {
	id, err := parseID(in.ID)
	if err != nil {
		return nil, err
	}
	d, events, err := s.reports.Evidence(ctx, principal(ctx), id)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &chainOutput{}
	out.Body.DelegationID, out.Body.OrgID, out.Body.RemoteTaskID = d.ID.String(), d.OrgID, d.Remote.TaskID
	out.Body.LedgerID, out.Body.Stream = s.ledgerID, d.Stream()
	out.Body.Events = eventRecords(events)
	return out, nil
}

// csvFlushEvery is how many rows are written between flushes to the client.
const csvFlushEvery = 200

// streamObligationsCSV writes the selection as CSV, row by row, as the
// database returns it. A failure before the first byte is a problem
// response; after it, the connection is aborted so the client sees a
// truncated transfer, never a short file that looks complete.
func (s *Server) streamObligationsCSV(ctx context.Context, hctx huma.Context, q report.ObligationQuery) {
	w := hctx.BodyWriter()
	flush := func() {}
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	var (
		cw      *csv.Writer
		rows    int
		started bool
	)
	asOf := s.reports.Now()
	start := func() error {
		started = true
		hctx.SetHeader("Content-Type", "text/csv; charset=utf-8; header=present")
		hctx.SetHeader("Content-Disposition", fmt.Sprintf(`attachment; filename="obligations-%s.csv"`, asOf.Format("20060102T150405Z")))
		hctx.SetStatus(http.StatusOK)
		cw = csv.NewWriter(w)
		cw.UseCRLF = true
		return cw.Write(obligationColumns)
	}
	_, err := s.reports.EachObligation(ctx, principal(ctx), q, func(o report.ObligationRow) error {
		if !started {
			if err := start(); err != nil {
				return err
			}
		}
		if err := cw.Write(obligationBody(o, asOf).csvRecord()); err != nil {
			return err
		}
		rows++
		if rows%csvFlushEvery == 0 {
			cw.Flush()
			if err := cw.Error(); err != nil {
				return err
			}
			flush()
		}
		return nil
	})
	if err == nil && !started {
		err = start()
	}
	if err == nil {
		cw.Flush()
		err = cw.Error()
	}
	if err == nil {
		return
	}
	if !started {
		s.writeProblem(hctx, problemFor(ctx, s.log, err))
		return
	}
	if !errors.Is(err, context.Canceled) {
		s.log.ErrorContext(ctx, "obligations export aborted", slog.Int("rows_written", rows), slog.Any("error", err))
	}
	panic(http.ErrAbortHandler)
}

// currentAnomalies fills the anomalies read from counts and delegations
// rather than events: refused tokens and shared remote task ids, when
// kinds (all when empty) asks for them.
func (s *Server) currentAnomalies(ctx context.Context, kinds []report.AnomalyKind, since time.Time, out *anomaliesOutput) error {
	want := func(k report.AnomalyKind) bool { return len(kinds) == 0 || slices.Contains(kinds, k) }
	if want(report.AnomalyRefusedToken) {
		totals, err := s.reports.TokenRefusals(ctx, principal(ctx), since)
		if err != nil {
			return err
		}
		for _, t := range totals {
			b := RefusedTokensBody{
				OrgID: t.OrgID, OrgRegistered: t.OrgID != "", Reason: t.Reason, Refused: t.Refused, FirstAt: t.FirstAt, LastAt: t.LastAt,
				Samples: make([]RefusedTokenSample, len(t.Samples)),
			}
			for i, r := range t.Samples {
				b.Samples[i] = RefusedTokenSample{
					Kind: r.Kind, TokenSHA256: hex.EncodeToString(r.TokenSHA256), TokenBytes: r.TokenBytes,
					ClaimedIssuer: r.ClaimedIssuer, ClientAddress: r.ClientAddress, At: r.At,
				}
			}
			out.Body.RefusedTokens = append(out.Body.RefusedTokens, b)
		}
	}
	if want(report.AnomalySharedRemoteTask) {
		shared, err := s.reports.SharedRemoteTasks(ctx, principal(ctx))
		if err != nil {
			return err
		}
		for _, t := range shared {
			b := SharedRemoteTaskBody{OrgID: t.OrgID, RemoteTaskID: t.RemoteTaskID, Tenants: t.Tenants, LastCreatedAt: t.LastCreatedAt}
			for _, id := range t.DelegationIDs {
				b.DelegationIDs = append(b.DelegationIDs, id.String())
			}
			out.Body.SharedRemoteTasks = append(out.Body.SharedRemoteTasks, b)
		}
	}
	return nil
}
