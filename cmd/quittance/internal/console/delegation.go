package console

import (
	"context"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/quittance/quittance/cmd/quittance/internal/errkind"
	"github.com/quittance/quittance/compensation"
	"github.com/quittance/quittance/delegate"
	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/report"
)

// timelineEntry is one event of a delegation's timeline.
type timelineEntry struct {
	ledger.Event
	Evidence *Evidence
	// Note is the text of a case note.
	Note string
}

// delegationPage is the data of a delegation's page.
type delegationPage struct {
	D        ledger.Delegation
	Org      ledger.Org
	Budget   *ledger.Budget
	Case     report.Case
	Timeline []timelineEntry
	// ChainOK says whether the stream's hash chain verifies; ChainProblem
	// says where it breaks; Head is the hex hash of the last event.
	ChainOK      bool
	ChainProblem string
	Head         string
	Links        ledger.Links
	Snapshot     *delegate.TaskSnapshot
	SnapshotJSON string
	// ExtraTasks are the extra remote tasks the org's agent created for
	// the delegation besides the tracked one, oldest first.
	ExtraTasks []delegate.RemoteTask
	// ExtraRedriveRefusals says, per open extra task, why its compensation
	// cannot be redriven now ("" when it can; compensation.
	// CanRedriveExtraTask).
	ExtraRedriveRefusals map[string]string
	WriteOffs            []compensation.WriteOff
	// Pending is the write-off awaiting approval, if any.
	Pending *compensation.WriteOff
	// CanWriteOff says the obligation is in a state a write-off applies
	// to and none is pending; NeedsApproval that a write-off of its hold
	// needs a second person.
	CanWriteOff   bool
	NeedsApproval bool
	Threshold     int64
	// RedriveRefusal says why compensation cannot be redriven now ("" when
	// it can).
	RedriveRefusal string
	// InQueue says the obligation is in the needs-action states.
	InQueue bool
	Self    string
}

// Decidable reports whether the viewer may decide on w.
func (d delegationPage) Decidable(w compensation.WriteOff, p *ledger.Principal) bool {
	return p != nil && w.DecidableBy(*p)
}

func parseDelegationID(r *http.Request) (uuid.UUID, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	return id, err == nil
}

// delegationData gathers a delegation's page from the services.
func (c *Console) delegationData(ctx context.Context, p ledger.Principal, id uuid.UUID) (delegationPage, error) {
	d, events, err := c.cfg.Reports.Evidence(ctx, p, id)
	if err != nil {
		return delegationPage{}, err
	}
	thresholds, err := c.cfg.Compensation.ApprovalThresholds(ctx)
	if err != nil {
		return delegationPage{}, err
	}
	threshold := thresholds.For(d.Hold.Currency).Minor
	data := delegationPage{D: d, Self: Prefix + "delegations/" + d.ID.String(), Threshold: threshold}
	if data.Org, err = c.cfg.Ledger.GetOrg(ctx, p, d.OrgID); err != nil {
		return delegationPage{}, err
	}
	if b, err := c.cfg.Ledger.GetBudget(ctx, p, d.BudgetID); err == nil {
		data.Budget = &b
	} else if !errors.Is(err, ledger.ErrNotFound) {
		return delegationPage{}, err
	}
	if data.Case, err = c.cfg.Cases.Get(ctx, p, id); err != nil {
		return delegationPage{}, err
	}
	if err := c.withTimeline(ctx, p, &data, events); err != nil {
		return delegationPage{}, err
	}
	if data.Links, err = c.cfg.Ledger.DelegationLinks(ctx, p, id); err != nil {
		return delegationPage{}, err
	}
	if err := c.withRemote(ctx, p, &data); err != nil {
		return delegationPage{}, err
	}
	if data.WriteOffs, err = c.cfg.Compensation.WriteOffs(ctx, p, compensation.WriteOffFilter{DelegationID: id, Limit: 50}); err != nil {
		return delegationPage{}, err
	}
	for i := range data.WriteOffs {
		if data.WriteOffs[i].ID == d.PendingWriteOffID {
			data.Pending = &data.WriteOffs[i]
		}
	}
	data.CanWriteOff = compensation.CanWriteOff(d)
	data.RedriveRefusal = redriveRefusal(d)
	data.NeedsApproval = compensation.NeedsApproval(d.Hold, threshold)
	for _, st := range report.PendingObligationStates {
		data.InQueue = data.InQueue || d.ObligationState == st
	}
	return data, nil
}

// withTimeline fills a delegation page's chain check, head and timeline
// (newest first, each piece of evidence verified) from its events.
func (c *Console) withTimeline(ctx context.Context, p ledger.Principal, data *delegationPage, events []ledger.Event) error {
	if err := ledger.VerifyChain(events); err != nil {
		data.ChainProblem = err.Error()
	} else {
		data.ChainOK = true
	}
	if len(events) > 0 {
		data.Head = hex.EncodeToString(events[len(events)-1].Hash)
	}
	ledgerID := c.cfg.Compensation.LedgerID()
	var history []ledger.OrgKey
	for _, e := range events {
		if e.Evidence != "" {
			var err error
			if history, err = c.cfg.Ledger.OrgKeyHistory(ctx, p, data.D.OrgID); err != nil {
				return err
			}
			break
		}
	}
	verified := verifyTimeline(data.D, ledgerID, events, history)
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		entry := timelineEntry{Event: e, Evidence: decodeEvidence(e, verified[e.StreamSeq])}
		data.Timeline = append(data.Timeline, entry)
	}
	return nil
}

// withRemote fills a delegation page's remote task snapshot and extra
// remote tasks, when the console is given those services.
func (c *Console) withRemote(ctx context.Context, p ledger.Principal, data *delegationPage) error {
	id := data.D.ID
	if c.cfg.Snapshots != nil {
		snap, err := c.cfg.Snapshots.TaskSnapshot(ctx, p, id)
		switch {
		case err == nil:
			data.Snapshot = &snap
			data.SnapshotJSON = prettyJSON(snap.Artifacts)
		case !errors.Is(err, ledger.ErrNotFound) && !errors.Is(err, ledger.ErrForbidden):
			return err
		}
	}
	if c.cfg.RemoteTasks != nil {
		var err error
		if data.ExtraTasks, err = c.cfg.RemoteTasks.RemoteTasks(ctx, p, id); err != nil {
			return err
		}
		if data.ExtraRedriveRefusals, err = c.extraRedriveRefusals(ctx, p, id, data.Org, data.ExtraTasks); err != nil {
			return err
		}
	}
	return nil
}

func (c *Console) delegation(w http.ResponseWriter, r *http.Request, q *request) {
	c.showDelegation(w, r, q, http.StatusOK, nil)
}

// showDelegation renders a delegation's page, with form errors when a
// form on it was refused.
func (c *Console) showDelegation(w http.ResponseWriter, r *http.Request, q *request, status int, errs map[string]string) {
	id, ok := parseDelegationID(r)
	if !ok {
		c.renderError(w, r, q, http.StatusNotFound, "Not found", "This is not a delegation id.")
		return
	}
	data, err := c.delegationData(r.Context(), q.p, id)
	if err != nil {
		c.fail(w, r, q, err)
		return
	}
	var form url.Values
	if r.Method == http.MethodPost {
		form = r.PostForm
	}
	c.render(w, r, q, status, "delegation", view{
		Title: "Delegation " + shortID(id.String()), Nav: "obligations", Errors: errs, Form: form, Data: data,
	})
}

// formFailed shows a refused form beside its fields, nothing recorded,
// with its kind's status (errkind): 422 for bad input, 409 for a conflict;
// a decision another person must take is shown as a conflict with the
// form (409), not as a refusal of the page. Other errors go to fail.
func (c *Console) formFailed(w http.ResponseWriter, r *http.Request, q *request, form string, err error, show func(int, map[string]string)) {
	field, msg, ok := formError(err)
	if !ok {
		c.fail(w, r, q, err)
		return
	}
	kind := errkind.Of(err)
	status := kind.Status()
	switch kind {
	case errkind.WriteOffSelfApproval, errkind.SelfApproval, errkind.IdentityNotLinked:
		status = http.StatusConflict
	}
	show(status, map[string]string{form + "." + field: msg})
}

func (c *Console) delegationForm(w http.ResponseWriter, r *http.Request, q *request, form, notice string, do func(uuid.UUID) error) {
	id, ok := parseDelegationID(r)
	if !ok {
		c.renderError(w, r, q, http.StatusNotFound, "Not found", "This is not a delegation id.")
		return
	}
	if err := do(id); err != nil {
		c.formFailed(w, r, q, form, err, func(status int, errs map[string]string) { c.showDelegation(w, r, q, status, errs) })
		return
	}
	redirect(w, r, withNotice(Prefix+"delegations/"+id.String(), notice)+"#"+form)
}

func (c *Console) assignOwner(w http.ResponseWriter, r *http.Request, q *request) {
	c.delegationForm(w, r, q, "owner", "owner", func(id uuid.UUID) error {
		owner := r.PostFormValue("owner")
		if r.PostFormValue("mine") == "1" {
			owner = q.p.Name
		}
		_, err := c.cfg.Cases.AssignOwner(r.Context(), q.p, id, owner)
		return err
	})
}

func (c *Console) addNote(w http.ResponseWriter, r *http.Request, q *request) {
	c.delegationForm(w, r, q, "note", "note", func(id uuid.UUID) error {
		_, err := c.cfg.Cases.AddNote(r.Context(), q.p, id, r.PostFormValue("note"))
		return err
	})
}

func (c *Console) snooze(w http.ResponseWriter, r *http.Request, q *request) {
	c.delegationForm(w, r, q, "snooze", "snooze", func(id uuid.UUID) error {
		raw := r.PostFormValue("until")
		if r.PostFormValue("wake") == "1" {
			raw = ""
		} else if strings.TrimSpace(raw) == "" {
			return ledger.Invalid("until", "choose the date the entry comes back")
		}
		until, err := parseUntil(raw)
		if err != nil {
			return ledger.Invalid("until", "%s", err.Error())
		}
		_, err = c.cfg.Cases.Snooze(r.Context(), q.p, id, until, r.PostFormValue("reason"))
		return err
	})
}

func (c *Console) requestWriteOff(w http.ResponseWriter, r *http.Request, q *request) {
	id, ok := parseDelegationID(r)
	if !ok {
		c.renderError(w, r, q, http.StatusNotFound, "Not found", "This is not a delegation id.")
		return
	}
	res, err := c.cfg.Compensation.RequestWriteOff(r.Context(), q.p, id, compensation.WriteOffInput{
		Reason: r.PostFormValue("reason"), Reference: strings.TrimSpace(r.PostFormValue("reference")),
	})
	if err != nil {
		c.formFailed(w, r, q, "writeoff", err, func(status int, errs map[string]string) { c.showDelegation(w, r, q, status, errs) })
		return
	}
	notice := "write_off"
	if res.WriteOff.Status == compensation.WriteOffExecuted {
		notice = "executed"
	}
	redirect(w, r, withNotice(Prefix+"delegations/"+id.String(), notice)+"#writeoff")
}

// extraTaskForm is the form of extra task taskID's write-off, so that a
// refusal is shown beside that task's fields alone.
func extraTaskForm(taskID string) string { return "extra-" + taskID }

// writeOffExtraTask is on-call's write-off of one extra remote task whose
// compensation is open: the service behind POST /admin/v1/delegations/
// {id}/remote-tasks/{task_id}/write-off, recorded as an
// extra_task_written_off event. No money moves. The task id is a form
// field rather than a path segment: a remote agent chooses it, and it may
// hold any character.
func (c *Console) writeOffExtraTask(w http.ResponseWriter, r *http.Request, q *request) {
	id, ok := parseDelegationID(r)
	if !ok {
		c.renderError(w, r, q, http.StatusNotFound, "Not found", "This is not a delegation id.")
		return
	}
	taskID := r.PostFormValue("task_id")
	if _, err := c.cfg.Compensation.WriteOffExtraTask(r.Context(), q.p, id, taskID, r.PostFormValue("extra_reason")); err != nil {
		c.formFailed(w, r, q, extraTaskForm(taskID), err, func(status int, errs map[string]string) { c.showDelegation(w, r, q, status, errs) })
		return
	}
	redirect(w, r, withNotice(Prefix+"delegations/"+id.String(), "extra_task_written_off")+"#extra-tasks")
}

// extraRedriveRefusals says, for each open extra task of delegation id of
// org, why compensation.Service.RedriveExtraTask would refuse to redrive
// it ("" when it would not): the service's own rule (compensation.
// CanRedriveExtraTask), so the console offers the control only where it
// applies. The service decides again on the locked delegation when the
// redrive is asked for, and its refusal is what is shown then.
func (c *Console) extraRedriveRefusals(ctx context.Context, p ledger.Principal, id uuid.UUID, org ledger.Org, tasks []delegate.RemoteTask) (map[string]string, error) {
	out := map[string]string{}
	running, asked := false, false
	for _, t := range tasks {
		if !t.Compensation.Open() {
			continue
		}
		if !asked {
			var err error
			if running, err = c.cfg.Compensation.ExtraTaskRequestJobOpen(ctx, p, id); err != nil {
				return nil, err
			}
			asked = true
		}
		out[t.TaskID] = ""
		if _, msg, ok := formError(compensation.CanRedriveExtraTask(org, t, running)); ok {
			out[t.TaskID] = msg
		}
	}
	return out, nil
}

// extraRedriveForm is the form of extra task taskID's redrive, so that a
// refusal is shown beside that form alone.
func extraRedriveForm(taskID string) string { return "extra-redrive-" + taskID }

// redriveExtraTask asks the org's agent again for the compensation of one
// extra remote task whose requests are exhausted: the service behind POST
// /admin/v1/delegations/{id}/remote-tasks/{task_id}/redrive, recorded as
// an extra_task_compensation_redriven event. No money moves. The task id
// is a form field, as for the write-off beside it.
func (c *Console) redriveExtraTask(w http.ResponseWriter, r *http.Request, q *request) {
	id, ok := parseDelegationID(r)
	if !ok {
		c.renderError(w, r, q, http.StatusNotFound, "Not found", "This is not a delegation id.")
		return
	}
	taskID := r.PostFormValue("task_id")
	in := compensation.RedriveInput{Reason: r.PostFormValue("extra_redrive_reason")}
	if _, err := c.cfg.Compensation.RedriveExtraTask(r.Context(), q.p, id, taskID, in); err != nil {
		c.formFailed(w, r, q, extraRedriveForm(taskID), err, func(status int, errs map[string]string) { c.showDelegation(w, r, q, status, errs) })
		return
	}
	redirect(w, r, withNotice(Prefix+"delegations/"+id.String(), "extra_task_redriven")+"#extra-tasks")
}
