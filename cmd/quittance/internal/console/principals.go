package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/quittance/quittance/ledger"
	"github.com/quittance/quittance/ledger/session"
)

// principalRow is a principal with its credentials, as the principals page
// lists it.
type principalRow struct {
	ledger.PrincipalRecord
	CreatedByName  string
	DisabledByName string
	// SamePersonAs names the other principals of the same person.
	SamePersonAs []string
	Credentials  []credentialRow
	// Self marks the signed-in principal.
	Self bool
}

// credentialRow is a credential (never its secret) as the page shows it.
type credentialRow struct {
	ledger.Token
	RevokedByName string
	// Current marks the credential this console session was started with.
	Current bool
}

// principalsPage is the data of the principals page.
type principalsPage struct {
	Session    session.Session
	Sessions   []session.Session
	Principals []principalRow
	// OwnCredentialsOnly says the viewer sees its own credentials only
	// (everyone but on-call: access.Service.ListCredentials).
	OwnCredentialsOnly bool
	Pending            []changeRow
	Decided            []changeRow
	Back               string
}

// names resolves principal ids to display names for a page.
type names map[uuid.UUID]string

// of is the name of principal id: "system" for none, the short id of a
// principal with no record (an OpenID Connect session's, before such
// sessions were principals).
func (n names) of(id uuid.UUID) string {
	if id == uuid.Nil {
		return "system"
	}
	if name, ok := n[id]; ok {
		return name
	}
	return shortID(id.String())
}

// principalNames lists every principal's name, for pages that show who
// asked for or decided something.
func (c *Console) principalNames(ctx context.Context, p ledger.Principal) (names, []ledger.PrincipalRecord, error) {
	list, err := c.cfg.Access.ListPrincipals(ctx, p)
	if err != nil {
		return nil, nil, err
	}
	out := names{}
	for _, r := range list {
		out[r.ID] = r.Name
	}
	return out, list, nil
}

func (c *Console) principals(w http.ResponseWriter, r *http.Request, q *request) {
	c.showPrincipals(w, r, q, http.StatusOK, nil)
}

func (c *Console) showPrincipals(w http.ResponseWriter, r *http.Request, q *request, status int, errs map[string]string) {
	ctx := r.Context()
	sessions, err := c.cfg.Sessions.Of(ctx, q.p)
	if err != nil {
		c.fail(w, r, q, err)
		return
	}
	byID, list, err := c.principalNames(ctx, q.p)
	if err != nil {
		c.fail(w, r, q, err)
		return
	}
	// On-call sees every credential; anyone else its own (the service
	// decides: a principal id of Nil asks for all it may see).
	creds, err := c.cfg.Access.ListCredentials(ctx, q.p, uuid.Nil)
	if err != nil {
		c.fail(w, r, q, err)
		return
	}
	data := principalsPage{Session: q.sess, Sessions: sessions, OwnCredentialsOnly: !q.p.Permits(ledger.ActionAdminister), Back: Prefix + "principals"}
	of := map[uuid.UUID][]credentialRow{}
	for _, t := range creds {
		of[t.PrincipalID] = append(of[t.PrincipalID], credentialRow{Token: t, RevokedByName: byID.of(t.RevokedBy), Current: t.ID == q.p.TokenID})
	}
	for _, rec := range list {
		row := principalRow{PrincipalRecord: rec, Credentials: of[rec.ID], Self: q.p.SamePerson(rec.ID)}
		if rec.CreatedBy != uuid.Nil {
			row.CreatedByName = byID.of(rec.CreatedBy)
		}
		if rec.Disabled() {
			row.DisabledByName = byID.of(rec.DisabledBy)
		}
		for _, id := range rec.Aliases {
			row.SamePersonAs = append(row.SamePersonAs, byID.of(id))
		}
		data.Principals = append(data.Principals, row)
	}
	if data.Pending, data.Decided, err = c.pendingChanges(ctx, q.p, byID, func(ledger.PendingChange) bool { return true }); err != nil {
		c.fail(w, r, q, err)
		return
	}
	var form url.Values
	if r.Method == http.MethodPost {
		form = r.PostForm
	}
	c.render(w, r, q, status, "principals", view{Title: "Principals", Nav: "principals", Errors: errs, Form: form, Data: data})
}

// changeRow is a pending (or decided) privileged change as a page shows it.
type changeRow struct {
	ledger.PendingChange
	RequestedByName string
	DecidedByName   string
	// Approvable says the viewer may approve it (ledger.PendingChange.
	// ApprovableBy); Decidable that the viewer may refuse or withdraw it;
	// Confirmable that it links the identity the viewer signed in as,
	// which the viewer confirms (ledger.PendingChange.OIDCLinkToConfirm).
	Approvable  bool
	Decidable   bool
	Confirmable bool
	// Org is the registration an org_update change applies, with its keys.
	Org *orgChange
	// Class is the task class a task_class_update change registers.
	Class *ledger.TaskClass
	// Principal is the principal a principal_create or role_grant change
	// creates or changes; Role and Tenant what a role_grant grants.
	Principal string
	Role      ledger.Role
	Tenant    string
	// OIDCIssuer and OIDCSubject are the identity an oidc_link change
	// links to Principal.
	OIDCIssuer  string
	OIDCSubject string
}

// orgChange is an org_update change beside the org as it is now.
type orgChange struct {
	ID    string
	Input ledger.OrgInput
	// Keys are the keys of the proposed JWK Set, each marked whether the
	// org has it registered now; Removed are the keys it would lose.
	Keys      []changedKey
	Removed   []Key
	KeysError string
}

// changedKey is a key of a proposed JWK Set.
type changedKey struct {
	Key
	New bool
}

// decidedShown is how many decided changes a page lists.
const decidedShown = 20

// pendingChanges lists the changes that match keep: every pending one,
// oldest first (the first to expire first), and the last decidedShown
// decided ones, newest first.
func (c *Console) pendingChanges(ctx context.Context, p ledger.Principal, byID names, keep func(ledger.PendingChange) bool) (pending, decided []changeRow, err error) {
	all, err := c.cfg.Access.ListPendingChanges(ctx, p, "")
	if err != nil {
		return nil, nil, err
	}
	for _, ch := range all {
		if !keep(ch) {
			continue
		}
		row := c.changeRow(ctx, p, byID, ch)
		if ch.Status == ledger.PendingOpen {
			pending = append(pending, row)
		} else if len(decided) < decidedShown {
			decided = append(decided, row)
		}
	}
	slices.Reverse(pending)
	return pending, decided, nil
}

func (c *Console) changeRow(ctx context.Context, p ledger.Principal, byID names, ch ledger.PendingChange) changeRow {
	row := changeRow{
		PendingChange: ch, RequestedByName: byID.of(ch.RequestedBy), Approvable: ch.ApprovableBy(p), Confirmable: ch.OIDCLinkToConfirm(p),
		Decidable: ch.Status == ledger.PendingOpen && p.Permits(ledger.ActionAdminister),
	}
	if ch.Status != ledger.PendingOpen {
		row.DecidedByName = byID.of(ch.DecidedBy)
	}
	if id, in, ok := ch.OrgUpdate(); ok {
		row.Org = c.orgChange(ctx, p, id, in)
	}
	if class, ok := ch.TaskClassUpdate(); ok {
		row.Class = &class
	}
	if rec, ok := ch.PrincipalCreate(); ok {
		row.Principal = rec.Name
		row.Role, row.Tenant = rec.Role, rec.Tenant
	}
	if id, role, tenant, ok := ch.RoleGrant(); ok {
		row.Principal, row.Role, row.Tenant = byID.of(id), role, tenant
	}
	if id, issuer, subject, ok := ch.OIDCLink(); ok {
		row.Principal, row.OIDCIssuer, row.OIDCSubject = byID.of(id), issuer, subject
	}
	return row
}

// orgChange compares a proposed registration's keys with the org's keys
// as registered now (none for an org not registered yet).
func (c *Console) orgChange(ctx context.Context, p ledger.Principal, id string, in ledger.OrgInput) *orgChange {
	out := &orgChange{ID: id, Input: in}
	var current []Key
	if o, err := c.cfg.Ledger.GetOrg(ctx, p, id); err == nil {
		current, _ = orgKeys(o.KeySet())
	}
	proposed, err := orgKeys(in.JWKS)
	if err != nil {
		out.KeysError = err.Error()
	}
	has := func(keys []Key, k Key) bool {
		return slices.ContainsFunc(keys, func(x Key) bool { return x.Thumbprint == k.Thumbprint })
	}
	for _, k := range proposed {
		out.Keys = append(out.Keys, changedKey{Key: k, New: !has(current, k)})
	}
	for _, k := range current {
		if !has(proposed, k) {
			out.Removed = append(out.Removed, k)
		}
	}
	return out
}

// changeView is what the pending-change forms partial receives.
type changeView struct {
	C    changeRow
	Back string
	CSRF string
	Errs map[string]string
	Form url.Values
}

// Change prepares a pending change's forms for the "change" partial.
func (v view) Change(c changeRow, back string) changeView {
	return changeView{C: c, Back: back, CSRF: v.CSRF, Errs: v.Errors, Form: v.Form}
}

// Err is the error of one of the change's fields.
func (cv changeView) Err(field string) string { return cv.Errs["change-"+cv.C.ID.String()+"."+field] }

// Reason is the refusal reason submitted with this change's form, if any.
func (cv changeView) Reason() string {
	if cv.Form.Get("change") == cv.C.ID.String() {
		return cv.Form.Get("reason")
	}
	return ""
}

// backTo re-renders the page a principals or pending-change form came
// from, with its errors.
func (c *Console) backTo(w http.ResponseWriter, r *http.Request, q *request, back string, status int, errs map[string]string) {
	path := strings.SplitN(back, "?", 2)[0]
	if org, ok := strings.CutPrefix(path, Prefix+"orgs/"); ok && org != "" && !strings.Contains(org, "/") {
		r.SetPathValue("id", org)
		c.showOrg(w, r, q, status, errs)
		return
	}
	c.showPrincipals(w, r, q, status, errs)
}

// parseFormID reads the {id} of a form's path, or answers 404.
func (c *Console) parseFormID(w http.ResponseWriter, r *http.Request, q *request, what string) (uuid.UUID, bool) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		c.renderError(w, r, q, http.StatusNotFound, "Not found", "This is not "+what+" id.")
		return uuid.Nil, false
	}
	return id, true
}

// revokeCredential revokes one credential, with a reason. The console's
// revoke is on-call's administration of credentials (ledger.
// ActionAdminister): a finance session's crafted POST is refused with 403
// before the service is asked (finance revokes its own credential with the
// API or the CLI).
func (c *Console) revokeCredential(w http.ResponseWriter, r *http.Request, q *request) {
	id, ok := c.parseFormID(w, r, q, "a credential")
	if !ok {
		return
	}
	if err := ledger.Authorize(q.p, ledger.ActionAdminister); err != nil {
		c.fail(w, r, q, err)
		return
	}
	form := "revoke-" + id.String()
	if _, err := c.cfg.Access.RevokeCredential(r.Context(), q.p, id, strings.TrimSpace(r.PostFormValue("reason"))); err != nil {
		c.formFailed(w, r, q, form, err, func(status int, errs map[string]string) { c.showPrincipals(w, r, q, status, errs) })
		return
	}
	if id == q.p.TokenID {
		// The session ended with its credential.
		c.clearCookie(w, r, sessionCookieName)
		redirect(w, r, Prefix+"sign-in?"+url.Values{"done": {"signed_out"}}.Encode())
		return
	}
	redirect(w, r, withNotice(Prefix+"principals", "credential_revoked")+"#"+form)
}

// disablePrincipal disables a principal and revokes its credentials, with
// a reason: on-call, never itself (access.Service.DisablePrincipal).
func (c *Console) disablePrincipal(w http.ResponseWriter, r *http.Request, q *request) {
	id, ok := c.parseFormID(w, r, q, "a principal")
	if !ok {
		return
	}
	form := "disable-" + id.String()
	if _, _, err := c.cfg.Access.DisablePrincipal(r.Context(), q.p, id, r.PostFormValue("reason")); err != nil {
		c.formFailed(w, r, q, form, err, func(status int, errs map[string]string) { c.showPrincipals(w, r, q, status, errs) })
		return
	}
	redirect(w, r, withNotice(Prefix+"principals", "principal_disabled")+"#principal-"+id.String())
}

// approveChange applies a pending change as a second on-call principal.
// The approval of a person's principal_create issues the second part of
// the person's split credential: it is shown once, on the answer itself
// (no redirect, never stored), for the approver to hand over.
func (c *Console) approveChange(w http.ResponseWriter, r *http.Request, q *request) {
	c.decideChange(w, r, q, "change_approved", func(id uuid.UUID) error {
		approved, err := c.cfg.Access.ApprovePendingChange(r.Context(), q.p, id)
		if err == nil && approved.IssuedTokenPart != "" {
			c.render(w, r, q, http.StatusOK, "token-part", view{Title: "Change approved: the credential's second part", Data: tokenPartPage{
				Summary: approved.Summary, Part: approved.IssuedTokenPart, Back: localPath(r.PostFormValue("back"), Prefix+"principals"),
			}})
			return errShown
		}
		return err
	})
}

// confirmLink confirms, from a session signed in through OpenID Connect
// as the identity it links, a pending oidc_link change
// (access.Service.ConfirmOIDCLink). The session ends with the link: its
// principal is no longer its own person, so the answer is the sign-in page.
func (c *Console) confirmLink(w http.ResponseWriter, r *http.Request, q *request) {
	id, ok := c.parseFormID(w, r, q, "a pending change")
	if !ok {
		return
	}
	back := localPath(r.PostFormValue("back"), Prefix+"principals")
	if _, err := c.cfg.Access.ConfirmOIDCLink(r.Context(), q.p, id); err != nil {
		c.formFailed(w, r, q, "change-"+id.String(), err, func(status int, errs map[string]string) { c.backTo(w, r, q, back, status, errs) })
		return
	}
	c.clearCookie(w, r, sessionCookieName)
	redirect(w, r, Prefix+"sign-in?"+url.Values{"done": {"link_confirmed"}}.Encode())
}

// tokenPartPage is the data of the page that shows a split credential's
// second part to its approver.
type tokenPartPage struct {
	Summary, Part, Back string
}

// errShown tells decideChange that the answer is already written.
var errShown = errors.New("answer written")

// refuseChange refuses (or, for its requester, withdraws) a pending change.
func (c *Console) refuseChange(w http.ResponseWriter, r *http.Request, q *request) {
	c.decideChange(w, r, q, "change_refused", func(id uuid.UUID) error {
		_, err := c.cfg.Access.RefusePendingChange(r.Context(), q.p, id, r.PostFormValue("reason"))
		return err
	})
}

func (c *Console) decideChange(w http.ResponseWriter, r *http.Request, q *request, notice string, do func(uuid.UUID) error) {
	id, ok := c.parseFormID(w, r, q, "a pending change")
	if !ok {
		return
	}
	back := localPath(r.PostFormValue("back"), Prefix+"principals")
	if err := do(id); errors.Is(err, errShown) {
		return
	} else if err != nil {
		c.formFailed(w, r, q, "change-"+id.String(), err, func(status int, errs map[string]string) { c.backTo(w, r, q, back, status, errs) })
		return
	}
	redirect(w, r, withNotice(back, notice)+"#change-"+id.String())
}
