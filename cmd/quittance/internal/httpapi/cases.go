package httpapi

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/google/uuid"

	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/ledger/report"
)

// CaseBody is the case-handling state of a delegation's obligation.
type CaseBody struct {
	DelegationID string     `json:"delegation_id" format:"uuid"`
	Owner        string     `json:"owner" doc:"Who handles the obligation; empty when nobody does."`
	SnoozedUntil *time.Time `json:"snoozed_until,omitempty" doc:"The needs-action entry is hidden until then; the hold does not move and reports still list it."`
	Notes        int        `json:"notes" doc:"How many notes were added; the notes are case_note_added events on the delegation's stream."`
	UpdatedAt    *time.Time `json:"updated_at,omitempty"`
}

func caseBody(c report.Case) CaseBody {
	b := CaseBody{DelegationID: c.DelegationID.String(), Owner: c.Owner, SnoozedUntil: timePtr(c.SnoozedUntil), Notes: c.Notes}
	b.UpdatedAt = timePtr(c.UpdatedAt)
	return b
}

// QueueRowBody is one obligation of the needs-action queue with its case.
type QueueRowBody struct {
	ObligationBody
	Case              CaseBody `json:"case"`
	PendingWriteOffID string   `json:"pending_write_off_id,omitempty"`
}

// registerCases is the route table of case handling and the needs-action
// queue, served when the ledger handles cases.
func (s *Server) registerCases() {
	if s.cases == nil {
		return
	}
	tags := []string{"cases"}
	huma.Register(s.api, huma.Operation{
		OperationID: "get-case", Method: http.MethodGet, Path: "/v1/delegations/{id}/case", Tags: tags,
		Summary: "Get an obligation's case: owner, snooze, notes (finance and on-call)", Security: bearerAuth,
	}, s.getCase)
	huma.Register(s.api, huma.Operation{
		OperationID: "put-case-owner", Method: http.MethodPut, Path: "/v1/delegations/{id}/owner", Tags: tags,
		Summary:     "Assign an obligation's owner (on-call)",
		Description: "Appends a case_owner_assigned event to the delegation's stream; the same owner again records nothing. An empty owner unassigns.",
		Security:    bearerAuth,
	}, s.putCaseOwner)
	huma.Register(s.api, huma.Operation{
		OperationID: "post-case-note", Method: http.MethodPost, Path: "/v1/delegations/{id}/notes", Tags: tags,
		Summary: "Add a note to an obligation (on-call)", Description: "Appends a case_note_added event holding the note.",
		Security: bearerAuth, DefaultStatus: http.StatusCreated,
	}, s.postCaseNote)
	huma.Register(s.api, huma.Operation{
		OperationID: "post-case-snooze", Method: http.MethodPost, Path: "/v1/delegations/{id}/snooze", Tags: tags,
		Summary: "Snooze an obligation's needs-action entry (on-call)",
		Description: "Hides the entry from the needs-action queue until the time given; the hold never moves and reports still list it. " +
			"Only obligations in revocation_pending_compensation, compensation_unconfirmed or escalated can be snoozed (else 409 not_in_queue). Appends a case_snoozed event.",
		Security: bearerAuth,
	}, s.postCaseSnooze)
	huma.Register(s.api, huma.Operation{
		OperationID: "list-queue", Method: http.MethodGet, Path: "/v1/obligations/queue", Tags: tags,
		Summary: "The needs-action queue: obligations with their cases, filtered and sorted (finance and on-call)", Security: bearerAuth,
		Description: strings.TrimSpace(consistencyDoc),
	}, s.listQueue)
	if s.compensation == nil {
		return
	}
	huma.Register(s.api, huma.Operation{
		OperationID: "list-write-offs", Method: http.MethodGet, Path: "/admin/v1/write-offs", Tags: []string{"admin"},
		Summary: "List write-offs, newest first (finance and on-call)", Security: bearerAuth,
	}, s.listWriteOffs)
	huma.Register(s.api, huma.Operation{
		OperationID: "reject-write-off", Method: http.MethodPost, Path: "/admin/v1/write-offs/{id}/reject", Tags: []string{"admin"},
		Summary: "Reject a pending write-off (four eyes)",
		Description: "On-call, by a different token (id and name) than the requester (else 403 self_approval), with a reason. The obligation stays open and the hold active. " +
			"409 write_off_not_pending if it is not pending.",
		Security: bearerAuth,
	}, s.rejectWriteOff)
}

type caseOutput struct {
	Body CaseBody
}

// caseOK is the answer with case c.
func caseOK(c report.Case) *caseOutput { return &caseOutput{Body: caseBody(c)} }

// getCase serves GET /v1/delegations/{id}/case: get an obligation's case:
// owner, snooze, notes (finance and on-call).
func (s *Server) getCase(ctx context.Context, in *delegationPathInput) (*caseOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (report.Case, error) {
		return s.cases.Get(ctx, principal(ctx), id)
	}, caseOK)
}

type ownerInput struct {
	ID   string `path:"id" doc:"The delegation id (a UUID)."`
	Body struct {
		Owner string `json:"owner" maxLength:"200" doc:"The new owner; empty unassigns."`
	}
}

// putCaseOwner serves PUT /v1/delegations/{id}/owner: assign an obligation's
// owner (on-call).
func (s *Server) putCaseOwner(ctx context.Context, in *ownerInput) (*caseOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (report.Case, error) {
		return s.cases.AssignOwner(ctx, principal(ctx), id, in.Body.Owner)
	}, caseOK)
}

type noteInput struct {
	ID   string `path:"id" doc:"The delegation id (a UUID)."`
	Body struct {
		Note string `json:"note" minLength:"1" maxLength:"4096"`
	}
}

// postCaseNote serves POST /v1/delegations/{id}/notes: add a note to an
// obligation (on-call).
func (s *Server) postCaseNote(ctx context.Context, in *noteInput) (*caseOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (report.Case, error) {
		return s.cases.AddNote(ctx, principal(ctx), id, in.Body.Note)
	}, caseOK)
}

type snoozeInput struct {
	ID   string `path:"id" doc:"The delegation id (a UUID)."`
	Body struct {
		Until  *time.Time `json:"until,omitempty" doc:"When the entry comes back to the needs-action queue (at most a year ahead); absent or null wakes it now."`
		Reason string     `json:"reason,omitempty" maxLength:"4096"`
	}
}

// postCaseSnooze serves POST /v1/delegations/{id}/snooze: snooze an
// obligation's needs-action entry (on-call).
func (s *Server) postCaseSnooze(ctx context.Context, in *snoozeInput) (*caseOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (report.Case, error) {
		var until time.Time
		if in.Body.Until != nil {
			until = *in.Body.Until
		}
		return s.cases.Snooze(ctx, principal(ctx), id, until, in.Body.Reason)
	}, caseOK)
}

type queueInput struct {
	State      []string `query:"state,explode" doc:"Obligation states; default revocation_pending_compensation, compensation_unconfirmed and escalated."`
	OrgID      string   `query:"org_id"`
	Tenant     string   `query:"tenant"`
	Owner      string   `query:"owner"`
	Unassigned bool     `query:"unassigned" doc:"Only obligations nobody owns."`
	Currency   string   `query:"currency"`
	MinAmount  int64    `query:"min_amount_minor" minimum:"0"`
	MaxAmount  int64    `query:"max_amount_minor" minimum:"0"`
	OlderThan  string   `query:"older_than" doc:"A Go duration (72h) or days (7d)."`
	Snoozed    string   `query:"snoozed" enum:"hide,show,only" doc:"What to do with snoozed entries; default hide."`
	Sort       string   `query:"sort" enum:"oldest,newest,amount_desc,amount_asc,deadline"`
	Limit      int      `query:"limit" minimum:"0" maximum:"200"`
	Cursor     string   `query:"cursor" doc:"next_cursor of the previous page."`
	ReadConsistency
}

type queueOutput struct {
	Body struct {
		AsOf        time.Time      `json:"as_of"`
		Obligations []QueueRowBody `json:"obligations"`
		NextCursor  string         `json:"next_cursor,omitempty"`
	}
}

// listQueue serves GET /v1/obligations/queue: the needs-action queue:
// obligations with their cases, filtered and sorted (finance and on-call).
func (s *Server) listQueue(ctx context.Context, in *queueInput) (*queueOutput, error) {
	states, err := parseStates(in.State)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	older, err := parseOlderThan(in.OlderThan)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	after, err := report.ParseQueueCursor(in.Cursor)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	page, err := s.cases.Queue(ctx, principal(ctx), report.QueueQuery{
		States: states, OrgID: in.OrgID, Tenant: in.Tenant, Owner: in.Owner, Unassigned: in.Unassigned,
		Currency: strings.ToUpper(in.Currency), MinAmountMinor: in.MinAmount, MaxAmountMinor: in.MaxAmount, OlderThan: older,
		Snoozed: report.SnoozeFilter(in.Snoozed), Sort: report.QueueSort(in.Sort), After: after, Limit: in.Limit,
	})
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &queueOutput{}
	out.Body.AsOf = page.AsOf
	out.Body.NextCursor = page.Next.String()
	out.Body.Obligations = make([]QueueRowBody, len(page.Rows))
	for i, r := range page.Rows {
		out.Body.Obligations[i] = QueueRowBody{ObligationBody: obligationBody(r.ObligationRow, page.AsOf), Case: caseBody(r.Case)}
		if r.PendingWriteOffID != [16]byte{} {
			out.Body.Obligations[i].PendingWriteOffID = r.PendingWriteOffID.String()
		}
	}
	return out, nil
}

type listWriteOffsInput struct {
	Status []string `query:"status,explode" doc:"pending_approval, executed, void, rejected; default all."`
	Limit  int      `query:"limit" minimum:"0" maximum:"500"`
}

type listWriteOffsOutput struct {
	Body struct {
		WriteOffs []WriteOffBody `json:"write_offs"`
	}
}

// listWriteOffs serves GET /admin/v1/write-offs: list write-offs, newest
// first (finance and on-call).
func (s *Server) listWriteOffs(ctx context.Context, in *listWriteOffsInput) (*listWriteOffsOutput, error) {
	f := compensation.WriteOffFilter{Limit: in.Limit}
	for _, raw := range in.Status {
		for _, st := range strings.Split(raw, ",") {
			if st = strings.TrimSpace(st); st != "" {
				f.Statuses = append(f.Statuses, compensation.WriteOffStatus(st))
			}
		}
	}
	list, err := s.compensation.WriteOffs(ctx, principal(ctx), f)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := &listWriteOffsOutput{}
	out.Body.WriteOffs = bodies(list, writeOffBody)
	return out, nil
}

type rejectWriteOffInput struct {
	ID   string `path:"id" doc:"The write-off id (a UUID)."`
	Body struct {
		Reason string `json:"reason" minLength:"1" maxLength:"4096" doc:"Why the write-off is refused."`
	}
}

// rejectWriteOff serves POST /admin/v1/write-offs/{id}/reject: reject a
// pending write-off (four eyes).
func (s *Server) rejectWriteOff(ctx context.Context, in *rejectWriteOffInput) (*writeOffOutput, error) {
	return byPathID(ctx, s, in.ID, func(id uuid.UUID) (compensation.WriteOffResult, error) {
		return s.compensation.RejectWriteOff(ctx, principal(ctx), id, in.Body.Reason)
	}, writeOffOK)
}
